package slidingwindow_test

import (
	"testing"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/replay"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

// pool is the Doer these tests run the Limiter over: a redigo pool.
func pool(t *testing.T, s *testredis.Server) slidingwindow.Doer { return redigo.Pool(s.Pool()) }

// The shared spec (spec/cases.json, made from the contract's model), every call through Call and
// CallKeys, each reply and error exactly; the lease scenarios (spec/leases.json), a Leaser on a
// clock the test sets at each step, every Result, every Close's refund and the commands each
// step costs; and 32 goroutines on one key with "*" (every 1 s window of the scores logged
// holds at most max, the busiest exactly max); on both paths (module and script).
func TestReplays(t *testing.T) { replay.Suite(t, pool) }
