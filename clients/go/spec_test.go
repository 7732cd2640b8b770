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

// The shared spec (spec/cases.json, made from the contract's model): every call through Call
// and CallKeys, on both paths (module and script), each reply and error exactly.
func TestSharedSpec(t *testing.T) {
	replay.Both(t, pool, func(t *testing.T, _ string, _ *testredis.Server, sw *slidingwindow.Limiter) { replay.Cases(t, sw) })
}

// The shared lease scenarios (spec/leases.json), on both paths: a Leaser on a clock the test
// sets at each step, every Result, every Close's refund and the commands each step costs.
func TestSharedLeaseSpec(t *testing.T) {
	t.Run("module", func(t *testing.T) { replay.Leases(t, true, pool) })
	t.Run("lua", func(t *testing.T) { replay.Leases(t, false, pool) })
}
