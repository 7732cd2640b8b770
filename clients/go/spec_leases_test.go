package slidingwindow_test

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

// leaseSpec is spec/leases.json: lease scenarios from a model of the helpers' lease policy over
// the contract's model, each replayed with a clock of the test's.
type leaseSpec struct {
	T0        int64 `json:"t0"`
	Scenarios []struct {
		Name       string     `json:"name"`
		Key        string     `json:"key"`
		Limits     [][2]int64 `json:"limits"`
		Size       int64      `json:"size"`
		DurationMs int64      `json:"duration_ms"`
		Invalid    bool       `json:"invalid"`
		Steps      []struct {
			At       int64           `json:"at"`
			Op       string          `json:"op"`
			Reply    json.RawMessage `json:"reply"`
			Argv     []string        `json:"argv"`
			Returned *int64          `json:"returned"`
			Calls    *leaseCalls     `json:"calls"`
		} `json:"steps"`
	} `json:"scenarios"`
}

// leaseCalls is how many of each command the server ran during a step.
type leaseCalls struct {
	Allow  int64 `json:"allow"`
	Peek   int64 `json:"peek"`
	Refund int64 `json:"refund"`
}

// commandCalls is the module's commands run so far, from INFO commandstats (0 for one never run).
func commandCalls(t *testing.T, s *testredis.Server) leaseCalls {
	t.Helper()
	info, err := redis.String(s.Do("INFO", "commandstats"))
	if err != nil {
		t.Fatal(err)
	}
	var c leaseCalls
	for _, line := range strings.Split(info, "\r\n") {
		name, stats, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		var n *int64
		switch name {
		case "cmdstat_slidingwindow.allow":
			n = &c.Allow
		case "cmdstat_slidingwindow.peek":
			n = &c.Peek
		case "cmdstat_slidingwindow.refund":
			n = &c.Refund
		default:
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		if *n, err = strconv.ParseInt(calls, 10, 64); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
	}
	return c
}

// leaseReply is a Leaser's Result as the spec writes it: [allowed, count, remaining,
// retry_after_ms, reset_after_ms], the binding limit's figures, Never as -1.
func leaseReply(r slidingwindow.Result) []int64 {
	ms := func(d time.Duration) int64 {
		if d == slidingwindow.Never {
			return -1
		}
		return d.Milliseconds()
	}
	allowed := int64(0)
	if r.Allowed {
		allowed = 1
	}
	return []int64{allowed, r.Count, r.Remaining, ms(r.RetryAfter), ms(r.ResetAfter)}
}

// The shared lease scenarios (spec/leases.json), on the module's path: each on a Leaser whose
// Clock answers the step's t0 + at, every reply, every close's refund, and the commands the
// server ran during each step (INFO commandstats) as the spec says; another client's raw calls
// between them; a config the spec calls invalid refused by NewLeaser. On a server of its own,
// so that no other test's calls are counted.
func TestSharedLeaseSpec(t *testing.T) {
	var spec leaseSpec
	readSpec(t, "leases.json", &spec)
	if len(spec.Scenarios) == 0 {
		t.Fatal("spec/leases.json has no scenarios")
	}
	s, err := testredis.Start(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	sw := slidingwindow.NewLimiter(redigo.Pool(s.Pool()), slidingwindow.WithPath(slidingwindow.Module))
	ops := map[string]int{}
	for i, sc := range spec.Scenarios {
		i, sc := i, sc
		t.Run(sc.Name, func(t *testing.T) {
			tag := specTag(i)
			limits := make([]slidingwindow.Limit, len(sc.Limits))
			for j, l := range sc.Limits {
				if l[0] < 1 || l[0] > int64(1<<63-1)/int64(time.Second) {
					t.Fatalf("a window of %d s is not a time.Duration", l[0])
				}
				limits[j] = slidingwindow.Limit{Window: time.Duration(l[0]) * time.Second, Max: l[1]}
			}
			var clk clock
			clk.ms.Store(spec.T0)
			lsr, err := sw.NewLeaser(strings.ReplaceAll(sc.Key, "{t}", tag), limits, slidingwindow.LeaseConfig{
				Size:     sc.Size,
				Duration: time.Duration(sc.DurationMs) * time.Millisecond,
				Clock:    clk.now,
			})
			if sc.Invalid {
				ops["invalid"]++
				if err == nil {
					lsr.Close(ctx)
					t.Fatal("NewLeaser made a Leaser of a config the spec calls invalid")
				}
				if !errors.Is(err, slidingwindow.ErrLease) && !errors.Is(err, slidingwindow.ErrWindow) && !errors.Is(err, slidingwindow.ErrNoLimits) {
					t.Fatalf("NewLeaser: %v; want an error of a bad argument", err)
				}
				if len(sc.Steps) != 0 {
					t.Fatalf("an invalid scenario with %d steps", len(sc.Steps))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer lsr.Close(ctx)
			for j, st := range sc.Steps {
				ops[st.Op]++
				clk.ms.Store(spec.T0 + st.At)
				before, refunded := commandCalls(t, s), lsr.Stats().Refunded
				var what string
				switch st.Op {
				case "allow":
					r, err := lsr.Allow(ctx)
					if err != nil {
						t.Fatalf("step %d (at %d, allow): %v", j, st.At, err)
					}
					what = "allow"
					if same, got, want := sameJSON(leaseReply(r), st.Reply); !same {
						t.Errorf("step %d (at %d, allow): %s, want %s (%+v)", j, st.At, got, want, r)
					}
				case "close":
					if err := lsr.Close(ctx); err != nil {
						t.Fatalf("step %d (at %d, close): %v", j, st.At, err)
					}
					what = "close"
					// Close answers only an error: what its REFUND took back is in the stats.
					if st.Returned == nil {
						t.Fatalf("step %d (at %d, close): no returned", j, st.At)
					}
					if got := lsr.Stats().Refunded - refunded; got != *st.Returned {
						t.Errorf("step %d (at %d, close): %d permits taken back, want %d", j, st.At, got, *st.Returned)
					}
				case "call":
					argv, got, err := specCall(sw, st.Argv, tag)
					if same, text, want := sameJSON(got, st.Reply); err != nil || !same {
						t.Fatalf("step %d (at %d): %v: %s, %v; want %s", j, st.At, argv, text, err, want)
					}
					continue
				default:
					t.Fatalf("step %d: unknown op %q", j, st.Op)
				}
				after := commandCalls(t, s)
				got := leaseCalls{after.Allow - before.Allow, after.Peek - before.Peek, after.Refund - before.Refund}
				if st.Calls == nil {
					t.Fatalf("step %d (at %d, %s): no calls", j, st.At, what)
				}
				if got != *st.Calls {
					t.Errorf("step %d (at %d, %s): the server ran %+v, want %+v", j, st.At, what, got, *st.Calls)
				}
				// The steps after a wrong one start from another state.
				if t.Failed() {
					t.FailNow()
				}
			}
		})
	}
	for _, op := range []string{"allow", "close", "call", "invalid"} {
		if ops[op] == 0 {
			t.Errorf("spec/leases.json has no %s step", op)
		}
	}
}
