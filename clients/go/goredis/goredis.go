// Package goredis runs the slidingwindow package over go-redis v9: a redis.Client (Sentinel's
// redis.NewFailoverClient included), a redis.ClusterClient, or a redis.Ring.
package goredis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/keys"
)

// ErrRing is the error of a call whose keys a redis.Ring could send to different shards: keys
// of different hash tags. Give the keys of one call one hash tag ("{tenant}:user:42" and
// "{tenant}"), as on a Redis Cluster.
var ErrRing = errors.New("goredis: a redis.Ring shards by hash tag and these keys have different ones; give the keys of one call one hash tag")

// NewLimiter is slidingwindow.NewLimiter over c: moving from go-redis/redis_rate, the same call.
func NewLimiter(c redis.UniversalClient, opts ...slidingwindow.LimiterOption) *slidingwindow.Limiter {
	return slidingwindow.NewLimiter(New(c), opts...)
}

// New is a slidingwindow.Doer over c. Each command is routed by its first key (on a
// ClusterClient, to the node of its slot; on a Ring, to the shard of its hash tag), the keys
// of one call must share a hash tag (else a cluster answers CROSSSLOT, and a Ring's calls fail
// with ErrRing before anything is sent), and a nil reply is nil. The context bounds each call
// as go-redis does.
func New(c redis.UniversalClient) slidingwindow.Doer {
	_, ring := c.(*redis.Ring)
	return doer{c, ring}
}

type doer struct {
	c    redis.UniversalClient
	ring bool
}

func (d doer) Do(ctx context.Context, args ...any) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("goredis: no command")
	}
	if _, ok := args[0].(string); !ok {
		return nil, fmt.Errorf("goredis: the command name is a %T, not a string", args[0])
	}
	at := keys.Positions(args)
	if d.ring {
		for _, i := range at[min(1, len(at)):] {
			if tag(keys.String(args[i])) != tag(keys.String(args[at[0]])) {
				return nil, ErrRing
			}
		}
	}
	cmd := redis.NewCmd(ctx, args...)
	if len(at) > 0 {
		cmd.SetFirstKeyPos(int8(at[0]))
	}
	_ = d.c.Process(ctx, cmd)
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}

// tag is what a key is sharded by: its hash tag, the text between its first "{" and the
// first "}" after it when that is not empty, else the whole key.
func tag(key string) string {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			return key[s+1 : s+1+e]
		}
	}
	return key
}

// Masters is a Doer for each master of a ClusterClient, each shard of a Ring, or the client
// itself: Limiter.Top asks each of them.
func (d doer) Masters(ctx context.Context) ([]slidingwindow.Doer, error) {
	var mu sync.Mutex
	var nodes []slidingwindow.Doer
	each := func(ctx context.Context, c *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		nodes = append(nodes, doer{c: c})
		return nil
	}
	var err error
	switch c := d.c.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, each)
	case *redis.Ring:
		err = c.ForEachShard(ctx, each)
	default:
		return []slidingwindow.Doer{d}, nil
	}
	return nodes, err
}
