package replay

import (
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
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

// leaseCalls is how many of each command the server ran during a step; on the script's path
// every one is an EVALSHA (or EVAL), counted in Script.
type leaseCalls struct {
	Allow  int64 `json:"allow"`
	Peek   int64 `json:"peek"`
	Refund int64 `json:"refund"`
	Script int64 `json:"-"`
}

// minus is c less before.
func (c leaseCalls) minus(before leaseCalls) leaseCalls {
	return leaseCalls{c.Allow - before.Allow, c.Peek - before.Peek, c.Refund - before.Refund, c.Script - before.Script}
}

// commandCalls is the commands run so far, from INFO commandstats (0 for one never run).
func commandCalls(t *testing.T, s *testredis.Server) leaseCalls {
	t.Helper()
	info, err := s.Text("INFO", "commandstats")
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
		case "cmdstat_evalsha", "cmdstat_eval":
			n = new(int64)
		default:
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
		if *n, err = strconv.ParseInt(calls, 10, 64); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if strings.HasPrefix(name, "cmdstat_eval") {
			c.Script += *n
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

// clock is a caller's own clock that moves only when told.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

// Leases is the shared lease scenarios (spec/leases.json) on one path (the module's, or the
// script's): each on a Leaser over the adapter whose Clock answers the step's t0 + at, every
// reply, every close's refund, and the commands the server ran during each step (INFO
// commandstats) as the spec says (on the script's path, their sum as EVALSHAs); another client's
// raw calls between them; a config the spec calls invalid refused by NewLeaser. On a server of
// its own, so that no other test's calls are counted.
func Leases(t *testing.T, module bool, adapter Adapter) {
	var spec leaseSpec
	ReadSpec(t, "leases.json", &spec)
	if len(spec.Scenarios) == 0 {
		t.Fatal("spec/leases.json has no scenarios")
	}
	s, err := testredis.Start(module)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	path := slidingwindow.Lua
	if module {
		path = slidingwindow.Module
	} else if _, err := s.Do("SCRIPT", "LOAD", slidingwindow.Script); err != nil {
		// Loaded first, so that no step pays a NOSCRIPT and its EVAL.
		t.Fatal(err)
	}
	sw := slidingwindow.NewLimiter(adapter(t, s), slidingwindow.WithPath(path))
	ops := map[string]int{}
	for i, sc := range spec.Scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			tag := Tag(i)
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
					if same, got, want := SameJSON(leaseReply(r), st.Reply); !same {
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
					argv, got, err := Call(sw, st.Argv, tag)
					if same, text, want := SameJSON(got, st.Reply); err != nil || !same {
						t.Fatalf("step %d (at %d): %v: %s, %v; want %s", j, st.At, argv, text, err, want)
					}
					continue
				default:
					t.Fatalf("step %d: unknown op %q", j, st.Op)
				}
				got := commandCalls(t, s).minus(before)
				if st.Calls == nil {
					t.Fatalf("step %d (at %d, %s): no calls", j, st.At, what)
				}
				want := *st.Calls
				if !module {
					want = leaseCalls{Script: want.Allow + want.Peek + want.Refund}
				}
				if got != want {
					t.Errorf("step %d (at %d, %s): the server ran %+v, want %+v", j, st.At, what, got, want)
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
