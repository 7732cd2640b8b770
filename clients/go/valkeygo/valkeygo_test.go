package valkeygo_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/valkey-io/valkey-go"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/replay"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/valkeygo"
)

var ctx = context.Background()

func TestMain(m *testing.M) { os.Exit(testredis.Main(m)) }

// connect is a valkey.Client to the addresses, closed with the test.
func connect(t *testing.T, addrs ...string) valkey.Client {
	c, err := valkey.NewClient(valkey.ClientOption{InitAddress: addrs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// client is a Doer over a valkey.Client to s.
func client(t *testing.T, s *testredis.Server) slidingwindow.Doer {
	return valkeygo.New(connect(t, s.Addr()))
}

// The shared spec (spec/cases.json), the lease scenarios (spec/leases.json) and 32 goroutines
// on one key (no second of the logged scores over the limit), through a valkey.Client, on both paths.
func TestReplays(t *testing.T) { replay.Suite(t, client) }

// Both paths on a three-master cluster through valkey-go's cluster client (replay.Cluster).
func TestCluster(t *testing.T) {
	replay.Cluster(t, func(t *testing.T, c *testredis.Cluster) slidingwindow.Doer {
		vc := connect(t, c.Addrs()...)
		if vc.Mode() != valkey.ClientModeCluster {
			t.Fatalf("valkey-go sees a %s", vc.Mode())
		}
		return valkeygo.New(vc)
	})
}

// Replies as the Doer contract says: an error reply with the server's own text (ERR put back,
// other codes kept) that unwraps to valkey-go's error, a nil reply as nil, integers as int64;
// and the Limiter, asking a server without the module, takes the script's path.
func TestReplies(t *testing.T) {
	s := testredis.Shared(t, false)
	d := client(t, s)
	k := replay.Key()
	_, err := d.Do(ctx, "SLIDINGWINDOW.ALLOW", k, 1, 1, "*")
	var ve *valkey.ValkeyError
	if err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command 'SLIDINGWINDOW.ALLOW'") || !errors.As(err, &ve) {
		t.Fatalf("unknown command: %v", err)
	}
	if v, err := d.Do(ctx, "SET", k, "x"); v != "OK" || err != nil {
		t.Fatalf("SET: %#v, %v", v, err)
	}
	if _, err := d.Do(ctx, "ZCARD", k); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE Operation against a key") {
		t.Fatalf("WRONGTYPE: %v", err)
	}
	if v, err := d.Do(ctx, "GET", k+":none"); v != nil || err != nil {
		t.Fatalf("a nil reply: %#v, %v", v, err)
	}
	if v, err := d.Do(ctx, "DEL", k, []byte(k+":b"), int8(3)); v != int64(1) || err != nil {
		t.Fatalf("DEL: %#v, %v", v, err)
	}
	if _, err := d.Do(ctx, "DEL", struct{}{}); err == nil {
		t.Fatal("an argument of no text sent")
	}
	if m, err := valkeygo.NewLimiter(connect(t, s.Addr())).UsesModule(ctx); m || err != nil {
		t.Fatalf("UsesModule without the module: %v, %v", m, err)
	}
}

// The shared spec through valkey-go's Sentinel client, on a master with the module.
func TestSentinel(t *testing.T) {
	replay.Sentinel(t, func(t *testing.T, addr string) slidingwindow.Doer {
		c, err := valkey.NewClient(valkey.ClientOption{
			InitAddress: []string{addr},
			Sentinel:    valkey.SentinelOption{MasterSet: testredis.SentinelMaster},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		if c.Mode() != valkey.ClientModeSentinel {
			t.Fatalf("valkey-go sees a %s", c.Mode())
		}
		return valkeygo.New(c)
	})
}
