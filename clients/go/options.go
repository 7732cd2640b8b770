package slidingwindow

import (
	"fmt"
	"time"
)

// maxExact is 2^53, the largest time (ms) and count the commands take.
const maxExact = int64(1) << 53

// Option changes one call of AllowWith, PeekWith, AllowAll or PeekAll.
type Option func(*call)

// call is what the options set: the arguments every form of the commands shares.
type call struct {
	cost      int64
	now       any // "*" or Unix ms
	lease     time.Duration
	leased    bool
	precision time.Duration
	rounded   bool
	detail    bool
}

func newCall(opts []Option) call {
	c := call{cost: 1, now: "*"}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// head is `now [COST n]`, the arguments right after the limits' place.
func (c call) head() []any {
	if c.cost == 1 {
		return []any{c.now}
	}
	return []any{c.now, "COST", c.cost}
}

// tail is `[LEASE ms] [PRECISION p] [DETAIL]`, after everything else; a lease or a precision
// the commands cannot take is refused here, before anything is sent.
func (c call) tail() ([]any, error) {
	var out []any
	var ms int64
	if c.leased {
		var err error
		if ms, err = leaseMs(c.lease, c.now); err != nil {
			return nil, err
		}
		out = append(out, "LEASE", ms)
	}
	if c.rounded {
		p, err := precisionMs(c.precision, c.now, ms)
		if err != nil {
			return nil, err
		}
		out = append(out, "PRECISION", p)
	}
	if c.detail {
		out = append(out, "DETAIL")
	}
	return out, nil
}

// leaseMs is d in whole ms, at least 1, ending by 2^53 when now is the caller's own (ms).
func leaseMs(d time.Duration, now any) (int64, error) {
	if d < time.Millisecond || d%time.Millisecond != 0 {
		return 0, fmt.Errorf("%w: %v is not a whole number of ms, at least 1ms", ErrLease, d)
	}
	ms := int64(d / time.Millisecond)
	if at, ok := now.(int64); ok && at >= 0 && at <= maxExact && ms > maxExact-at {
		return 0, fmt.Errorf("%w: now %d + %d ms is beyond 2^53 ms", ErrLease, at, ms)
	}
	return ms, nil
}

// precisionMs is d in whole ms, at least 1, rounding now + lease up to at most 2^53 when now is
// the caller's own (ms). A time.Duration is below 2^53 ms.
func precisionMs(d time.Duration, now any, lease int64) (int64, error) {
	if d < time.Millisecond || d%time.Millisecond != 0 {
		return 0, fmt.Errorf("%w: %v is not a whole number of ms, at least 1ms", ErrPrecision, d)
	}
	p := int64(d / time.Millisecond)
	if at, ok := now.(int64); ok && at >= 0 && at <= maxExact-lease {
		if s := at + lease; s > maxExact/p*p {
			return 0, fmt.Errorf("%w: now %d + %d ms rounded up to a multiple of %d ms is beyond 2^53 ms", ErrPrecision, at, lease, p)
		}
	}
	return p, nil
}

// Cost makes the request weigh n (it adds n members to every key); the default is 1.
func Cost(n int64) Option { return func(c *call) { c.cost = n } }

// Now decides the call at t (in ms) instead of the server's clock ("*", the default).
//
// The server's clock is exact whatever order calls arrive in. A caller's own clock is exact
// only if, for each key, no call arrives with a time earlier than one already decided: a call
// stamped later trims members that an earlier-stamped call arriving after it still counts, and
// the key's TTL runs on the server's clock. Concurrent callers stamping their own clocks do
// arrive out of order; they stay exact when the server's slidingwindow.lateness config (the
// contract's "Lateness"; WithLateness on the script's path) is at least the largest disorder,
// how far a call's time may be behind the newest one its key has seen. Callers whose clocks
// disagree by up to d ms must also add d to every window. Pass the same t to Refund, so that a
// refund never takes back a request logged after this one.
func Now(t time.Time) Option { return func(c *call) { c.now = t.UnixMilli() } }

// Lease takes the call's permits (its cost) for d, a whole number of ms (at least 1ms): if the
// call is admitted, its members are logged at now + d, the lease's end, so that the caller can
// hand the permits out itself until then and never admit more than a limit's max (the
// contract's "Leases"). The caller's rules: hand no permit out after now + d, and return the
// unused ones with Refund(ctx, key, unused, now + d). With the server's clock, add Detail to
// learn now (Result.Now), and stop d after sending the call, by the monotonic clock. With Now(t),
// t + d must not pass 2^53 ms (checked before sending). A Leaser does all of this.
func Lease(d time.Duration) Option { return func(c *call) { c.lease, c.leased = d, true } }

// Precision logs an admitted call's members at now (or now + d of Lease) rounded up to a
// multiple of p, a whole number of ms (at least 1ms): the call is decided at now exactly as
// without it (the contract's "Coarse times"). A key whose calls all pass it holds at most about
// (longest window + lease + p) / p distinct times whatever the rate, which bounds its size on the
// module's compact storage (a sorted set still holds one member per request); the price is that
// a request counts up to p longer than it happened. Refund such a request at the rounded time.
// With Now(t), t (+ d) rounded up must not pass 2^53 ms (checked before sending).
func Precision(p time.Duration) Option { return func(c *call) { c.precision, c.rounded = p, true } }

// Detail asks for every limit's state (Result.Limits) and the time the call was decided at
// (Result.Now: the server's clock when the call passed "*"). The decision and the effects are
// those of the same call without it.
func Detail() Option { return func(c *call) { c.detail = true } }
