package slidingwindow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

// late runs f on both paths with lateness g: a server of its own with the module and
// slidingwindow.lateness set to g, and the shared plain server with a Limiter passing g to the
// script (WithLateness).
func late(t *testing.T, g time.Duration, f func(t *testing.T, e env)) {
	t.Run("module", func(t *testing.T) {
		s, err := testredis.Start(true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		do(t, s, "CONFIG", "SET", "slidingwindow.lateness", int64(g/time.Millisecond))
		f(t, env{"module", s, slidingwindow.NewLimiter(redigo.Pool(s.Pool()), slidingwindow.WithLateness(g))})
	})
	t.Run("lua", func(t *testing.T) {
		s := testredis.Shared(t, false)
		f(t, env{"lua", s, slidingwindow.NewLimiter(redigo.Pool(s.Pool()), slidingwindow.WithLateness(g))})
	})
}

func state(count, remaining, retryMs, resetMs int64, key string, l slidingwindow.Limit) slidingwindow.LimitState {
	r := result(false, count, remaining, retryMs, resetMs, 0, key, l)
	return slidingwindow.LimitState{Key: key, Limit: l, Count: count, Remaining: remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}
}

func TestDetailGivesEveryLimitAndNow(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		limits := []slidingwindow.Limit{second3, minute}
		for i := int64(0); i < 3; i++ {
			must(t)(e.sw.AllowWith(ctx, k, limits, at(nowMs+i)))
		}
		want := result(false, 3, 0, 997, 999, 0, k, second3)
		want.Limits = []slidingwindow.LimitState{state(3, 0, 997, 999, k, second3), state(3, 2, 0, 59_999, k, minute)}
		want.Now = time.UnixMilli(nowMs + 3)
		peeked := must(t)(e.sw.PeekWith(ctx, k, limits, slidingwindow.Detail(), at(nowMs+3)))
		if r := must(t)(e.sw.AllowWith(ctx, k, limits, slidingwindow.Detail(), at(nowMs+3))); !same(r, want) || !same(peeked, want) {
			t.Fatalf("allow %+v, peek %+v; want %+v", r, peeked, want)
		}
		// Without Detail, neither.
		if r := must(t)(e.sw.AllowWith(ctx, k, limits, at(nowMs+3))); r.Limits != nil || !r.Now.IsZero() {
			t.Fatalf("without Detail: %+v", r)
		}
		// A single limit has a state too; with "*" Now is the server's clock.
		before := serverMs(t, e.s)
		r := must(t)(e.sw.AllowWith(ctx, key(), []slidingwindow.Limit{minute}, slidingwindow.Detail()))
		after := serverMs(t, e.s)
		if len(r.Limits) != 1 || r.Limits[0].Count != 1 || r.Limits[0].Remaining != 4 || r.Now.UnixMilli() < before || r.Now.UnixMilli() > after {
			t.Fatalf("on the server's clock, in [%d, %d]: %+v", before, after, r)
		}
	})
}

func TestDetailOverSeveralKeys(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		user, tenant := k+":user", k+":tenant"
		two := slidingwindow.Limit{Window: time.Minute, Max: 2}
		keyed := []slidingwindow.Keyed{{Key: user, Limits: []slidingwindow.Limit{second3, two}}, {Key: tenant, Limits: []slidingwindow.Limit{minute}}}
		must(t)(e.sw.AllowWith(ctx, tenant, []slidingwindow.Limit{minute}, at(nowMs-10)))
		want := result(true, 1, 1, 0, 60_000, 1, user, two)
		want.Limits = []slidingwindow.LimitState{
			state(1, 2, 0, 1_000, user, second3), state(1, 1, 0, 60_000, user, two), state(2, 3, 0, 60_000, tenant, minute),
		}
		want.Now = time.UnixMilli(nowMs)
		if r := must(t)(e.sw.AllowAll(ctx, keyed, slidingwindow.Detail(), at(nowMs))); !same(r, want) {
			t.Fatalf("%+v, want %+v", r, want)
		}
	})
}

// The contract's worked example (on a minute, so that the key outlives a slow test): 100
// permits for 100 ms, 60 handed out, 40 returned.
func TestLeaseLogsItsPermitsAtItsEnd(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		global := slidingwindow.Limit{Window: time.Minute, Max: 2000}
		ls := []slidingwindow.Limit{global}
		lease := []slidingwindow.Option{slidingwindow.Cost(100), slidingwindow.Lease(100 * time.Millisecond), slidingwindow.Detail(), at(nowMs)}
		want := result(true, 100, 1900, 0, 60_100, 0, k, global)
		want.Limits = []slidingwindow.LimitState{state(100, 1900, 0, 60_100, k, global)}
		want.Now = time.UnixMilli(nowMs)
		if p := must(t)(e.sw.PeekWith(ctx, k, ls, lease...)); !same(p, want) || integer(t, e.s, "EXISTS", k) != 0 {
			t.Fatalf("peek %+v, want %+v", p, want)
		}
		before := serverMs(t, e.s)
		if r := must(t)(e.sw.AllowWith(ctx, k, ls, lease...)); !same(r, want) {
			t.Fatalf("%+v, want %+v", r, want)
		}
		after := serverMs(t, e.s)
		_, scores := members(t, e.s, k)
		for _, s := range scores {
			if s != nowMs+100 {
				t.Fatalf("a permit scored %d, not at the lease's end %d", s, nowMs+100)
			}
		}
		// The TTL covers the lease: the window plus 100 ms, from the server's clock.
		if expiry := integer(t, e.s, "PEXPIRETIME", k); len(scores) != 100 || expiry < before+60_100 || expiry > after+60_100 {
			t.Fatalf("%d members, expiry %d not in [%d, %d]", len(scores), expiry, before+60_100, after+60_100)
		}
		if n, err := e.sw.Refund(ctx, k, 40, time.UnixMilli(nowMs+100)); n != 40 || err != nil {
			t.Fatalf("refund: %d, %v", n, err)
		}
		for _, c := range []struct{ at, count int64 }{{nowMs + 60_050, 61}, {nowMs + 60_100, 1}} {
			if r := must(t)(e.sw.PeekWith(ctx, k, ls, at(c.at))); r.Count != c.count {
				t.Fatalf("peek at %d: %+v, want count %d", c.at, r, c.count)
			}
		}
		// On the server's clock the permits end DETAIL's now + the lease.
		k2 := key()
		r := must(t)(e.sw.AllowWith(ctx, k2, ls, slidingwindow.Cost(3), slidingwindow.Lease(250*time.Millisecond), slidingwindow.Detail()))
		if _, scores := members(t, e.s, k2); len(scores) != 3 || scores[0] != r.Now.UnixMilli()+250 {
			t.Fatalf("scores %v, DETAIL's now %d", scores, r.Now.UnixMilli())
		}
	})
}

func TestLeaseErrors(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		// On the server's clock the server checks the end (a Duration cannot reach 2^53 ms).
		_, err := e.sw.Call(ctx, "allow", k, 60, 5, "*", "LEASE", "9007199254740000")
		if err == nil || !strings.HasPrefix(err.Error(), "ERR LEASE must be an integer between 1 and 9007199254740992 - now") {
			t.Fatalf("a lease past 2^53: %v", err)
		}
		absent(t, e.s, k, "an error wrote")
	})
	// The rest is refused before sending.
	sent := 0
	rdb := unsent(&sent)
	sw := slidingwindow.NewLimiter(rdb, slidingwindow.WithPath(slidingwindow.Module))
	one := []slidingwindow.Limit{minute}
	for _, c := range []optionCase{
		{[]slidingwindow.Option{slidingwindow.Lease(0)}, "0s is not a whole number of ms"},
		{[]slidingwindow.Option{slidingwindow.Lease(-time.Millisecond)}, "-1ms is not"},
		{[]slidingwindow.Option{slidingwindow.Lease(1500 * time.Microsecond)}, "1.5ms is not"},
		{[]slidingwindow.Option{slidingwindow.Lease(11 * time.Millisecond), at(1<<53 - 10)}, "now 9007199254740982 + 11 ms is beyond 2^53 ms"},
	} {
		for name, call := range map[string]func() error{
			"AllowWith": func() error { _, err := sw.AllowWith(ctx, "k", one, c.opts...); return err },
			"PeekAll": func() error {
				_, err := sw.PeekAll(ctx, []slidingwindow.Keyed{{Key: "k", Limits: one}}, c.opts...)
				return err
			},
		} {
			if err := call(); !errors.Is(err, slidingwindow.ErrLease) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s %v: %v", name, c.want, err)
			}
		}
	}
	// Exactly at 2^53 is the last end the commands take.
	if _, err := sw.AllowWith(ctx, "k", one, slidingwindow.Lease(10*time.Millisecond), at(1<<53-10)); err == nil || err.Error() != "not sent" {
		t.Fatalf("a lease ending at 2^53: %v", err)
	}
	for _, g := range []time.Duration{-time.Millisecond, 1500 * time.Microsecond, 24*time.Hour + time.Millisecond} {
		bad := slidingwindow.NewLimiter(rdb, slidingwindow.WithLateness(g), slidingwindow.WithPath(slidingwindow.Lua))
		if _, err := bad.Allow(ctx, "k", minute); !errors.Is(err, slidingwindow.ErrLateness) || !strings.Contains(err.Error(), g.String()) {
			t.Fatalf("lateness %v: %v", g, err)
		}
		if _, err := bad.Refund(ctx, "k", 1, time.Time{}); !errors.Is(err, slidingwindow.ErrLateness) {
			t.Fatalf("refund, lateness %v: %v", g, err)
		}
	}
	if sent != 1 {
		t.Fatalf("%d commands sent", sent)
	}
}

// The script gets the lateness after its command word; the module has its own config.
func TestLatenessReachesTheScript(t *testing.T) {
	var words []string
	record := func(rdb slidingwindow.Doer) slidingwindow.Doer {
		return slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
			if args[0] == "EVALSHA" {
				words = append(words, fmt.Sprint(args[4]))
			}
			return rdb.Do(ctx, args...)
		})
	}
	s := testredis.Shared(t, false)
	for _, c := range []struct {
		g    time.Duration
		want string
	}{{0, "allow"}, {5 * time.Second, "allow lateness 5000"}, {24 * time.Hour, "allow lateness 86400000"}} {
		words = nil
		sw := slidingwindow.NewLimiter(record(redigo.Pool(s.Pool())), slidingwindow.WithLateness(c.g))
		must(t)(sw.Allow(ctx, key(), minute))
		if fmt.Sprint(words) != "["+c.want+"]" {
			t.Fatalf("lateness %v: ARGV[1] %q, want %q", c.g, words, c.want)
		}
	}
}

// Callers out of order by up to the lateness are decided exactly; without it they are not.
// Two requests at T fill a 1 s window of 2; a caller at T+1200 is admitted and trims them
// (at lateness 0); a caller at T+900, arriving last, still has both in its window.
func TestLatenessKeepsWhatALateCallerCounts(t *testing.T) {
	two := slidingwindow.Limit{Window: time.Second, Max: 2}
	stream := func(t *testing.T, e env) (bool, []int64) {
		k := key()
		ls := []slidingwindow.Limit{two}
		for _, ms := range []int64{0, 0, 1200} {
			if r := must(t)(e.sw.AllowWith(ctx, k, ls, at(nowMs+ms))); !r.Allowed {
				t.Fatalf("at T+%d: %+v", ms, r)
			}
		}
		r := must(t)(e.sw.AllowWith(ctx, k, ls, at(nowMs+900)))
		_, scores := members(t, e.s, k)
		return r.Allowed, scores
	}
	t.Run("lateness 0", func(t *testing.T) {
		both(t, func(t *testing.T, e env) {
			// Over-admitted: T, T and T+900 are three in (T-100, T+900].
			if allowed, scores := stream(t, e); !allowed || len(scores) != 2 {
				t.Fatalf("admitted %v, scores %v", allowed, scores)
			}
		})
	})
	t.Run("lateness 500ms", func(t *testing.T) {
		late(t, 500*time.Millisecond, func(t *testing.T, e env) {
			before := serverMs(t, e.s)
			allowed, scores := stream(t, e)
			if allowed || len(scores) != 3 {
				t.Fatalf("admitted %v, scores %v", allowed, scores)
			}
			k := key()
			must(t)(e.sw.AllowWith(ctx, k, []slidingwindow.Limit{two}, at(nowMs)))
			// The TTL is the window plus the lateness.
			if expiry := integer(t, e.s, "PEXPIRETIME", k); expiry < before+1500 || expiry > serverMs(t, e.s)+1500 {
				t.Fatalf("expiry %d, from %d", expiry, before)
			}
		})
	})
}
