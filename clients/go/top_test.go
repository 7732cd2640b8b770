package slidingwindow_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

// Top lists the keys refused most, with their counts; on the script path it is ErrNeedsModule.
// The server is shared with other tests: only this test's keys are compared.
func TestTopListsTheKeysRefusedMost(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		if e.name == "lua" {
			if _, err := e.sw.Top(ctx, 10); !errors.Is(err, slidingwindow.ErrNeedsModule) {
				t.Fatalf("Top on the script path: %v", err)
			}
			return
		}
		one := []slidingwindow.Limit{{Window: time.Minute, Max: 1}}
		a, b := key(), key()
		for _, c := range []struct {
			key      string
			refusals int
		}{{a, 3}, {b, 1}} {
			for i := 0; i <= c.refusals; i++ {
				r := must(t)(e.sw.AllowWith(ctx, c.key, one, at(nowMs)))
				if r.Allowed != (i == 0) {
					t.Fatalf("%s call %d: %+v", c.key, i, r)
				}
			}
		}
		top, err := e.sw.Top(ctx, 1024)
		if err != nil {
			t.Fatal(err)
		}
		var mine []slidingwindow.TopEntry
		for _, entry := range top {
			if entry.Key == a || entry.Key == b {
				mine = append(mine, entry)
			}
		}
		want := []slidingwindow.TopEntry{{Key: a, Refused: 3}, {Key: b, Refused: 1}}
		if !reflect.DeepEqual(mine, want) {
			t.Fatalf("Top: %+v, want %+v", mine, want)
		}
		if _, err := e.sw.Top(ctx, 0); err == nil {
			t.Fatal("Top(0) answered")
		}
	})
}
