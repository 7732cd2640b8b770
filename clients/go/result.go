package slidingwindow

import (
	"fmt"
	"math"
	"time"
)

// Never is RetryAfter for a request whose cost exceeds a limit's max: no wait admits it.
// RetryAfter is a time.Duration (as in redis_rate), so Never alone prints as -1ns; a Result or
// a LimitState prints it as "never" (their String methods).
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
	// Limits is every limit's state, in the order of Limit's positions (with Detail, and from a
	// Leaser; nil otherwise).
	Limits []LimitState
	// Now is the time the call was decided at, in ms: the server's clock when the call passed
	// "*" (with Detail, and from a Leaser, where it is the time the permit was handed out at;
	// zero otherwise).
	Now time.Time
}

// String is the Result as %+v would print it, with RetryAfter's Never as "never".
func (r Result) String() string {
	return fmt.Sprintf("{Allowed:%t Count:%d Remaining:%d RetryAfter:%s ResetAfter:%v Limit:%d BindingKey:%s BindingLimit:%v Limits:%v Now:%v}",
		r.Allowed, r.Count, r.Remaining, waitText(r.RetryAfter), r.ResetAfter, r.Limit, r.BindingKey, r.BindingLimit, r.Limits, r.Now)
}

// LimitState is one limit's state after a call, as the binding limit's is in Result.
type LimitState struct {
	Key   string
	Limit Limit
	// Count is the requests in the limit's window; Remaining is max(0, Max - Count).
	Count, Remaining int64
	// RetryAfter is the wait until a request of the same cost fits this limit (Never if it
	// never can); ResetAfter the wait until its window is empty.
	RetryAfter, ResetAfter time.Duration
}

// String is the LimitState as %+v would print it, with RetryAfter's Never as "never".
func (s LimitState) String() string {
	return fmt.Sprintf("{Key:%s Limit:%v Count:%d Remaining:%d RetryAfter:%s ResetAfter:%v}",
		s.Key, s.Limit, s.Count, s.Remaining, waitText(s.RetryAfter), s.ResetAfter)
}

// waitText prints a wait: "never" for Never, else as a Duration.
func waitText(d time.Duration) string {
	if d == Never {
		return "never"
	}
	return d.String()
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
		n, ok := integer(v)
		if !ok {
			return nil, fmt.Errorf("%w: element %d is %T %v", ErrReply, i, v, v)
		}
		out[i] = n
	}
	return out, nil
}

func integer(v any) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	}
	return 0, false
}

// toResult reads `allowed count remaining retry_after_ms reset_after_ms [binding]`, or with
// DETAIL `allowed count remaining retry_after_ms reset_after_ms binding [[count remaining
// retry reset]...] now`.
func toResult(reply any, limits []named) (Result, error) {
	var states []LimitState
	var now time.Time
	if items, ok := reply.([]any); ok && len(items) == 8 {
		var err error
		if states, err = toStates(items[6], limits); err != nil {
			return Result{}, err
		}
		at, ok := integer(items[7])
		if !ok {
			return Result{}, fmt.Errorf("%w: now is %T %v", ErrReply, items[7], items[7])
		}
		now = time.UnixMilli(at)
		reply = items[:6]
	}
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
		Limits:       states,
		Now:          now,
	}, nil
}

// toStates reads DETAIL's array: one `count remaining retry reset` per limit sent.
func toStates(reply any, limits []named) ([]LimitState, error) {
	items, ok := reply.([]any)
	if !ok || len(items) != len(limits) {
		return nil, fmt.Errorf("%w: the limits' states are %T %v, for %d limits", ErrReply, reply, reply, len(limits))
	}
	states := make([]LimitState, len(items))
	for i, item := range items {
		v, err := ints(item)
		if err != nil {
			return nil, err
		}
		if len(v) != 4 {
			return nil, fmt.Errorf("%w: limit %d's state has %d integers", ErrReply, i, len(v))
		}
		states[i] = LimitState{
			Key: limits[i].key, Limit: limits[i].limit,
			Count: v[0], Remaining: v[1], RetryAfter: ms(v[2]), ResetAfter: ms(v[3]),
		}
	}
	return states, nil
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
