package slidingwindow_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
)

// The shared spec (spec/cases.json, made from the contract's model): every call through Call
// and CallKeys, on both paths (module and script), each reply and error exactly.
func TestSharedSpec(t *testing.T) {
	raw, err := os.ReadFile("../../spec/cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Cases []struct {
			Name  string
			Calls []struct {
				Argv  []string
				Reply json.RawMessage
				Error *string
			}
		}
	}
	if err := json.Unmarshal(raw, &spec); err != nil {
		t.Fatal(err)
	}
	both(t, func(t *testing.T, e env) {
		calls := 0
		for i, c := range spec.Cases {
			tag := fmt.Sprintf("{%s-%d}", strings.Trim(key(), "rl:{}"), i)
			for _, call := range c.Calls {
				argv := make([]any, len(call.Argv))
				for j, w := range call.Argv {
					argv[j] = strings.ReplaceAll(w, "{t}", tag)
				}
				command := strings.ToLower(call.Argv[0])
				var got any
				var err error
				if command == "allowall" || command == "peekall" {
					got, err = e.sw.CallKeys(ctx, command, argv[1:]...)
				} else {
					got, err = e.sw.Call(ctx, command, argv[1].(string), argv[2:]...)
				}
				if call.Error != nil {
					if err == nil || err.Error() != *call.Error {
						t.Fatalf("%s: %v: %v, %v; want the error %q", c.Name, argv, got, err, *call.Error)
					}
				} else {
					text, _ := json.Marshal(got)
					var want any
					_ = json.Unmarshal(call.Reply, &want)
					wantText, _ := json.Marshal(want)
					if err != nil || string(text) != string(wantText) {
						t.Fatalf("%s: %v: %s, %v; want %s", c.Name, argv, text, err, wantText)
					}
				}
				calls++
			}
		}
		if calls < 400 {
			t.Fatalf("%d calls", calls)
		}
	})
}
