// Package replay is the tests every Doer is held to, over any adapter: the shared spec
// (spec/cases.json, spec/leases.json), the concurrency test and the three-master cluster test,
// each against servers from testredis.
package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
)

var (
	ctx    = context.Background()
	keySeq atomic.Int64
)

// Adapter is a Doer over the adapter under test, to the server s.
type Adapter func(t *testing.T, s *testredis.Server) slidingwindow.Doer

// Key is a fresh key with its own hash tag.
func Key() string { return fmt.Sprintf("rl:{go-%d-%d}", time.Now().UnixNano(), keySeq.Add(1)) }

// ReadSpec decodes the shared spec's file (spec/<name>, made from the contract's model) into v.
func ReadSpec(t *testing.T, name string, v any) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "../../../../spec", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("spec/%s: %v", name, err)
	}
}

// Tag is a hash tag of this run's own for the spec's case i, to put in place of {t}.
func Tag(i int) string { return fmt.Sprintf("{%s-%d}", strings.Trim(Key(), "rl:{}"), i) }

// Call sends one of the spec's raw calls (the words after SLIDINGWINDOW., {t} replaced by
// tag) through Call, or CallKeys for ALLOWALL and PEEKALL; it answers the arguments sent too.
func Call(sw *slidingwindow.Limiter, words []string, tag string) ([]any, any, error) {
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

// SameJSON tells whether a reply equals the spec's, compared as JSON; it answers both as text.
func SameJSON(got any, want json.RawMessage) (bool, string, string) {
	text, _ := json.Marshal(got)
	var w any
	_ = json.Unmarshal(want, &w)
	wantText, _ := json.Marshal(w)
	return string(text) == string(wantText), string(text), string(wantText)
}

// Both runs f on the module's path and on the script's (path "module", then "lua"): a shared
// server of each kind, a Limiter over the adapter to it.
func Both(t *testing.T, adapter Adapter, f func(t *testing.T, path string, s *testredis.Server, sw *slidingwindow.Limiter)) {
	for _, path := range []string{"module", "lua"} {
		t.Run(path, func(t *testing.T) {
			s := testredis.Shared(t, path == "module")
			f(t, path, s, slidingwindow.NewLimiter(adapter(t, s)))
		})
	}
}

// Cases is the shared spec (spec/cases.json, made from the contract's model): every call
// through Call and CallKeys on sw, each reply and error exactly.
func Cases(t *testing.T, sw *slidingwindow.Limiter) {
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
	ReadSpec(t, "cases.json", &spec)
	calls := 0
	for i, c := range spec.Cases {
		tag := Tag(i)
		for _, call := range c.Calls {
			argv, got, err := Call(sw, call.Argv, tag)
			if call.Error != nil {
				if err == nil || err.Error() != *call.Error {
					t.Fatalf("%s: %v: %v, %v; want the error %q", c.Name, argv, got, err, *call.Error)
				}
			} else if same, text, wantText := SameJSON(got, call.Reply); err != nil || !same {
				t.Fatalf("%s: %v: %s, %v; want %s", c.Name, argv, text, err, wantText)
			}
			calls++
		}
	}
	if calls < 400 {
		t.Fatalf("%d calls", calls)
	}
}

// Suite is what every adapter is held to, on both paths: the shared spec (Cases), the lease
// scenarios (Leases) and the crowd (NeverOverMax).
func Suite(t *testing.T, adapter Adapter) {
	t.Run("spec/cases.json", func(t *testing.T) {
		Both(t, adapter, func(t *testing.T, _ string, _ *testredis.Server, sw *slidingwindow.Limiter) { Cases(t, sw) })
	})
	t.Run("spec/leases.json", func(t *testing.T) {
		t.Run("module", func(t *testing.T) { Leases(t, true, adapter) })
		t.Run("lua", func(t *testing.T) { Leases(t, false, adapter) })
	})
	t.Run("concurrent callers never exceed the max", func(t *testing.T) {
		Both(t, adapter, func(t *testing.T, _ string, s *testredis.Server, sw *slidingwindow.Limiter) { NeverOverMax(t, s, sw) })
	})
}
