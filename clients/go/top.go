package slidingwindow

import (
	"bytes"
	"context"
	"fmt"
	"sort"
)

// TopEntry is one key of Top: Refused is never below the key's true refusals since the servers'
// last SLIDINGWINDOW.TOPRESET and never above them by more than Error.
type TopEntry struct {
	Key     string
	Refused int64
	Error   int64
}

// Masters is implemented by a Doer over a Redis Cluster that can send a command to each master
// (redigo/cluster's does): Top asks every one of them.
type Masters interface {
	Masters(ctx context.Context) ([]Doer, error)
}

// Top returns the keys refused most since the servers' last SLIDINGWINDOW.TOPRESET, most first
// (ties: the smaller error, then the key's bytes), at most count (SLIDINGWINDOW.TOP COUNT count;
// at most the servers' slidingwindow.top-keys). When the Doer implements Masters, every master is
// asked and a key's counts and errors are added up. On the script path: ErrNeedsModule.
func (l *Limiter) Top(ctx context.Context, count int) ([]TopEntry, error) {
	if count < 1 {
		return nil, fmt.Errorf("slidingwindow: Top's count must be at least 1, not %d", count)
	}
	module, err := l.UsesModule(ctx)
	if err != nil {
		return nil, err
	}
	if !module {
		return nil, ErrNeedsModule
	}
	nodes := []Doer{l.rdb}
	if m, ok := l.rdb.(Masters); ok {
		if nodes, err = m.Masters(ctx); err != nil {
			return nil, err
		}
	}
	totals := map[string]*TopEntry{}
	for _, node := range nodes {
		reply, err := node.Do(ctx, "SLIDINGWINDOW.TOP", "COUNT", count)
		if err != nil {
			return nil, err
		}
		entries, err := topEntries(reply)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			t, ok := totals[e.Key]
			if !ok {
				t = &TopEntry{Key: e.Key}
				totals[e.Key] = t
			}
			t.Refused += e.Refused
			t.Error += e.Error
		}
	}
	out := make([]TopEntry, 0, len(totals))
	for _, t := range totals {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Refused != b.Refused {
			return a.Refused > b.Refused
		}
		if a.Error != b.Error {
			return a.Error < b.Error
		}
		return bytes.Compare([]byte(a.Key), []byte(b.Key)) < 0
	})
	if len(out) > count {
		out = out[:count]
	}
	return out, nil
}

// topEntries reads TOP's reply: an array of [key, refused, error].
func topEntries(reply any) ([]TopEntry, error) {
	list, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("%w to SLIDINGWINDOW.TOP: %T", ErrReply, reply)
	}
	out := make([]TopEntry, 0, len(list))
	for _, item := range list {
		fields, ok := item.([]any)
		if !ok || len(fields) != 3 {
			return nil, fmt.Errorf("%w to SLIDINGWINDOW.TOP: entry %v", ErrReply, item)
		}
		var key string
		switch k := fields[0].(type) {
		case []byte:
			key = string(k)
		case string:
			key = k
		default:
			return nil, fmt.Errorf("%w to SLIDINGWINDOW.TOP: key %T", ErrReply, fields[0])
		}
		refused, ok1 := integer(fields[1])
		errs, ok2 := integer(fields[2])
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w to SLIDINGWINDOW.TOP: entry %v", ErrReply, item)
		}
		out = append(out, TopEntry{Key: key, Refused: refused, Error: errs})
	}
	return out, nil
}
