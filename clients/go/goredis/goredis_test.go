package goredis_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/goredis"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/replay"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
)

var ctx = context.Background()

func TestMain(m *testing.M) { os.Exit(testredis.Main(m)) }

// client is a Doer over a redis.Client to s, closed with the test.
func client(t *testing.T, s *testredis.Server) slidingwindow.Doer {
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { c.Close() })
	return goredis.New(c)
}

// The shared spec (spec/cases.json), the lease scenarios (spec/leases.json) and 32 goroutines
// on one key (no second of the logged scores over the limit), through a redis.Client, on both paths.
func TestReplays(t *testing.T) { replay.Suite(t, client) }

// Both paths on a three-master cluster through a redis.ClusterClient (replay.Cluster).
func TestCluster(t *testing.T) {
	replay.Cluster(t, func(t *testing.T, c *testredis.Cluster) slidingwindow.Doer {
		cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
		t.Cleanup(func() { cc.Close() })
		return goredis.New(cc)
	})
}

// A redis.Ring of two servers: a key's calls go to its hash tag's shard, AllowAll on keys of one
// hash tag works, and keys of two hash tags are refused with ErrRing before anything is sent.
func TestRing(t *testing.T) {
	shards := map[string]string{}
	var servers []*testredis.Server
	for _, name := range []string{"a", "b"} {
		s, err := testredis.Start(true)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		servers = append(servers, s)
		shards[name] = s.Addr()
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: shards})
	t.Cleanup(func() { ring.Close() })
	sw := goredis.NewLimiter(ring)
	one := []slidingwindow.Limit{slidingwindow.PerMinute(2)}
	// holding is how many shards hold key.
	holding := func(key string) int {
		n := 0
		for _, s := range servers {
			found, err := s.Int64("EXISTS", key)
			if err != nil {
				t.Fatal(err)
			}
			n += int(found)
		}
		return n
	}
	for i := 0; i < 8; i++ {
		tag := replay.Tag(i)
		user, tenant := tag+":user", tag
		keyed := []slidingwindow.Keyed{{Key: user, Limits: one}, {Key: tenant, Limits: one}}
		for j := 0; j < 3; j++ {
			r, err := sw.AllowAll(ctx, keyed)
			if err != nil || r.Allowed != (j < 2) {
				t.Fatalf("%s call %d: %+v, %v", tag, j, r, err)
			}
		}
		// The single-key calls reach the same shard: the key is full there.
		if r, err := sw.Peek(ctx, user, one...); err != nil || r.Allowed || r.Count != 2 {
			t.Fatalf("peek %s: %+v, %v", user, r, err)
		}
		if holding(user) != 1 || holding(tenant) != 1 {
			t.Fatalf("%s: on %d and %d shards", tag, holding(user), holding(tenant))
		}
	}
	for _, s := range servers {
		if size, err := s.Int64("DBSIZE"); err != nil || size == 0 {
			t.Fatalf("a shard holds %d keys (%v)", size, err)
		}
	}
	a, b := replay.Key(), replay.Key()
	_, err := sw.AllowAll(ctx, []slidingwindow.Keyed{{Key: a, Limits: one}, {Key: b, Limits: one}})
	if !errors.Is(err, goredis.ErrRing) {
		t.Fatalf("two hash tags on a Ring: %v", err)
	}
	if holding(a) != 0 || holding(b) != 0 {
		t.Fatal("a refused call logged a key")
	}
}

// Replies as the Doer contract says: an error reply with the server's own text, a nil reply
// as nil (not redis.Nil), integers as int64.
func TestReplies(t *testing.T) {
	d := client(t, testredis.Shared(t, false))
	k := replay.Key()
	if _, err := d.Do(ctx, "SLIDINGWINDOW.ALLOW", k, 1, 1, "*"); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command 'SLIDINGWINDOW.ALLOW'") {
		t.Fatalf("unknown command: %v", err)
	}
	if v, err := d.Do(ctx, "GET", k); v != nil || err != nil {
		t.Fatalf("a nil reply: %#v, %v", v, err)
	}
	if v, err := d.Do(ctx, "RPUSH", k, "x"); v != int64(1) || err != nil {
		t.Fatalf("RPUSH: %#v, %v", v, err)
	}
	if _, err := d.Do(ctx, 1); err == nil {
		t.Fatal("a command name that is not a string")
	}
}

// The shared spec through Sentinel's redis.NewFailoverClient, on a master with the module.
func TestSentinel(t *testing.T) {
	replay.Sentinel(t, func(t *testing.T, addr string) slidingwindow.Doer {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testredis.SentinelMaster, SentinelAddrs: []string{addr}})
		t.Cleanup(func() { c.Close() })
		return goredis.New(c)
	})
}
