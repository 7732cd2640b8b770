package slidingwindow

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// LeaseConfig is how a Leaser takes its leases.
type LeaseConfig struct {
	// Size is the permits one lease takes (its COST): from 1 to the smallest Max of the limits.
	Size int64
	// Duration is how long a lease's permits may be handed out (LEASE ms): a whole number of
	// ms, at least 1ms.
	Duration time.Duration
	// Clock, when set, gives the time every call passes as its now: the caller's own clock, with
	// Now's rules (one caller per key in order, or the server's lateness covering the disorder).
	// By default calls pass the server's clock ("*"), exact whatever the order.
	Clock func() time.Time
	// Timeout bounds each refund the Leaser sends on its own, when a lease ends with permits
	// left; default 1s.
	Timeout time.Duration
	// OnError gets the errors of those refunds (their permits then stay logged until their
	// window passes: capacity held back, never over-admission); by default they are only
	// counted (LeaserStats.Lost).
	OnError func(error)
}

// LeaserStats counts what a Leaser did since it was made.
type LeaserStats struct {
	// Leases is the lease calls admitted, Refused those refused.
	Leases, Refused int64
	// Exact is the calls made for one request each: after a refused lease, or for a lease
	// whose reply came after its end.
	Exact int64
	// Leased is the permits handed out from leases.
	Leased int64
	// Refunds is the REFUND calls sent, Refunded the permits they took back, and Lost the
	// unused permits whose refund failed.
	Refunds, Refunded, Lost int64
}

// Leaser hands out the permits of one key and its limits from leases (the contract's
// "Leases"): one call takes Size permits, logged at the lease's end, and the Leaser hands them
// out from memory, one per Allow, while the lease is live and has permits; then it takes
// another. A lease never admits more than a limit's max in any window, on any number of
// Leasers (nodes) sharing the key, as long as each keeps the rules, which a Leaser does: it
// hands out no permit after the lease's end, and returns the unused ones with Refund at the
// lease's end (the end of now + Duration, on the clock the call used).
//
// It is safe for concurrent use: a mutex guards its state, and one lease call at most is in
// flight. A caller that finds no permit sends that call; the callers arriving meanwhile wait
// for its answer (or for their context) and then take from the new lease. A refused lease
// switches the Leaser to one exact call per request (no lease, no waiting: they run
// concurrently), so that near the limit every last permit is still handed out; it tries a
// lease again once the refusal's RetryAfter has passed, or as soon as an exact call shows room
// for a whole lease in every limit.
type Leaser struct {
	sw     *Limiter
	key    string
	limits []Limit
	c      LeaseConfig
	ms     int64

	mu         sync.Mutex
	cur        *lease    // the lease permits come from; nil when none is live
	flight     *flight   // the lease call in flight; nil when none is
	exactUntil time.Time // after a refused lease, exact calls until then
	closed     bool
	stats      LeaserStats
	// pending counts refunds owed and lease timers set, for Close to wait on.
	pending sync.WaitGroup
}

// lease is one admitted lease call.
type lease struct {
	r     Result    // its reply
	left  int64     // permits not handed out
	sent  time.Time // when the call was sent (its monotonic reading counts on "*")
	now   int64     // the now the call used, ms
	timer *time.Timer
}

type flight struct{ done chan struct{} }

// unused is permits to refund at the end of their lease.
type unused struct{ n, at int64 }

// NewLeaser returns a Leaser for key and its limits (the first is the positional one, as for
// Allow), taking leases of c.Size permits for c.Duration. Close it to return the permits of its
// last lease.
func (l *Limiter) NewLeaser(key string, limits []Limit, c LeaseConfig) (*Leaser, error) {
	if len(limits) == 0 {
		return nil, ErrNoLimits
	}
	smallest := limits[0].Max
	for _, lim := range limits {
		if err := lim.Validate(); err != nil {
			return nil, err
		}
		if lim.Max < smallest {
			smallest = lim.Max
		}
	}
	if c.Size < 1 || c.Size > smallest {
		return nil, fmt.Errorf("%w: size %d is not between 1 and the smallest max, %d", ErrLease, c.Size, smallest)
	}
	ms, err := leaseMs(c.Duration, "*")
	if err != nil {
		return nil, err
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	return &Leaser{sw: l, key: key, limits: append([]Limit(nil), limits...), c: c, ms: ms}, nil
}

// Allow admits one request: a permit of the live lease if it has one (no Redis call), else
// the first permit of a new lease, else (the lease refused) the answer of one exact call. A
// permit from a lease answers the lease call's Result with the permits still held counted as
// remaining (Count - held, Remaining + held, for every limit), RetryAfter 0 while permits are
// held (after the last, the wait the lease call gave until another lease fits), ResetAfter
// less the time since the call, and Now the time the permit was handed out at, on the clock
// the lease uses, in whole ms (on the server's clock: DETAIL's now plus the time since the call
// was sent, at or after the moment itself and at or before the lease's end). Results always
// carry Limits and Now.
func (l *Leaser) Allow(ctx context.Context) (Result, error) {
	l.mu.Lock()
	for {
		if l.closed {
			l.mu.Unlock()
			return Result{}, ErrClosed
		}
		r, ok, back := l.takeLocked()
		if ok {
			l.mu.Unlock()
			return r, nil
		}
		if f := l.flight; f != nil {
			l.mu.Unlock()
			l.refundLater(back)
			select {
			case <-f.done:
			case <-ctx.Done():
				return Result{}, ctx.Err()
			}
			l.mu.Lock()
			continue
		}
		if time.Now().Before(l.exactUntil) {
			l.stats.Exact++
			l.mu.Unlock()
			l.refundLater(back)
			return l.exact(ctx)
		}
		f := &flight{done: make(chan struct{})}
		l.flight = f
		l.mu.Unlock()
		// Before the new lease, so that it counts the permits given back.
		l.refundWith(ctx, back, true)
		return l.renew(ctx, f)
	}
}

// renew sends the lease call of flight f and answers this caller from it.
func (l *Leaser) renew(ctx context.Context, f *flight) (Result, error) {
	opts := []Option{Cost(l.c.Size), Lease(l.c.Duration), Detail()}
	if l.c.Clock != nil {
		opts = append(opts, Now(l.c.Clock()))
	}
	// Taken before sending: the server reads its clock after it.
	sent := time.Now()
	r, err := l.sw.AllowWith(ctx, l.key, l.limits, opts...)
	l.mu.Lock()
	l.flight = nil
	close(f.done)
	if err != nil {
		l.mu.Unlock()
		return Result{}, err
	}
	if !r.Allowed {
		l.stats.Refused++
		l.stats.Exact++
		wait := r.RetryAfter
		if wait < 0 {
			wait = l.c.Duration
		}
		l.exactUntil = time.Now().Add(wait)
		l.mu.Unlock()
		return l.exact(ctx)
	}
	l.stats.Leases++
	ls := &lease{r: r, left: l.c.Size, sent: sent, now: r.Now.UnixMilli()}
	l.cur = ls
	own, ok, back := l.takeLocked()
	if !ok {
		// The reply came after the lease's end: every permit goes back, and calls are exact
		// for a lease's duration.
		l.stats.Exact++
		l.exactUntil = time.Now().Add(l.c.Duration)
		l.mu.Unlock()
		l.refundLater(back)
		return l.exact(ctx)
	}
	if l.cur == ls {
		l.pending.Add(1)
		ls.timer = time.AfterFunc(l.until(ls), func() { l.expire(ls) })
	}
	l.mu.Unlock()
	return own, nil
}

// until is the time left in lease ls, by its clock, plus a ms for the ms clock's rounding.
func (l *Leaser) until(ls *lease) time.Duration {
	if l.c.Clock == nil {
		return l.c.Duration - time.Since(ls.sent) + time.Millisecond
	}
	return time.Duration(ls.now+l.ms-l.c.Clock().UnixMilli())*time.Millisecond + time.Millisecond
}

// expire ends lease ls at its end if it is still the current one, and refunds its permits.
func (l *Leaser) expire(ls *lease) {
	defer l.pending.Done()
	l.mu.Lock()
	var back unused
	if l.cur == ls {
		back = l.endLocked()
	}
	l.mu.Unlock()
	l.refund(back)
}

// takeLocked hands a permit out of the current lease if it is live and has one. A lease that is
// over is ended: its unused permits come back, to be refunded.
func (l *Leaser) takeLocked() (Result, bool, unused) {
	ls := l.cur
	if ls == nil {
		return Result{}, false, unused{}
	}
	var elapsed time.Duration
	live := false
	if l.c.Clock == nil {
		// The server read now after the call was sent: d after sending, by the monotonic
		// clock, is at or before now + d on the server's.
		elapsed = time.Since(ls.sent)
		live = elapsed <= l.c.Duration
	} else {
		at := l.c.Clock()
		elapsed = at.Sub(time.UnixMilli(ls.now))
		t := at.UnixMilli()
		live = t >= ls.now && t <= ls.now+l.ms
	}
	if !live || ls.left == 0 {
		return Result{}, false, l.endLocked()
	}
	ls.left--
	l.stats.Leased++
	// In whole ms, as the server's replies are.
	elapsed = elapsed.Truncate(time.Millisecond)
	r := ls.permit(time.UnixMilli(ls.now).Add(elapsed), elapsed)
	if ls.left == 0 {
		l.endLocked()
	}
	return r, true, unused{}
}

// endLocked ends the current lease; its unused permits, if any, are owed a refund.
func (l *Leaser) endLocked() unused {
	ls := l.cur
	if ls == nil {
		return unused{}
	}
	l.cur = nil
	if ls.timer != nil && ls.timer.Stop() {
		l.pending.Done()
	}
	if ls.left == 0 {
		return unused{}
	}
	l.pending.Add(1)
	return unused{ls.left, ls.now + l.ms}
}

// permit is the Result of a permit handed out at `at`, elapsed after the lease's now (both in
// whole ms).
func (ls *lease) permit(at time.Time, elapsed time.Duration) Result {
	held := ls.left
	r := ls.r
	r.Count, r.Remaining = r.Count-held, r.Remaining+held
	r.RetryAfter, r.ResetAfter = retry(r.RetryAfter, held, elapsed), less(r.ResetAfter, elapsed)
	r.Limits = make([]LimitState, len(ls.r.Limits))
	for i, s := range ls.r.Limits {
		s.Count, s.Remaining = s.Count-held, s.Remaining+held
		s.RetryAfter, s.ResetAfter = retry(s.RetryAfter, held, elapsed), less(s.ResetAfter, elapsed)
		r.Limits[i] = s
	}
	r.Now = at
	return r
}

func retry(wait time.Duration, held int64, elapsed time.Duration) time.Duration {
	if held > 0 {
		return 0
	}
	return less(wait, elapsed)
}

// less is wait - elapsed, not below 0; Never stays Never.
func less(wait, elapsed time.Duration) time.Duration {
	switch {
	case wait < 0:
		return wait
	case wait < elapsed:
		return 0
	}
	return wait - elapsed
}

// exact is one call for one request. When it shows room for a whole lease in every limit, the
// next request may lease again.
func (l *Leaser) exact(ctx context.Context) (Result, error) {
	opts := []Option{Detail()}
	if l.c.Clock != nil {
		opts = append(opts, Now(l.c.Clock()))
	}
	r, err := l.sw.AllowWith(ctx, l.key, l.limits, opts...)
	if err != nil || !r.Allowed {
		return r, err
	}
	for _, s := range r.Limits {
		if s.Remaining < l.c.Size {
			return r, nil
		}
	}
	l.mu.Lock()
	l.exactUntil = time.Time{}
	l.mu.Unlock()
	return r, nil
}

// refundLater refunds u in a goroutine of its own.
func (l *Leaser) refundLater(u unused) {
	if u.n > 0 {
		go l.refund(u)
	}
}

// refund returns u, bounded by the config's Timeout.
func (l *Leaser) refund(u unused) {
	if u.n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.c.Timeout)
	defer cancel()
	l.refundWith(ctx, u, true)
}

// refundWith sends REFUND key n AT end for u, settling the refund owed; report gives a
// failure to OnError.
func (l *Leaser) refundWith(ctx context.Context, u unused, report bool) error {
	if u.n == 0 {
		return nil
	}
	defer l.pending.Done()
	n, err := l.sw.Refund(ctx, l.key, u.n, time.UnixMilli(u.at))
	l.mu.Lock()
	l.stats.Refunds++
	if err != nil {
		l.stats.Lost += u.n
	} else {
		l.stats.Refunded += n
	}
	l.mu.Unlock()
	if err != nil {
		err = fmt.Errorf("slidingwindow: refund of %d unused permits of %s at %d: %w", u.n, l.key, u.at, err)
		if report && l.c.OnError != nil {
			l.c.OnError(err)
		}
	}
	return err
}

// Close ends the Leaser: it waits for a lease call in flight, ends the live lease, refunds
// its unused permits, and waits for the refunds already under way (all within ctx). Allow
// then answers ErrClosed. It returns the error of its own refund, or ctx's.
func (l *Leaser) Close(ctx context.Context) error {
	l.mu.Lock()
	l.closed = true
	f := l.flight
	l.mu.Unlock()
	if f != nil {
		select {
		case <-f.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.mu.Lock()
	back := l.endLocked()
	l.mu.Unlock()
	err := l.refundWith(ctx, back, false)
	done := make(chan struct{})
	go func() { l.pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		if err == nil {
			err = ctx.Err()
		}
	}
	return err
}

// Stats is what the Leaser did so far.
func (l *Leaser) Stats() LeaserStats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}
