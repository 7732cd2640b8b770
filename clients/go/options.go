package slidingwindow

import "time"

// Option changes one call of AllowWith, PeekWith, AllowAll or PeekAll.
type Option func(*call)

// call is what the options set: the arguments every form of the commands shares.
type call struct {
	cost int64
	now  any // "*" or Unix ms
}

func newCall(opts []Option) call {
	c := call{cost: 1, now: "*"}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// tail is `now [COST n]`.
func (c call) tail() []any {
	if c.cost == 1 {
		return []any{c.now}
	}
	return []any{c.now, "COST", c.cost}
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
// contract's "Lateness") is at least the largest disorder, how far a call's time may be behind
// the newest one its key has seen. Callers whose clocks disagree by up to d ms must also add d
// to every window. Pass the same t to Refund, so that a refund never takes back a request
// logged after this one.
func Now(t time.Time) Option { return func(c *call) { c.now = t.UnixMilli() } }
