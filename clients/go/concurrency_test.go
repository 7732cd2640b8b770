package slidingwindow_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

// Goroutines on one key with the default "*": every 1 s window of the scores actually logged
// holds at most max, and the busiest exactly max. Callers stamping their own clocks are not
// exact here: a later-stamped call trims members that an earlier-stamped call, arriving after
// it, still has in its window.
func TestConcurrentCallersNeverExceedMax(t *testing.T) {
	const (
		goroutines = 32
		max        = 10
		windows    = 3 // run until this many windows' worth is admitted
	)
	both(t, func(t *testing.T, e env) {
		k := key()
		limit := slidingwindow.PerSecond(max)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, goroutines+1)
		for g := 0; g < goroutines; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for admitted.Load() < windows*max {
					r, err := e.sw.Allow(ctx, k, limit)
					if err != nil {
						errs <- err
						return
					}
					if r.Allowed {
						admitted.Add(1)
					} else if r.RetryAfter > 0 {
						// They all wake at about the same moment, at the window's edge.
						time.Sleep(r.RetryAfter)
					}
				}
			}()
		}
		// Each member stays logged for a second at least (until a call's now passes it by the
		// window): read every 20 ms, the log's snapshots together hold every member.
		logged := map[string]int64{}
		snapshot := func() error {
			v, err := redis.Strings(e.s.Do("ZRANGE", k, 0, -1, "WITHSCORES"))
			for i := 0; err == nil && i < len(v); i += 2 {
				var score int64
				score, err = redis.Int64([]byte(v[i+1]), nil)
				logged[v[i]] = score
			}
			return err
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		for running := true; running; {
			select {
			case <-done:
				running = false
			case <-time.After(20 * time.Millisecond):
			}
			if err := snapshot(); err != nil {
				errs <- err
				break
			}
		}
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if int64(len(logged)) != admitted.Load() {
			t.Fatalf("%d members seen, %d calls admitted", len(logged), admitted.Load())
		}
		// The busiest window ends at a logged score: count (s - 1000, s] for each.
		busiest := 0
		for _, s := range logged {
			n := 0
			for _, o := range logged {
				if o > s-1000 && o <= s {
					n++
				}
			}
			if n > max {
				t.Fatalf("%d requests in the second ending at %d (max %d): %v", n, s, max, logged)
			}
			if n > busiest {
				busiest = n
			}
		}
		if busiest != max {
			t.Fatalf("the busiest second holds %d, want %d", busiest, max)
		}
	})
}
