// Package redigo runs the slidingwindow package over a redigo connection pool.
package redigo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gomodule/redigo/redis"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

// Pool is a slidingwindow.Doer that sends each command on a connection taken from p for that
// command. A context's deadline bounds the wait for a connection and for the reply (redigo's
// read timeout); a call already sent is not abandoned on cancellation without a deadline.
func Pool(p *redis.Pool) slidingwindow.Doer { return pool{p} }

type pool struct{ p *redis.Pool }

func (d pool) Do(ctx context.Context, args ...any) (any, error) {
	name, rest, err := Split(args)
	if err != nil {
		return nil, err
	}
	c, err := d.p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return Do(ctx, c, name, rest...)
}

// Split is a command's name and its arguments.
func Split(args []any) (string, []any, error) {
	if len(args) == 0 {
		return "", nil, errors.New("redigo: no command")
	}
	name, ok := args[0].(string)
	if !ok {
		return "", nil, fmt.Errorf("redigo: the command name is a %T, not a string", args[0])
	}
	return name, args[1:], nil
}

// Do sends one command on c, with the context's deadline (if any) as the reply's timeout.
func Do(ctx context.Context, c redis.Conn, name string, args ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		return c.Do(name, args...)
	}
	wait := time.Until(deadline)
	if wait <= 0 {
		return nil, context.DeadlineExceeded
	}
	return redis.DoWithTimeout(c, wait, name, args...)
}
