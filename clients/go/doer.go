package slidingwindow

import "context"

// Doer sends one command (its name, then its arguments) and returns the reply: integers as
// int64, arrays as []any, an error reply as an error carrying the reply's text. redigo and
// go-redis both return replies this way.
type Doer interface {
	Do(ctx context.Context, args ...any) (any, error)
}

// DoFunc makes a function a Doer, e.g. for go-redis:
//
//	slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
//		return rdb.Do(ctx, args...).Result()
//	})
type DoFunc func(ctx context.Context, args ...any) (any, error)

// Do calls f.
func (f DoFunc) Do(ctx context.Context, args ...any) (any, error) { return f(ctx, args...) }
