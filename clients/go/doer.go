package slidingwindow

import "context"

// Doer sends one command (its name, then its arguments) and returns the reply: integers as
// int64, arrays as []any, an error reply as an error carrying the reply's text. The goredis,
// valkeygo and redigo subpackages make one of those clients a Doer.
type Doer interface {
	Do(ctx context.Context, args ...any) (any, error)
}

// DoFunc makes a function a Doer, e.g. one that counts the commands it passes on to d:
//
//	slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
//		sent.Add(1)
//		return d.Do(ctx, args...)
//	})
type DoFunc func(ctx context.Context, args ...any) (any, error)

// Do calls f.
func (f DoFunc) Do(ctx context.Context, args ...any) (any, error) { return f(ctx, args...) }
