package slidingwindow

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Slot is one request in flight (Acquire). Its member is logged on a window as long as the
// longest hold, so it leaves the window by itself when the hold passes (a holder that dies frees
// its slot then); Release gives it back at once.
type Slot struct {
	l      *Limiter
	key    string
	Result Result
	once   sync.Once
}

// Acquire takes a slot among limit in flight on key, held at most hold (a whole number of
// seconds): never more than limit in flight. Release the slot when the request ends.
func (l *Limiter) Acquire(ctx context.Context, key string, limit int64, hold time.Duration) (*Slot, error) {
	r, err := l.AllowWith(ctx, key, []Limit{{Window: hold, Max: limit}}, Detail())
	if err != nil {
		return nil, err
	}
	return &Slot{l: l, key: key, Result: r}, nil
}

// Allowed tells whether the request got its slot.
func (s *Slot) Allowed() bool { return s.Result.Allowed }

// Release gives the slot back once (REFUND key 1 AT the acquire's time); it answers whether a
// member was taken back (false when refused, released already, or after the hold).
func (s *Slot) Release(ctx context.Context) (bool, error) {
	released, err := false, error(nil)
	s.once.Do(func() {
		if !s.Result.Allowed {
			return
		}
		var n int64
		n, err = s.l.Refund(ctx, s.key, 1, s.Result.Now)
		released = n == 1
	})
	return released, err
}

// Reservation is n requests charged before their real cost is known (Reserve).
type Reservation struct {
	l      *Limiter
	key    string
	limits []Limit
	n      int64
	Result Result
	mu     sync.Mutex
	open   bool
}

// Settlement is what Settle did: Refunded (reserved, unused), Charged (used beyond the
// reservation and admitted) and Overrun (used beyond it and refused by the limits: spent anyway,
// reported here, never hidden).
type Settlement struct {
	Refunded, Charged, Overrun int64
}

// Reserve charges n requests on key's limits now, for a cost known only later (the tokens of a
// response): Settle with the real cost, or Cancel.
func (l *Limiter) Reserve(ctx context.Context, key string, limits []Limit, n int64) (*Reservation, error) {
	r, err := l.AllowWith(ctx, key, limits, Cost(n), Detail())
	if err != nil {
		return nil, err
	}
	return &Reservation{l: l, key: key, limits: limits, n: n, Result: r, open: r.Allowed}, nil
}

// Allowed tells whether the reservation was admitted.
func (r *Reservation) Allowed() bool { return r.Result.Allowed }

// Settle closes the reservation with the real cost: used < n refunds n - used at the
// reservation's time; used > n charges used - n with an AllowWith of its own (COST used - n), an
// overrun when it does not fit.
func (r *Reservation) Settle(ctx context.Context, used int64) (Settlement, error) {
	if used < 0 {
		return Settlement{}, fmt.Errorf("slidingwindow: Settle's used must be at least 0, not %d", used)
	}
	if err := r.close(); err != nil {
		return Settlement{}, err
	}
	switch {
	case used < r.n:
		n, err := r.l.Refund(ctx, r.key, r.n-used, r.Result.Now)
		return Settlement{Refunded: n}, err
	case used > r.n:
		extra := used - r.n
		res, err := r.l.AllowWith(ctx, r.key, r.limits, Cost(extra))
		if err != nil {
			return Settlement{}, err
		}
		if res.Allowed {
			return Settlement{Charged: extra}, nil
		}
		return Settlement{Overrun: extra}, nil
	}
	return Settlement{}, nil
}

// Cancel refunds the whole reservation and answers the requests taken back.
func (r *Reservation) Cancel(ctx context.Context) (int64, error) {
	if err := r.close(); err != nil {
		return 0, err
	}
	return r.l.Refund(ctx, r.key, r.n, r.Result.Now)
}

func (r *Reservation) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.open {
		return ErrSettled
	}
	r.open = false
	return nil
}
