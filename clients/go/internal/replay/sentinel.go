package replay

import (
	"testing"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
)

// Sentinel is the shared spec (Cases) through the Doer sentinel makes from a Sentinel's address
// (testredis.SentinelMaster its master's name), on a master with the module behind a Sentinel:
// the module's path is found, and the calls reach the master.
func Sentinel(t *testing.T, sentinel func(t *testing.T, addr string) slidingwindow.Doer) {
	master, err := testredis.Start(true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(master.Close)
	s, err := testredis.StartSentinel(master)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	sw := slidingwindow.NewLimiter(sentinel(t, s.Addr()))
	if m, err := sw.UsesModule(ctx); !m || err != nil {
		t.Fatalf("UsesModule through the Sentinel: %v, %v", m, err)
	}
	Cases(t, sw)
	if n, err := master.Int64("DBSIZE"); n == 0 || err != nil {
		t.Fatalf("the master holds %d keys (%v)", n, err)
	}
}
