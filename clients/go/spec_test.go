package slidingwindow_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

// readSpec decodes the shared spec's file (spec/<name>, made from the contract's model) into v.
func readSpec(t *testing.T, name string, v any) {
	t.Helper()
	raw, err := os.ReadFile("../../spec/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("spec/%s: %v", name, err)
	}
}

// specTag is a hash tag of this run's own for the spec's case i, to put in place of {t}.
func specTag(i int) string { return fmt.Sprintf("{%s-%d}", strings.Trim(key(), "rl:{}"), i) }

// specCall sends one of the spec's raw calls (the words after SLIDINGWINDOW., {t} replaced by
// tag) through Call, or CallKeys for ALLOWALL and PEEKALL; it answers the arguments sent too.
func specCall(sw *slidingwindow.Limiter, words []string, tag string) ([]any, any, error) {
	argv := make([]any, len(words))
	for j, w := range words {
		argv[j] = strings.ReplaceAll(w, "{t}", tag)
	}
	command := strings.ToLower(words[0])
	if command == "allowall" || command == "peekall" {
		got, err := sw.CallKeys(ctx, command, argv[1:]...)
		return argv, got, err
	}
	got, err := sw.Call(ctx, command, argv[1].(string), argv[2:]...)
	return argv, got, err
}

// sameJSON tells whether a reply equals the spec's, compared as JSON; it answers both as text.
func sameJSON(got any, want json.RawMessage) (bool, string, string) {
	text, _ := json.Marshal(got)
	var w any
	_ = json.Unmarshal(want, &w)
	wantText, _ := json.Marshal(w)
	return string(text) == string(wantText), string(text), string(wantText)
}

// The shared spec (spec/cases.json, made from the contract's model): every call through Call
// and CallKeys, on both paths (module and script), each reply and error exactly.
func TestSharedSpec(t *testing.T) {
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
	readSpec(t, "cases.json", &spec)
	both(t, func(t *testing.T, e env) {
		calls := 0
		for i, c := range spec.Cases {
			tag := specTag(i)
			for _, call := range c.Calls {
				argv, got, err := specCall(e.sw, call.Argv, tag)
				if call.Error != nil {
					if err == nil || err.Error() != *call.Error {
						t.Fatalf("%s: %v: %v, %v; want the error %q", c.Name, argv, got, err, *call.Error)
					}
				} else if same, text, wantText := sameJSON(got, call.Reply); err != nil || !same {
					t.Fatalf("%s: %v: %s, %v; want %s", c.Name, argv, text, err, wantText)
				}
				calls++
			}
		}
		if calls < 400 {
			t.Fatalf("%d calls", calls)
		}
	})
}
