package slidingwindow_test

import (
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

const (
	goroutines = 32
	perSecond  = 10
	windows    = 3 // run until this many windows' worth is admitted
)

// Goroutines on one key with the default "*": every 1 s window of the scores actually logged
// holds at most max, and the busiest exactly max. Callers stamping their own clocks are not
// exact here: a later-stamped call trims members that an earlier-stamped call, arriving after
// it, still has in its window.
func TestConcurrentCallersNeverExceedMax(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		logged := crowd(t, e, func(*rand.Rand) []slidingwindow.Option { return nil })
		if busiest := busiest(t, logged); busiest != perSecond {
			t.Fatalf("the busiest second holds %d, want %d", busiest, perSecond)
		}
	})
}

// The same crowd stamping its own clock, each call up to 300 ms behind (queued before it was
// sent), with the server's lateness at 1 s, covering the disorder: still at most max in every
// 1 s window of the scores logged (issue 26). At lateness 0 the same run logs more than max in
// some second.
func TestOwnClocksWithinTheLatenessNeverExceedMax(t *testing.T) {
	late(t, time.Second, func(t *testing.T, e env) {
		logged := crowd(t, e, func(rng *rand.Rand) []slidingwindow.Option {
			return []slidingwindow.Option{slidingwindow.Now(time.Now().Add(-time.Duration(rng.Int63n(int64(300 * time.Millisecond)))))}
		})
		busiest(t, logged)
	})
}

// crowd runs the goroutines on a fresh key, each call with the options opts draws, until
// windows * perSecond are admitted, and returns every member logged with its score.
func crowd(t *testing.T, e env, opts func(*rand.Rand) []slidingwindow.Option) map[string]int64 {
	k := key()
	limits := []slidingwindow.Limit{slidingwindow.PerSecond(perSecond)}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines+1)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(rng *rand.Rand) {
			defer wg.Done()
			for admitted.Load() < windows*perSecond {
				r, err := e.sw.AllowWith(ctx, k, limits, opts(rng)...)
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
		}(rand.New(rand.NewSource(int64(g))))
	}
	// Each member stays logged for a second at least (until a call's now passes it by the
	// window): read every 20 ms, the log's snapshots together hold every member.
	logged := map[string]int64{}
	snapshot := func() error {
		names, scores, err := e.s.Scores(k)
		for i, name := range names {
			logged[name] = scores[i]
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
	return logged
}

// busiest is the most members in one second of the scores logged (each window ending at a
// score); more than perSecond fails the test.
func busiest(t *testing.T, logged map[string]int64) int {
	t.Helper()
	most := 0
	for _, s := range logged {
		n := 0
		for _, o := range logged {
			if o > s-1000 && o <= s {
				n++
			}
		}
		if n > perSecond {
			t.Fatalf("%d requests in the second ending at %d (max %d): %v", n, s, perSecond, logged)
		}
		if n > most {
			most = n
		}
	}
	return most
}
