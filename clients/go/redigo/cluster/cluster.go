// Package cluster runs the slidingwindow package over a Redis Cluster through mna/redisc
// (redigo's cluster client).
package cluster

import (
	"context"
	"fmt"
	"strings"

	"github.com/gomodule/redigo/redis"
	"github.com/mna/redisc"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/keys"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

// attempts is how many nodes one command may be sent to: a MOVED reply (a slot that changed
// hands) sends it once more to the node named, which redisc has then recorded.
const attempts = 3

// New is a slidingwindow.Doer that sends each command straight to the node of its first key's
// slot (the keys of one call must share it, or the server answers CROSSSLOT). Commands without
// a key go to any node. MOVED is followed; ASK and TRYAGAIN, answered only while slots
// migrate, are returned as errors. A context's deadline bounds the wait for each reply.
func New(c *redisc.Cluster) slidingwindow.Doer { return cluster{c} }

type cluster struct{ c *redisc.Cluster }

func (d cluster) Do(ctx context.Context, args ...any) (any, error) {
	name, rest, err := redigo.Split(args)
	if err != nil {
		return nil, err
	}
	key, hasKey := firstKey(name, rest)
	for attempt := 1; ; attempt++ {
		reply, err := d.once(ctx, key, hasKey, name, rest)
		if re := redisc.ParseRedir(err); re == nil || re.Type != "MOVED" || attempt == attempts {
			return reply, err
		}
	}
}

func (d cluster) once(ctx context.Context, key string, hasKey bool, name string, args []any) (any, error) {
	conn := d.c.Get()
	defer conn.Close()
	var keys []string
	if hasKey {
		keys = []string{key}
	}
	// No key: any node.
	if err := redisc.BindConn(conn, keys...); err != nil {
		return nil, err
	}
	return redigo.Do(ctx, conn, name, args...)
}

// Masters is a Doer for each master CLUSTER NODES (asked of any node) lists, failing ones left
// out; each dials its master with the cluster's DialOptions for every command.
func (d cluster) Masters(ctx context.Context) ([]slidingwindow.Doer, error) {
	reply, err := d.once(ctx, "", false, "CLUSTER", []any{"NODES"})
	if err != nil {
		return nil, err
	}
	text, err := redis.String(reply, nil)
	if err != nil {
		return nil, err
	}
	var masters []slidingwindow.Doer
	for _, line := range strings.Split(text, "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 {
			continue
		}
		flags := "," + fields[2] + ","
		if !strings.Contains(flags, ",master,") || strings.Contains(flags, ",fail,") || strings.Contains(flags, ",noaddr,") {
			continue
		}
		addr, _, _ := strings.Cut(fields[1], "@")
		masters = append(masters, node{addr: addr, options: d.c.DialOptions})
	}
	if len(masters) == 0 {
		return nil, fmt.Errorf("cluster: CLUSTER NODES lists no master")
	}
	return masters, nil
}

// node sends each command on a connection of its own to one address.
type node struct {
	addr    string
	options []redis.DialOption
}

func (n node) Do(ctx context.Context, args ...any) (any, error) {
	name, rest, err := redigo.Split(args)
	if err != nil {
		return nil, err
	}
	c, err := redis.DialContext(ctx, "tcp", n.addr, n.options...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return redigo.Do(ctx, c, name, rest...)
}

// firstKey is the key a command is routed by: its first key (keys.Positions).
func firstKey(name string, args []any) (string, bool) {
	at := keys.Positions(append([]any{name}, args...))
	if len(at) == 0 {
		return "", false
	}
	return keys.String(args[at[0]-1]), true
}
