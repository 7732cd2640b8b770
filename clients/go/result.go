package slidingwindow

import (
	"fmt"
	"math"
	"time"
)

// Never is RetryAfter for a request whose cost exceeds a limit's max: no wait admits it.
const Never time.Duration = -1

// Result is one reply, for the binding limit: the limit with the least remaining (ties: the
// longer wait, then the longer window, then the earlier position).
type Result struct {
	// Allowed: the request was admitted (and logged, except by Peek).
	Allowed bool
	// Count is the requests in the binding limit's window after the call.
	Count int64
	// Remaining is max(0, Max - Count) for the binding limit.
	Remaining int64
	// RetryAfter is the wait until a request of the same cost fits every limit: 0 if it fits
	// now, Never if it never can.
	RetryAfter time.Duration
	// ResetAfter is the wait until the binding limit's window is empty.
	ResetAfter time.Duration
	// Limit is the binding limit's position among the limits sent (for AllowAll, key by key in
	// order, each key's limits in order).
	Limit int
	// BindingKey and BindingLimit name the binding limit.
	BindingKey   string
	BindingLimit Limit
}

// named is one limit sent, with its key: the reply's binding index points into a list of them.
type named struct {
	key   string
	limit Limit
}

// ints is an array reply of integers.
func ints(reply any) ([]int64, error) {
	items, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: %T %v", ErrReply, reply, reply)
	}
	out := make([]int64, len(items))
	for i, v := range items {
		switch n := v.(type) {
		case int64:
			out[i] = n
		case int:
			out[i] = int64(n)
		default:
			return nil, fmt.Errorf("%w: element %d is %T %v", ErrReply, i, v, v)
		}
	}
	return out, nil
}

// toResult reads `allowed count remaining retry_after_ms reset_after_ms [binding]`.
func toResult(reply any, limits []named) (Result, error) {
	v, err := ints(reply)
	if err != nil {
		return Result{}, err
	}
	if len(v) != 5 && len(v) != 6 {
		return Result{}, fmt.Errorf("%w: %d integers", ErrReply, len(v))
	}
	b := int64(0)
	if len(v) == 6 {
		b = v[5]
	}
	if b < 0 || b >= int64(len(limits)) {
		return Result{}, fmt.Errorf("%w: binding limit %d of %d", ErrReply, b, len(limits))
	}
	return Result{
		Allowed:      v[0] == 1,
		Count:        v[1],
		Remaining:    v[2],
		RetryAfter:   ms(v[3]),
		ResetAfter:   ms(v[4]),
		Limit:        int(b),
		BindingKey:   limits[b].key,
		BindingLimit: limits[b].limit,
	}, nil
}

// ms as a Duration; -1 stays -1 (Never), and waits beyond a Duration's range are its largest.
func ms(v int64) time.Duration {
	switch {
	case v < 0:
		return Never
	case v > math.MaxInt64/int64(time.Millisecond):
		return math.MaxInt64
	}
	return time.Duration(v) * time.Millisecond
}
