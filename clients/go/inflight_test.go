package slidingwindow_test

import (
	"errors"
	"sort"
	"sync"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

// held is how many members a one-hour Peek counts on key.
func held(t *testing.T, e env, key string) int64 {
	t.Helper()
	r := must(t)(e.sw.Peek(ctx, key, slidingwindow.Limit{Window: time.Hour, Max: 1_000_000}))
	return r.Count - 1
}

func TestAcquireNPlusOneHoldersSeeOneRefusal(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		slots := make([]*slidingwindow.Slot, 6)
		var wg sync.WaitGroup
		for i := range slots {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				s, err := e.sw.Acquire(ctx, k, 5, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				slots[i] = s
			}(i)
		}
		wg.Wait()
		var allowed []bool
		for _, s := range slots {
			if s == nil {
				t.FailNow()
			}
			allowed = append(allowed, s.Allowed())
		}
		sort.Slice(allowed, func(i, j int) bool { return !allowed[i] && allowed[j] })
		if want := []bool{false, true, true, true, true, true}; !equalBools(allowed, want) {
			t.Fatalf("allowed %v", allowed)
		}
		if n := held(t, e, k); n != 5 {
			t.Fatalf("%d held", n)
		}
		released := 0
		for _, s := range slots {
			if ok, err := s.Release(ctx); err != nil {
				t.Fatal(err)
			} else if ok {
				released++
			}
			if ok, _ := s.Release(ctx); ok {
				t.Fatal("released twice")
			}
		}
		if released != 5 || held(t, e, k) != 0 {
			t.Fatalf("released %d, held %d", released, held(t, e, k))
		}
	})
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestADeadHoldersSlotComesBackAfterTheHold(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		dead, err := e.sw.Acquire(ctx, k, 1, time.Second)
		if err != nil || !dead.Allowed() {
			t.Fatalf("%+v, %v", dead, err)
		}
		if s, err := e.sw.Acquire(ctx, k, 1, time.Second); err != nil || s.Allowed() {
			t.Fatalf("a second holder: %+v, %v", s, err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			s, err := e.sw.Acquire(ctx, k, 1, time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if s.Allowed() {
				if _, err := s.Release(ctx); err != nil {
					t.Fatal(err)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the dead holder's slot never came back")
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Its late release takes nothing: the acquire after the hold trimmed its member.
		if ok, err := dead.Release(ctx); ok || err != nil {
			t.Fatalf("late release: %v, %v", ok, err)
		}
	})
}

func TestReserveThenSettle(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		limits := []slidingwindow.Limit{{Window: time.Minute, Max: 100}}
		step := func(n, used int64, want slidingwindow.Settlement, held0 int64) {
			t.Helper()
			r, err := e.sw.Reserve(ctx, k, limits, n)
			if err != nil || !r.Allowed() {
				t.Fatalf("reserve %d: %+v, %v", n, r, err)
			}
			got, err := r.Settle(ctx, used)
			if err != nil || got != want {
				t.Fatalf("settle %d of %d: %+v, %v; want %+v", used, n, got, err, want)
			}
			if _, err := r.Settle(ctx, used); !errors.Is(err, slidingwindow.ErrSettled) {
				t.Fatalf("settled twice: %v", err)
			}
			if h := held(t, e, k); h != held0 {
				t.Fatalf("held %d, want %d", h, held0)
			}
		}
		step(10, 3, slidingwindow.Settlement{Refunded: 7}, 3)
		step(10, 15, slidingwindow.Settlement{Charged: 5}, 18)
		step(70, 90, slidingwindow.Settlement{Overrun: 20}, 88)
		r, err := e.sw.Reserve(ctx, k, []slidingwindow.Limit{{Window: time.Minute, Max: 1000}}, 50)
		if err != nil {
			t.Fatal(err)
		}
		if n, err := r.Cancel(ctx); n != 50 || err != nil || held(t, e, k) != 88 {
			t.Fatalf("cancel: %d, %v", n, err)
		}
		refused, err := e.sw.Reserve(ctx, k, limits, 20)
		if err != nil || refused.Allowed() {
			t.Fatalf("%+v, %v", refused, err)
		}
		if _, err := refused.Settle(ctx, 0); !errors.Is(err, slidingwindow.ErrSettled) {
			t.Fatalf("settle of a refused reservation: %v", err)
		}
	})
}
