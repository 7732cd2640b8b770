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
	// Permits is the permits the admitted lease calls took (Size, or what was left of a
	// window when a whole lease was refused).
	Permits int64
	// Peeks is the PEEK calls sent to learn the wait once no permit was left; Remembered the
	// requests refused from a refusal remembered from one, without a Redis call.
	Peeks, Remembered int64
	// Exact is the calls made for one request each, for a lease whose reply came after its
	// end.
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
// hands out no permit from the lease's end on (a lease taken at now is live while now <= t <
// now + Duration, on the clock the call used), and returns the unused ones with Refund at the
// lease's end.
//
// It is safe for concurrent use: a mutex guards its state, and the Redis calls of one request
// at most are in flight. A caller that finds no permit sends them; the callers arriving
// meanwhile wait for its answer (or for their context) and then take from the new lease. A
// refused lease is followed by a lease of what is left in every limit, if anything is, so that
// near the limit every last permit is still handed out. Once no permit is left, a PEEK learns
// the wait, and that refusal is remembered until its RetryAfter has passed (on the clock the
// lease uses): the requests meanwhile are refused from memory, without a Redis call, so a full
// key costs Redis about one call per lease rather than one per request. The Leaser's own
// refunds forget it (permits given back may fit at once).
type Leaser struct {
	sw     *Limiter
	key    string
	limits []Limit
	c      LeaseConfig
	ms     int64

	mu         sync.Mutex
	cur        *lease    // the lease permits come from; nil when none is live
	flight     *flight   // the lease call in flight; nil when none is
	exactUntil time.Time // after a lease whose reply came after its end, exact calls until then
	full       wait      // the last lease reply left no permit, and no whole lease fits for full.d
	refused    *refusal  // a refused PEEK, remembered for its RetryAfter
	refunds    int64     // bumped when one of its refunds starts and when it ends
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

// wait is d from a call sent at `sent` with now `now` (ms), on the clock the lease uses.
type wait struct {
	sent time.Time
	now  int64
	d    time.Duration
}

// refusal is a refused PEEK's reply and how long it holds.
type refusal struct {
	r Result
	wait
}

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
// remaining (Count - held, Remaining + held, for every limit), RetryAfter 0 while that leaves
// at least one (else the wait the lease call gave, less the time since), ResetAfter less the
// time since the call, and Now the time the permit was handed out at, on the clock the lease
// uses, in whole ms (on the server's clock: DETAIL's now plus the time since the call was sent,
// at or after the moment itself and before the lease's end). Results always carry Limits and
// Now.
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
		if rf := l.refused; rf != nil && back.n == 0 {
			if elapsed := l.since(rf.wait); elapsed < rf.d {
				l.stats.Remembered++
				l.mu.Unlock()
				return rf.at(elapsed), nil
			}
			l.refused = nil
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

// renew sends the calls of flight f and answers this caller from them: a PEEK first when the
// last lease left no permit and no whole lease fits yet, then a lease of Size, then one of what
// is left, then a PEEK to learn the wait.
func (l *Leaser) renew(ctx context.Context, f *flight) (Result, error) {
	defer func() {
		l.mu.Lock()
		l.flight = nil
		close(f.done)
		l.mu.Unlock()
	}()
	l.mu.Lock()
	full := l.full.d > 0 && l.since(l.full) < l.full.d
	l.mu.Unlock()
	if full {
		if r, err := l.peek(ctx); err != nil || !r.Allowed {
			return r, err
		}
	}
	r, done, err := l.take(ctx, l.c.Size)
	if done || err != nil {
		return r, err
	}
	if left := least(r.Limits); left >= 1 {
		if r, done, err = l.take(ctx, left); done || err != nil {
			return r, err
		}
	}
	r, err = l.peek(ctx)
	if err != nil || !r.Allowed {
		return r, err
	}
	// Room appeared since the refused lease: a lease of one.
	r, _, err = l.take(ctx, 1)
	return r, err
}

// take sends a lease call of n permits. Admitted (done), it answers this caller with the
// lease's first permit; refused, with the refusal.
func (l *Leaser) take(ctx context.Context, n int64) (Result, bool, error) {
	opts := []Option{Cost(n), Lease(l.c.Duration), Detail()}
	if l.c.Clock != nil {
		opts = append(opts, Now(l.c.Clock()))
	}
	// Taken before sending: the server reads its clock after it.
	sent := time.Now()
	r, err := l.sw.AllowWith(ctx, l.key, l.limits, opts...)
	if err != nil {
		return Result{}, true, err
	}
	if r.RetryAfter < 0 {
		return Result{}, true, fmt.Errorf("%w: a lease of %d never fits the limits of %s", ErrLease, n, l.key)
	}
	l.mu.Lock()
	l.full = wait{sent: sent, now: r.Now.UnixMilli()}
	if least(r.Limits) == 0 {
		l.full.d = r.RetryAfter
	}
	if !r.Allowed {
		l.stats.Refused++
		l.mu.Unlock()
		return r, false, nil
	}
	l.stats.Leases++
	l.stats.Permits += n
	ls := &lease{r: r, left: n, sent: sent, now: r.Now.UnixMilli()}
	l.cur = ls
	own, ok, back := l.takeLocked()
	if !ok {
		// The reply came after the lease's end: every permit goes back, and calls are exact
		// for a lease's duration.
		l.stats.Exact++
		l.exactUntil = time.Now().Add(l.c.Duration)
		l.mu.Unlock()
		l.refundLater(back)
		r, err := l.exact(ctx)
		return r, true, err
	}
	if l.cur == ls {
		l.pending.Add(1)
		ls.timer = time.AfterFunc(l.until(ls), func() { l.expire(ls) })
	}
	l.mu.Unlock()
	return own, true, nil
}

// peek asks whether one permit fits now, changing nothing; a refusal with a wait that ends is
// remembered, unless one of the Leaser's refunds overlapped the call.
func (l *Leaser) peek(ctx context.Context) (Result, error) {
	opts := []Option{Detail()}
	if l.c.Clock != nil {
		opts = append(opts, Now(l.c.Clock()))
	}
	l.mu.Lock()
	refunds := l.refunds
	l.full = wait{}
	l.stats.Peeks++
	l.mu.Unlock()
	sent := time.Now()
	r, err := l.sw.PeekWith(ctx, l.key, l.limits, opts...)
	if err != nil {
		return r, err
	}
	l.mu.Lock()
	if !r.Allowed && r.RetryAfter > 0 && l.refunds == refunds {
		l.refused = &refusal{r: r, wait: wait{sent: sent, now: r.Now.UnixMilli(), d: r.RetryAfter}}
	}
	l.mu.Unlock()
	return r, nil
}

// since is the time since w's call, on the clock the lease uses.
func (l *Leaser) since(w wait) time.Duration {
	if l.c.Clock == nil {
		// The server read now after the call was sent.
		return time.Since(w.sent)
	}
	return l.c.Clock().Sub(time.UnixMilli(w.now))
}

// at is the refusal's Result elapsed after its call: its waits run down, Now moved on (whole
// ms).
func (rf *refusal) at(elapsed time.Duration) Result {
	elapsed = elapsed.Truncate(time.Millisecond)
	r := rf.r
	r.RetryAfter, r.ResetAfter = less(r.RetryAfter, elapsed), less(r.ResetAfter, elapsed)
	r.Limits = make([]LimitState, len(rf.r.Limits))
	for i, s := range rf.r.Limits {
		s.RetryAfter, s.ResetAfter = less(s.RetryAfter, elapsed), less(s.ResetAfter, elapsed)
		r.Limits[i] = s
	}
	r.Now = r.Now.Add(elapsed)
	return r
}

// least is the fewest remaining of any limit.
func least(states []LimitState) int64 {
	if len(states) == 0 {
		return 0
	}
	n := states[0].Remaining
	for _, s := range states[1:] {
		if s.Remaining < n {
			n = s.Remaining
		}
	}
	return n
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
		// The server read now after the call was sent: less than d after sending, by the
		// monotonic clock, is before now + d on the server's.
		elapsed = time.Since(ls.sent)
		live = elapsed < l.c.Duration
	} else {
		at := l.c.Clock()
		elapsed = at.Sub(time.UnixMilli(ls.now))
		t := at.UnixMilli()
		live = t >= ls.now && t < ls.now+l.ms
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
	r.RetryAfter, r.ResetAfter = retry(r.RetryAfter, r.Remaining, elapsed), less(r.ResetAfter, elapsed)
	r.Limits = make([]LimitState, len(ls.r.Limits))
	for i, s := range ls.r.Limits {
		s.Count, s.Remaining = s.Count-held, s.Remaining+held
		s.RetryAfter, s.ResetAfter = retry(s.RetryAfter, s.Remaining, elapsed), less(s.ResetAfter, elapsed)
		r.Limits[i] = s
	}
	r.Now = at
	return r
}

// retry is a permit's RetryAfter: 0 while another request fits (remaining, the permits held
// counted, at least 1), else the lease call's wait run down.
func retry(wait time.Duration, remaining int64, elapsed time.Duration) time.Duration {
	if remaining >= 1 {
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

// exact is one call for one request.
func (l *Leaser) exact(ctx context.Context) (Result, error) {
	opts := []Option{Detail()}
	if l.c.Clock != nil {
		opts = append(opts, Now(l.c.Clock()))
	}
	return l.sw.AllowWith(ctx, l.key, l.limits, opts...)
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
	l.mu.Lock()
	l.forgetLocked()
	l.mu.Unlock()
	n, err := l.sw.Refund(ctx, l.key, u.n, time.UnixMilli(u.at))
	l.mu.Lock()
	l.forgetLocked()
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

// forgetLocked drops what the Leaser remembers of refusals: a refund of its own may make room.
func (l *Leaser) forgetLocked() {
	l.refunds++
	l.refused = nil
	l.full = wait{}
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
