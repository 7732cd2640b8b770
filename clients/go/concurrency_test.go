package slidingwindow_test

import (
	"math/rand"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/replay"
)

// The crowd of TestReplays stamping its own clock, each call up to 300 ms behind (queued before it was
// sent), with the server's lateness at 1 s, covering the disorder: still at most max in every
// 1 s window of the scores logged (issue 26). At lateness 0 the same run logs more than max in
// some second.
func TestOwnClocksWithinTheLatenessNeverExceedMax(t *testing.T) {
	late(t, time.Second, func(t *testing.T, e env) {
		logged := replay.Crowd(t, e.s, e.sw, func(rng *rand.Rand) []slidingwindow.Option {
			return []slidingwindow.Option{slidingwindow.Now(time.Now().Add(-time.Duration(rng.Int63n(int64(300 * time.Millisecond)))))}
		})
		replay.Busiest(t, logged)
	})
}
