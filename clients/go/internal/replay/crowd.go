package replay

import (
	"math/rand"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
)

const (
	goroutines = 32
	// PerSecond is the crowd's limit: at most this many in any second.
	PerSecond = 10
	windows   = 3 // run until this many windows' worth is admitted
)

// NeverOverMax is the crowd on the server's clock (the default "*"): every 1 s window of the
// scores actually logged holds at most PerSecond, and the busiest exactly PerSecond.
func NeverOverMax(t *testing.T, s *testredis.Server, sw *slidingwindow.Limiter) {
	logged := Crowd(t, s, sw, func(*rand.Rand) []slidingwindow.Option { return nil })
	if busiest := Busiest(t, logged); busiest != PerSecond {
		t.Fatalf("the busiest second holds %d, want %d", busiest, PerSecond)
	}
}

// Crowd runs 32 goroutines on a fresh key of s through sw, each call with the options opts
// draws, until 3 windows' worth are admitted, and returns every member logged with its score.
func Crowd(t *testing.T, s *testredis.Server, sw *slidingwindow.Limiter, opts func(*rand.Rand) []slidingwindow.Option) map[string]int64 {
	k := Key()
	limits := []slidingwindow.Limit{slidingwindow.PerSecond(PerSecond)}
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines+1)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(rng *rand.Rand) {
			defer wg.Done()
			for admitted.Load() < windows*PerSecond {
				r, err := sw.AllowWith(ctx, k, limits, opts(rng)...)
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
		names, scores, err := s.Scores(k)
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

// Busiest is the most members in one second of the scores logged (each window ending at a
// score); more than PerSecond fails the test.
func Busiest(t *testing.T, logged map[string]int64) int {
	t.Helper()
	most := 0
	for _, s := range logged {
		n := 0
		for _, o := range logged {
			if o > s-1000 && o <= s {
				n++
			}
		}
		if n > PerSecond {
			t.Fatalf("%d requests in the second ending at %d (max %d): %v", n, s, PerSecond, logged)
		}
		if n > most {
			most = n
		}
	}
	return most
}
