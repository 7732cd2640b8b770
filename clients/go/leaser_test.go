package slidingwindow_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

// clock is a caller's own clock that moves only when told.
type clock struct{ ms atomic.Int64 }

func (c *clock) now() time.Time { return time.UnixMilli(c.ms.Load()) }

// counted counts the commands sent through rdb, the path's question (COMMAND INFO) aside.
func counted(rdb slidingwindow.Doer, n *atomic.Int64) slidingwindow.Doer {
	return slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
		if args[0] != "COMMAND" {
			n.Add(1)
		}
		return rdb.Do(ctx, args...)
	})
}

// handout is a permit's Result as the test expects it: the lease's state with held permits
// still counted as remaining.
func handout(count, remaining, retryMs, resetMs, nowMs int64, k string, l slidingwindow.Limit) slidingwindow.Result {
	r := result(true, count, remaining, retryMs, resetMs, 0, k, l)
	r.Limits = []slidingwindow.LimitState{{Key: k, Limit: l, Count: count, Remaining: remaining, RetryAfter: r.RetryAfter, ResetAfter: r.ResetAfter}}
	r.Now = time.UnixMilli(nowMs)
	return r
}

// One key at 10 a minute, leases of 4 for 100 ms on the caller's clock: permits from memory,
// a new lease (after refunding the old one's unused permit) once the first ends, then near the
// limit a refused lease and a lease of the 3 left that hands out every last permit, then a
// PEEK's refusal remembered until its wait.
func TestLeaserHandsOutFromMemoryThenExactlyToTheLast(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		ten := slidingwindow.Limit{Window: time.Minute, Max: 10}
		do(t, e.s, "SCRIPT", "LOAD", slidingwindow.Script) // no NOSCRIPT round trip in the count
		var calls atomic.Int64
		var clk clock
		clk.ms.Store(nowMs)
		sw := slidingwindow.NewLimiter(counted(redigo.Pool(e.s.Pool()), &calls))
		lsr, err := sw.NewLeaser(k, []slidingwindow.Limit{ten}, slidingwindow.LeaseConfig{Size: 4, Duration: 100 * time.Millisecond, Clock: clk.now})
		if err != nil {
			t.Fatal(err)
		}
		step := func(at, wantCalls int64, want slidingwindow.Result) {
			t.Helper()
			clk.ms.Store(at)
			r, err := lsr.Allow(ctx)
			if err != nil || !same(r, want) || calls.Load() != wantCalls {
				t.Fatalf("at T+%d: %+v, %v after %d calls; want %+v after %d", at-nowMs, r, err, calls.Load(), want, wantCalls)
			}
		}
		// The lease at T: 4 permits logged at T+100 (count 4, reset 60100); 3 held after the first.
		step(nowMs, 1, handout(1, 9, 0, 60_100, nowMs, k, ten))
		step(nowMs+10, 1, handout(2, 8, 0, 60_090, nowMs+10, k, ten))
		// Its last ms is still in it.
		step(nowMs+99, 1, handout(3, 7, 0, 60_001, nowMs+99, k, ten))
		if _, scores := members(t, e.s, k); fmt.Sprint(scores) != fmt.Sprint([]int64{nowMs + 100, nowMs + 100, nowMs + 100, nowMs + 100}) {
			t.Fatalf("the first lease's scores %v", scores)
		}
		// Its end is not: REFUND 1 AT T+100, then a lease at T+100 (count 3 + 4, its permits at
		// T+200).
		step(nowMs+100, 3, handout(4, 6, 0, 60_100, nowMs+100, k, ten))
		step(nowMs+100, 3, handout(5, 5, 0, 60_100, nowMs+100, k, ten))
		step(nowMs+100, 3, handout(6, 4, 0, 60_100, nowMs+100, k, ten))
		// The last permit: none held, but 3 remain, so no wait.
		step(nowMs+100, 3, handout(7, 3, 0, 60_100, nowMs+100, k, ten))
		// 7 + 4 > 10: the lease is refused, and a lease of the 3 left admits (its permits at
		// T+200 too). Its last permit leaves none: the wait the lease call gave for 3 more, the
		// first lease's permits gone.
		last := func(count, remaining int64) slidingwindow.Result {
			r := handout(count, remaining, 0, 60_100, nowMs+100, k, ten)
			if remaining == 0 {
				r.RetryAfter, r.Limits[0].RetryAfter = 60_000*time.Millisecond, 60_000*time.Millisecond
			}
			return r
		}
		step(nowMs+100, 5, last(8, 2))
		step(nowMs+100, 5, last(9, 1))
		step(nowMs+100, 5, last(10, 0))
		// None left: a PEEK's refusal (the wait for one more), then the same from memory, its
		// waits running down, until it has passed.
		refused := last(10, 0)
		refused.Allowed = false
		step(nowMs+100, 6, refused)
		step(nowMs+100, 6, refused)
		later := refused
		later.RetryAfter, later.ResetAfter = time.Millisecond, 101*time.Millisecond
		later.Limits = []slidingwindow.LimitState{{Key: k, Limit: ten, Count: 10, RetryAfter: later.RetryAfter, ResetAfter: later.ResetAfter}}
		later.Now = time.UnixMilli(nowMs + 60_099)
		step(nowMs+60_099, 6, later)
		if n := integer(t, e.s, "ZCARD", k); n != 10 {
			t.Fatalf("%d logged, want every last permit of 10", n)
		}
		if err := lsr.Close(ctx); err != nil {
			t.Fatal(err)
		}
		want := slidingwindow.LeaserStats{Leases: 3, Refused: 1, Permits: 11, Peeks: 1, Remembered: 2, Leased: 10, Refunds: 1, Refunded: 1}
		if st := lsr.Stats(); st != want || calls.Load() != 6 {
			t.Fatalf("stats %+v after %d calls, want %+v", st, calls.Load(), want)
		}
		if _, err := lsr.Allow(ctx); !errors.Is(err, slidingwindow.ErrClosed) {
			t.Fatalf("after Close: %v", err)
		}
	})
}

func TestLeaserReturnsWhatItDidNotHandOut(t *testing.T) {
	ten := []slidingwindow.Limit{{Window: time.Minute, Max: 10}}
	t.Run("on Close", func(t *testing.T) {
		both(t, func(t *testing.T, e env) {
			k := key()
			var clk clock
			clk.ms.Store(nowMs)
			lsr, err := e.sw.NewLeaser(k, ten, slidingwindow.LeaseConfig{Size: 4, Duration: time.Second, Clock: clk.now})
			if err != nil {
				t.Fatal(err)
			}
			must(t)(lsr.Allow(ctx))
			if err := lsr.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if _, scores := members(t, e.s, k); len(scores) != 1 || scores[0] != nowMs+1000 {
				t.Fatalf("scores %v after Close", scores)
			}
			if st := lsr.Stats(); st.Refunds != 1 || st.Refunded != 3 {
				t.Fatalf("%+v", st)
			}
		})
	})
	t.Run("at the lease's end, with nobody asking", func(t *testing.T) {
		both(t, func(t *testing.T, e env) {
			k := key()
			lsr, err := e.sw.NewLeaser(k, ten, slidingwindow.LeaseConfig{Size: 5, Duration: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer lsr.Close(ctx)
			before := serverMs(t, e.s)
			r := must(t)(lsr.Allow(ctx))
			after := serverMs(t, e.s)
			waitUntil(t, "the refund of 4", func() bool { return integer(t, e.s, "ZCARD", k) == 1 })
			_, scores := members(t, e.s, k)
			// The server's now + 50, which the permit's own time is at or after.
			end := scores[0]
			if end < before+50 || end > after+50 || r.Now.UnixMilli() < end-50 || r.Now.UnixMilli() > end {
				t.Fatalf("the lease ends at %d (server clock in [%d, %d]); the permit's time %d", end, before, after, r.Now.UnixMilli())
			}
			if st := lsr.Stats(); st.Refunds != 1 || st.Refunded != 4 || st.Leases != 1 {
				t.Fatalf("%+v", st)
			}
		})
	})
	t.Run("a lease whose reply comes after its end", func(t *testing.T) {
		both(t, func(t *testing.T, e env) {
			k := key()
			pool := redigo.Pool(e.s.Pool())
			slow := slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
				reply, err := pool.Do(ctx, args...)
				time.Sleep(5 * time.Millisecond)
				return reply, err
			})
			lsr, err := slidingwindow.NewLimiter(slow).NewLeaser(k, ten, slidingwindow.LeaseConfig{Size: 4, Duration: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			r := must(t)(lsr.Allow(ctx))
			if err := lsr.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// Every permit back, and the request admitted by an exact call.
			if _, scores := members(t, e.s, k); !r.Allowed || len(scores) != 1 || scores[0] != r.Now.UnixMilli() {
				t.Fatalf("%+v; scores %v", r, scores)
			}
			if st := lsr.Stats(); st != (slidingwindow.LeaserStats{Leases: 1, Permits: 4, Exact: 1, Refunds: 1, Refunded: 4}) {
				t.Fatalf("%+v", st)
			}
		})
	})
}

// A lease leaving no permit makes the next request PEEK first; its own refund at the lease's
// end forgets that: the next request leases at once (5 refused, then the 4 left).
func TestLeaserForgetsWhatItKnewOnItsOwnRefund(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		ten := []slidingwindow.Limit{{Window: time.Minute, Max: 10}}
		must(t)(e.sw.AllowN(ctx, k, 5, ten...))
		do(t, e.s, "SCRIPT", "LOAD", slidingwindow.Script) // no NOSCRIPT round trip in the count
		var calls atomic.Int64
		sw := slidingwindow.NewLimiter(counted(redigo.Pool(e.s.Pool()), &calls))
		lsr, err := sw.NewLeaser(k, ten, slidingwindow.LeaseConfig{Size: 5, Duration: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer lsr.Close(ctx)
		if r := must(t)(lsr.Allow(ctx)); !r.Allowed {
			t.Fatalf("%+v", r)
		}
		waitUntil(t, "the refund of 4", func() bool { return integer(t, e.s, "ZCARD", k) == 6 })
		if r := must(t)(lsr.Allow(ctx)); !r.Allowed {
			t.Fatalf("%+v", r)
		}
		if st := lsr.Stats(); st.Peeks != 0 || st.Leases != 2 || st.Refused != 1 || st.Permits != 9 || calls.Load() != 4 {
			t.Fatalf("%+v after %d calls", st, calls.Load())
		}
	})
}

func TestLeaserConfigIsChecked(t *testing.T) {
	sw := slidingwindow.NewLimiter(slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
		return nil, errors.New("not sent")
	}))
	ten := []slidingwindow.Limit{slidingwindow.PerSecond(10), slidingwindow.PerMinute(6)}
	for _, c := range []struct {
		limits []slidingwindow.Limit
		config slidingwindow.LeaseConfig
		is     error
		text   string
	}{
		{ten, slidingwindow.LeaseConfig{Size: 7, Duration: time.Second}, slidingwindow.ErrLease, "size 7 is not between 1 and the smallest max, 6"},
		{ten, slidingwindow.LeaseConfig{Size: 0, Duration: time.Second}, slidingwindow.ErrLease, "size 0"},
		{ten, slidingwindow.LeaseConfig{Size: 2, Duration: 0}, slidingwindow.ErrLease, "0s is not a whole number of ms"},
		{ten, slidingwindow.LeaseConfig{Size: 2, Duration: 1500 * time.Microsecond}, slidingwindow.ErrLease, "1.5ms"},
		{nil, slidingwindow.LeaseConfig{Size: 2, Duration: time.Second}, slidingwindow.ErrNoLimits, ""},
		{[]slidingwindow.Limit{{Window: 1500 * time.Millisecond, Max: 5}}, slidingwindow.LeaseConfig{Size: 2, Duration: time.Second}, slidingwindow.ErrWindow, "1.5s"},
	} {
		if _, err := sw.NewLeaser("k", c.limits, c.config); !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.text) {
			t.Fatalf("%+v: %v", c.config, err)
		}
	}
}

// waitUntil polls cond until it holds (10 s at most).
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// moduleInfo is a field of INFO slidingwindow.
func moduleInfo(t *testing.T, s *testredis.Server, field string) int64 {
	t.Helper()
	info, err := redis.String(s.Do("INFO", "slidingwindow"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v := strings.TrimPrefix(line, "slidingwindow_"+field+":"); v != line {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in INFO slidingwindow:\n%s", field, info)
	return 0
}

// Two Leasers on one key, standing for two nodes (each its own connections), 8 goroutines
// each, offering about 2.4 times the limit, paced so that a node's lease lasts past its
// duration (50 a second a node, leases of 5 for 50 ms): every window of the handouts' times (each permit's
// Now, on the clock its lease uses) holds at most max, on the server's clock and on the
// callers' own with the server's lateness covering their disorder. One lease call at most is
// in flight per Leaser; every unused permit is refunded; near the limit leases of what is left
// hand out what no whole lease could take.
func TestLeasersNeverExceedMax(t *testing.T) {
	const (
		max     = 42 // not a multiple of the lease, so that leases leave a remainder
		size    = 5
		windows = 3
		perNode = 8
	)
	limit := slidingwindow.PerSecond(max)
	run := func(t *testing.T, e env, own bool) {
		k := key()
		var admittedBefore, refundedBefore int64
		if e.name == "module" {
			admittedBefore, refundedBefore = moduleInfo(t, e.s, "admitted_requests"), moduleInfo(t, e.s, "refunded")
		}
		type node struct {
			lsr            *slidingwindow.Leaser
			inflight, most atomic.Int64
		}
		nodes := make([]*node, 2)
		config := slidingwindow.LeaseConfig{Size: size, Duration: 50 * time.Millisecond}
		if own {
			config.Clock = time.Now
		}
		for i := range nodes {
			n := &node{}
			pool := &redis.Pool{MaxIdle: perNode, Dial: func() (redis.Conn, error) { return redis.Dial("tcp", e.s.Addr()) }}
			t.Cleanup(func() { pool.Close() })
			rdb := redigo.Pool(pool)
			watched := slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
				for _, a := range args {
					if a == "LEASE" {
						now := n.inflight.Add(1)
						defer n.inflight.Add(-1)
						for m := n.most.Load(); now > m && !n.most.CompareAndSwap(m, now); m = n.most.Load() {
						}
					}
				}
				return rdb.Do(ctx, args...)
			})
			var opts []slidingwindow.LimiterOption
			if e.name == "lua" {
				opts = append(opts, slidingwindow.WithPath(slidingwindow.Lua))
				if own {
					opts = append(opts, slidingwindow.WithLateness(time.Second))
				}
			}
			lsr, err := slidingwindow.NewLimiter(watched, opts...).NewLeaser(k, []slidingwindow.Limit{limit}, config)
			if err != nil {
				t.Fatal(err)
			}
			n.lsr, nodes[i] = lsr, n
		}
		var mu sync.Mutex
		var times []int64
		var handed atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 2*perNode)
		for _, n := range nodes {
			for g := 0; g < perNode; g++ {
				wg.Add(1)
				go func(lsr *slidingwindow.Leaser, rng *rand.Rand) {
					defer wg.Done()
					// 8 goroutines a node each asking every 160 ms on average: 50 a second.
					for ; handed.Load() < windows*max; time.Sleep(time.Duration(rng.Int63n(int64(320 * time.Millisecond)))) {
						before := time.Now().UnixMilli()
						r, err := lsr.Allow(ctx)
						if err != nil {
							errs <- err
							return
						}
						if !r.Allowed {
							continue
						}
						// A permit's time is never before the call (1 ms for the server's
						// clock read to the ms).
						if at := r.Now.UnixMilli(); at < before-1 {
							errs <- fmt.Errorf("a permit handed out at %d, asked for at %d", at, before)
							return
						}
						handed.Add(1)
						mu.Lock()
						times = append(times, r.Now.UnixMilli())
						mu.Unlock()
					}
				}(n.lsr, rand.New(rand.NewSource(int64(g))))
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		for i, s := range times {
			n := 0
			for j := i; j >= 0 && times[j] > s-1000; j-- {
				n++
			}
			if n > max {
				t.Fatalf("%d handed out in the second ending at %d (max %d)", n, s, max)
			}
		}
		closing, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var leases, leased, refused, permits int64
		for i, n := range nodes {
			if err := n.lsr.Close(closing); err != nil {
				t.Fatal(err)
			}
			st := n.lsr.Stats()
			if st.Permits-st.Leased != st.Refunded || st.Lost != 0 {
				t.Fatalf("node %d: %d permits leased, %d handed out, %d refunded: %+v", i, st.Permits, st.Leased, st.Refunded, st)
			}
			if n.most.Load() != 1 {
				t.Fatalf("node %d: %d lease calls in flight at once", i, n.most.Load())
			}
			leases, leased, refused, permits = leases+st.Leases, leased+st.Leased, refused+st.Refused, permits+st.Permits
		}
		if leases == 0 || refused == 0 || permits == leases*size {
			t.Fatalf("%d leases of %d permits, %d refused: no lease of what was left near the limit", leases, permits, refused)
		}
		if e.name == "module" {
			admitted := moduleInfo(t, e.s, "admitted_requests") - admittedBefore
			refunded := moduleInfo(t, e.s, "refunded") - refundedBefore
			if admitted-refunded != int64(len(times)) {
				t.Fatalf("the server admitted %d and took back %d, for %d handouts", admitted, refunded, len(times))
			}
		}
	}
	t.Run("server clock", func(t *testing.T) {
		both(t, func(t *testing.T, e env) { run(t, e, false) })
	})
	t.Run("own clock, lateness 1s", func(t *testing.T) {
		late(t, time.Second, func(t *testing.T, e env) { run(t, e, true) })
	})
}

// A Leaser under overload: limit 100 a second, leases of 10 for 100 ms, 8 goroutines offering
// about 10 times the limit for 5 s on one key. Once the key is full its refusals come from
// memory: at most one Redis call per 20 requests; no 1 s window of the scores logged above the
// limit; the logged permits exactly those handed out.
func TestLeaserUnderOverloadRemembersRefusals(t *testing.T) {
	const (
		max  = 100
		run  = 5 * time.Second
		gors = 8
	)
	// Each goroutine's pause between requests: together about ten times what the limit admits.
	pause := time.Duration(gors) * time.Second / (10 * max)
	both(t, func(t *testing.T, e env) {
		k := key()
		do(t, e.s, "SCRIPT", "LOAD", slidingwindow.Script) // no NOSCRIPT round trip in the count
		var calls atomic.Int64
		sw := slidingwindow.NewLimiter(counted(redigo.Pool(e.s.Pool()), &calls))
		lsr, err := sw.NewLeaser(k, []slidingwindow.Limit{slidingwindow.PerSecond(max)}, slidingwindow.LeaseConfig{Size: 10, Duration: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		stop := make(chan struct{})
		logged := watch(t, e.s, k, stop)
		var requests, admitted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, gors)
		end := time.Now().Add(run)
		for g := 0; g < gors; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ; time.Now().Before(end); time.Sleep(pause) {
					r, err := lsr.Allow(ctx)
					if err != nil {
						errs <- err
						return
					}
					requests.Add(1)
					if r.Allowed {
						admitted.Add(1)
					} else if r.RetryAfter <= 0 || r.Remaining != 0 {
						errs <- fmt.Errorf("a refusal without its wait: %+v", r)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if err := lsr.Close(ctx); err != nil {
			t.Fatal(err)
		}
		close(stop)
		scores := <-logged
		st := lsr.Stats()
		n, c, a := requests.Load(), calls.Load(), admitted.Load()
		t.Logf("%s: %d requests, %d calls (%.4f a request), %d admitted (%.0f%% of what the limit allows): %+v",
			e.name, n, c, float64(c)/float64(n), a, 100*float64(a)/(max*run.Seconds()), st)
		if n < 5*max*int64(run/time.Second) {
			t.Fatalf("%d requests: less than 5x the limit offered", n)
		}
		if c*20 > n {
			t.Fatalf("%d calls for %d requests", c, n)
		}
		if int64(len(scores)) != a {
			t.Fatalf("%d permits logged, %d handed out", len(scores), a)
		}
		for i, s := range scores {
			j := sort.Search(len(scores), func(j int) bool { return scores[j] > s-1000 })
			if i-j+1 > max {
				t.Fatalf("%d logged in the second ending at %d (max %d)", i-j+1, s, max)
			}
		}
	})
}

// watch snapshots key's members (TIME and ZRANGE in one MULTI) every 50 ms until stop, then
// sends every score the key held, sorted: a member gone while still inside its window (score >
// now - 1 s; these tests' windows are 1 s) was refunded and is not counted.
func watch(t *testing.T, s *testredis.Server, key string, stop chan struct{}) chan []int64 {
	out := make(chan []int64, 1)
	conn := s.Pool().Get()
	t.Cleanup(func() { conn.Close() })
	logged := map[string]int64{}
	snapshot := func() {
		conn.Send("MULTI")
		conn.Send("TIME")
		conn.Send("ZRANGE", key, 0, -1, "WITHSCORES")
		v, err := redis.Values(conn.Do("EXEC"))
		if err != nil {
			t.Error(err)
			return
		}
		clock, _ := redis.Int64s(v[0], nil)
		now := clock[0]*1000 + clock[1]/1000
		held, _ := redis.Int64Map(v[1], nil)
		for m, score := range logged {
			if _, ok := held[m]; !ok && score > now-1000 {
				delete(logged, m)
			}
		}
		for m, score := range held {
			logged[m] = score
		}
	}
	go func() {
		for {
			select {
			case <-stop:
				snapshot()
				scores := make([]int64, 0, len(logged))
				for _, score := range logged {
					scores = append(scores, score)
				}
				sort.Slice(scores, func(i, j int) bool { return scores[i] < scores[j] })
				out <- scores
				return
			case <-time.After(50 * time.Millisecond):
				snapshot()
			}
		}
	}()
	return out
}
