package cluster_test

import (
	"testing"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/replay"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo/cluster"
)

// Both paths on a three-master cluster through redisc (replay.Cluster): no MOVED, Top on every
// master, AllowAll on one hash tag, CROSSSLOT across slots.
func TestCluster(t *testing.T) {
	replay.Cluster(t, func(t *testing.T, c *testredis.Cluster) slidingwindow.Doer {
		rc, err := c.Client()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rc.Close() })
		return cluster.New(rc)
	})
}
