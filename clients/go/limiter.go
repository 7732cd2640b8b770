package slidingwindow

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slidingwindow/slidingwindow/clients/go/internal/keys"
)

// Path is how a Limiter reaches the contract: the module's commands, or the Lua script.
type Path int32

const (
	// Auto asks the server once (COMMAND INFO slidingwindow.allow) and keeps the answer; if the
	// module later disappears (an "unknown command" error), calls move to the script.
	Auto Path = iota
	// Module always calls the module's commands.
	Module
	// Lua always runs the Lua script.
	Lua
)

// LimiterOption configures a Limiter.
type LimiterOption func(*Limiter)

// WithPath forces the module or the script (the default is Auto).
func WithPath(p Path) LimiterOption { return func(l *Limiter) { l.forced = p } }

// WithLateness passes g to the script as its lateness config (the contract's "Lateness":
// trims keep g more ms, the TTL is the longest window plus g), for callers that pass their own
// clock (Now) and may arrive up to g out of order. The module's path does not send it: the
// module has its own config, slidingwindow.lateness. Where both paths serve the same keys (a
// fleet moving to the module), g must equal the servers' slidingwindow.lateness. It must be
// a whole number of ms from 0 to 24h; otherwise every call fails with ErrLateness before
// sending. The default is 0, as the module's.
func WithLateness(g time.Duration) LimiterOption {
	return func(l *Limiter) {
		l.words, l.err = "", nil
		switch {
		case g < 0 || g > 24*time.Hour || g%time.Millisecond != 0:
			l.err = fmt.Errorf("%w: %v", ErrLateness, g)
		case g > 0:
			l.words = fmt.Sprintf(" lateness %d", g/time.Millisecond)
		}
	}
}

// Limiter runs the rate-limit calls over one Redis client. It is safe for concurrent use.
type Limiter struct {
	rdb    Doer
	forced Path
	// words follow the command's name in the script's ARGV[1] (its configs); err is a bad
	// option, returned by every call.
	words string
	err   error
	// path is Auto until the server has been asked, then Module or Lua.
	path atomic.Int32
	ask  sync.Mutex
}

// NewLimiter returns a Limiter over rdb.
func NewLimiter(rdb Doer, opts ...LimiterOption) *Limiter {
	l := &Limiter{rdb: rdb}
	for _, o := range opts {
		o(l)
	}
	l.path.Store(int32(l.forced))
	return l
}

// UsesModule tells whether calls go to the module (true) or to the script; with Auto, the
// first call asks the server, and a failed question is asked again next time.
func (l *Limiter) UsesModule(ctx context.Context) (bool, error) {
	if p := Path(l.path.Load()); p != Auto {
		return p == Module, nil
	}
	l.ask.Lock()
	defer l.ask.Unlock()
	if p := Path(l.path.Load()); p != Auto {
		return p == Module, nil
	}
	info, err := l.rdb.Do(ctx, "COMMAND", "INFO", "slidingwindow.allow")
	if err != nil {
		return false, err
	}
	// One entry per name asked: nil for an unknown command.
	entries, ok := info.([]any)
	if !ok {
		return false, fmt.Errorf("%w to COMMAND INFO: %T", ErrReply, info)
	}
	p := Lua
	for _, e := range entries {
		if e != nil {
			p = Module
		}
	}
	l.path.Store(int32(p))
	return p == Module, nil
}

// Allow admits one request to key if it fits every limit, and then logs it, at the server's
// clock. The first limit is the command's positional one, the others its LIMIT options.
func (l *Limiter) Allow(ctx context.Context, key string, limits ...Limit) (Result, error) {
	return l.AllowWith(ctx, key, limits)
}

// AllowN is Allow for a request that weighs n.
func (l *Limiter) AllowN(ctx context.Context, key string, n int64, limits ...Limit) (Result, error) {
	return l.AllowWith(ctx, key, limits, Cost(n))
}

// Peek answers what Allow would, changing nothing.
func (l *Limiter) Peek(ctx context.Context, key string, limits ...Limit) (Result, error) {
	return l.PeekWith(ctx, key, limits)
}

// AllowWith is Allow with options (Cost, Now, Lease, Precision, Detail).
func (l *Limiter) AllowWith(ctx context.Context, key string, limits []Limit, opts ...Option) (Result, error) {
	return l.one(ctx, "allow", key, limits, newCall(opts))
}

// PeekWith is Peek with options (Cost, Now, Lease, Precision, Detail): what AllowWith would answer.
func (l *Limiter) PeekWith(ctx context.Context, key string, limits []Limit, opts ...Option) (Result, error) {
	return l.one(ctx, "peek", key, limits, newCall(opts))
}

// AllowAll admits one request if it fits every limit of every key, and then logs it on every
// key: all or nothing, in one atomic call. In Redis Cluster the keys must share a hash slot
// (give them one hash tag: "rl:{acme}:user:42", "rl:{acme}").
func (l *Limiter) AllowAll(ctx context.Context, keyed []Keyed, opts ...Option) (Result, error) {
	return l.all(ctx, "allowall", keyed, newCall(opts))
}

// PeekAll answers what AllowAll would, changing nothing.
func (l *Limiter) PeekAll(ctx context.Context, keyed []Keyed, opts ...Option) (Result, error) {
	return l.all(ctx, "peekall", keyed, newCall(opts))
}

// Refund takes back up to n logged requests from key and answers how many it removed: the
// newest logged at or before at, or with a zero at the newest, whatever their time. Pass the
// time the call was decided at (the t given to Now; with the server's clock, Result.Now of a
// call made with Detail), so that a request logged after this one, or a lease's permits logged
// at its end, are never taken back in its place. Refund each key a request was charged to.
func (l *Limiter) Refund(ctx context.Context, key string, n int64, at time.Time) (int64, error) {
	args := []any{n}
	if !at.IsZero() {
		args = append(args, "AT", at.UnixMilli())
	}
	reply, err := l.Call(ctx, "refund", key, args...)
	if err != nil {
		return 0, err
	}
	removed, ok := reply.(int64)
	if !ok {
		return 0, fmt.Errorf("%w to REFUND: %T %v", ErrReply, reply, reply)
	}
	return removed, nil
}

// Reset deletes key: every request it logged is forgotten.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	_, err := l.rdb.Do(ctx, "DEL", key)
	return err
}

func (l *Limiter) one(ctx context.Context, command, key string, limits []Limit, c call) (Result, error) {
	if len(limits) == 0 {
		return Result{}, ErrNoLimits
	}
	tail, err := c.tail()
	if err != nil {
		return Result{}, err
	}
	args := make([]any, 0, 6+3*len(limits))
	names := make([]named, len(limits))
	for i, lim := range limits {
		w, err := lim.seconds()
		if err != nil {
			return Result{}, err
		}
		if i == 0 {
			args = append(args, w, lim.Max)
			args = append(args, c.head()...)
		} else {
			args = append(args, "LIMIT", w, lim.Max)
		}
		names[i] = named{key, lim}
	}
	args = append(args, tail...)
	reply, err := l.Call(ctx, command, key, args...)
	if err != nil {
		return Result{}, err
	}
	return toResult(reply, names)
}

func (l *Limiter) all(ctx context.Context, command string, keyed []Keyed, c call) (Result, error) {
	if len(keyed) == 0 {
		return Result{}, ErrNoKeys
	}
	tail, err := c.tail()
	if err != nil {
		return Result{}, err
	}
	args := make([]any, 0, 7+len(keyed)*5)
	args = append(args, len(keyed))
	for _, k := range keyed {
		args = append(args, k.Key)
	}
	args = append(args, c.head()...)
	var names []named
	for i, k := range keyed {
		if len(k.Limits) == 0 {
			return Result{}, fmt.Errorf("%w: key %q", ErrNoLimits, k.Key)
		}
		for _, lim := range k.Limits {
			w, err := lim.seconds()
			if err != nil {
				return Result{}, err
			}
			args = append(args, "LIMIT", i+1, w, lim.Max)
			names = append(names, named{k.Key, lim})
		}
	}
	args = append(args, tail...)
	reply, err := l.CallKeys(ctx, command, args...)
	if err != nil {
		return Result{}, err
	}
	return toResult(reply, names)
}

// Call returns the raw reply of SLIDINGWINDOW.<command> key args... ("allow", "peek" or
// "refund"), on whichever path is in use.
func (l *Limiter) Call(ctx context.Context, command, key string, args ...any) (any, error) {
	argv := append([]any{key}, args...)
	return l.send(ctx, command, []any{key}, argv, args)
}

// CallKeys returns the raw reply of SLIDINGWINDOW.<command> numkeys key... rest... ("allowall"
// or "peekall"), on whichever path is in use.
func (l *Limiter) CallKeys(ctx context.Context, command string, args ...any) (any, error) {
	// The script gets the keys as KEYS; a call without numkeys keys and a now gets none, and the
	// script answers the module's error.
	if len(args) > 0 {
		if n, ok := keys.Count(args[0]); ok && len(args) >= n+2 {
			rest := append([]any{args[0]}, args[n+1:]...)
			return l.send(ctx, command, args[1:n+1], args, rest)
		}
	}
	return l.send(ctx, command, nil, args, args)
}

// send calls the module with argv, or the script with keys and rest.
func (l *Limiter) send(ctx context.Context, command string, keys, argv, rest []any) (any, error) {
	if l.err != nil {
		return nil, l.err
	}
	module, err := l.UsesModule(ctx)
	if err != nil {
		return nil, err
	}
	if module {
		reply, err := l.rdb.Do(ctx, append([]any{"SLIDINGWINDOW." + strings.ToUpper(command)}, argv...)...)
		// The module was unloaded, or another server answers at the same address.
		if err == nil || l.forced != Auto || !strings.HasPrefix(err.Error(), "ERR unknown command") {
			return reply, err
		}
		l.path.Store(int32(Lua))
	}
	return eval(ctx, l.rdb, command+l.words, keys, rest)
}
