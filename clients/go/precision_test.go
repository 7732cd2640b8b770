package slidingwindow_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

const precisionErr = "ERR PRECISION must be an integer between 1 and 9007199254740992 (now + LEASE rounded up to a multiple of PRECISION <= 2^53)"

func TestPrecisionLogsAtNowRoundedUp(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		t0 := int64(1_700_000_000_000)
		three := slidingwindow.Limit{Window: time.Minute, Max: 3}
		ls := []slidingwindow.Limit{three}
		sec := slidingwindow.Precision(time.Second)
		// Decided at now, logged at now rounded up to the second: docs/commands.md's example.
		before := serverMs(t, e.s)
		if r := must(t)(e.sw.AllowWith(ctx, k, ls, at(t0+250), sec)); !same(r, result(true, 1, 2, 0, 60_750, 0, k, three)) {
			t.Fatalf("first: %+v", r)
		}
		after := serverMs(t, e.s)
		// The TTL is the window plus t - now from the server's clock (the second call's is shorter).
		if expiry := integer(t, e.s, "PEXPIRETIME", k); expiry < before+60_750 || expiry > after+60_750 {
			t.Fatalf("expiry %d not in [%d, %d]", expiry, before+60_750, after+60_750)
		}
		if r := must(t)(e.sw.AllowWith(ctx, k, ls, at(t0+700), sec)); !same(r, result(true, 2, 1, 0, 60_300, 0, k, three)) {
			t.Fatalf("second: %+v", r)
		}
		if _, scores := members(t, e.s, k); !reflect.DeepEqual(scores, []int64{t0 + 1000, t0 + 1000}) {
			t.Fatalf("scores %v", scores)
		}
		if r := must(t)(e.sw.PeekWith(ctx, k, ls, slidingwindow.Cost(2), at(t0+60_999))); !same(r, result(false, 2, 1, 1, 1, 0, k, three)) {
			t.Fatalf("a ms before they leave: %+v", r)
		}
		if r := must(t)(e.sw.PeekWith(ctx, k, ls, slidingwindow.Cost(2), at(t0+61_000))); !r.Allowed {
			t.Fatalf("once they left: %+v", r)
		}
		// With a lease, now + d is rounded up; PEEK answers what ALLOW does; 1ms changes nothing.
		nine := []slidingwindow.Limit{{Window: time.Minute, Max: 9}}
		leased := []slidingwindow.Option{at(t0 + 1001), slidingwindow.Lease(500 * time.Millisecond), sec}
		if p, a := must(t)(e.sw.PeekWith(ctx, k, nine, leased...)), must(t)(e.sw.AllowWith(ctx, k, nine, leased...)); !same(p, a) {
			t.Fatalf("peek %+v, allow %+v", p, a)
		}
		if r := must(t)(e.sw.AllowWith(ctx, k, nine, at(t0+1002), slidingwindow.Precision(time.Millisecond))); !same(r, result(true, 4, 5, 0, 60_998, 0, k, nine[0])) {
			t.Fatalf("PRECISION 1: %+v", r)
		}
		if _, scores := members(t, e.s, k); !reflect.DeepEqual(scores, []int64{t0 + 1000, t0 + 1000, t0 + 1002, t0 + 2000}) {
			t.Fatalf("scores %v", scores)
		}
		// A caller takes such a request back at the same arithmetic.
		if n, err := e.sw.Refund(ctx, k, 1, time.UnixMilli(t0+1999)); n != 1 || err != nil {
			t.Fatalf("refund: %d, %v", n, err)
		}
		if _, scores := members(t, e.s, k); !reflect.DeepEqual(scores, []int64{t0 + 1000, t0 + 1000, t0 + 2000}) {
			t.Fatalf("scores after the refund %v", scores)
		}
		// Over several keys every key's members are rounded alike.
		keyed := []slidingwindow.Keyed{{Key: k + ":a", Limits: []slidingwindow.Limit{minute}}, {Key: k + ":b", Limits: []slidingwindow.Limit{second3, minute}}}
		quarter := slidingwindow.Precision(250 * time.Millisecond)
		r := must(t)(e.sw.AllowAll(ctx, keyed, slidingwindow.Cost(2), at(t0+3001), quarter, slidingwindow.Detail()))
		if !r.Allowed || r.ResetAfter != 1249*time.Millisecond || r.Now.UnixMilli() != t0+3001 {
			t.Fatalf("allowall: %+v", r)
		}
		for _, kk := range []string{k + ":a", k + ":b"} {
			if _, scores := members(t, e.s, kk); !reflect.DeepEqual(scores, []int64{t0 + 3250, t0 + 3250}) {
				t.Fatalf("%s: scores %v", kk, scores)
			}
		}
		again := []slidingwindow.Option{slidingwindow.Cost(2), at(t0 + 3002), quarter}
		if p, a := must(t)(e.sw.PeekAll(ctx, keyed, again...)), must(t)(e.sw.AllowAll(ctx, keyed, again...)); !same(p, a) {
			t.Fatalf("peekall %+v, allowall %+v", p, a)
		}
	})
}

func TestPrecisionErrors(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		// The server checks what was not checked before sending (the rounding of "now + LEASE" given
		// as words); its own errors keep their text on both paths.
		for _, args := range [][]any{
			{60, 5, int64(9007199254740000), "LEASE", 991, "PRECISION", 1000},
			{60, 5, nowMs, "PRECISION", 0},
			{60, 5, nowMs, "precision", "x"},
		} {
			if _, err := e.sw.Call(ctx, "allow", k, args...); err == nil || err.Error() != precisionErr {
				t.Fatalf("%v: %v", args, err)
			}
		}
		if _, err := e.sw.Call(ctx, "peek", k, 60, 5, nowMs, "PRECISION", 10, "precision", 10); err == nil || !strings.Contains(err.Error(), "option 'precision' given twice") {
			t.Fatalf("twice: %v", err)
		}
		absent(t, e.s, k, "an error wrote")
	})
	// The rest is refused before sending.
	sent := 0
	sw := slidingwindow.NewLimiter(unsent(&sent), slidingwindow.WithPath(slidingwindow.Module))
	one := []slidingwindow.Limit{minute}
	sec := slidingwindow.Precision(time.Second)
	for _, c := range []optionCase{
		{[]slidingwindow.Option{slidingwindow.Precision(0)}, "0s is not a whole number of ms"},
		{[]slidingwindow.Option{slidingwindow.Precision(-time.Millisecond)}, "-1ms is not"},
		{[]slidingwindow.Option{slidingwindow.Precision(1500 * time.Microsecond)}, "1.5ms is not"},
		// 2^53 - 1 rounds up to 2^53 + 8.
		{[]slidingwindow.Option{sec, at(1<<53 - 1)}, "now 9007199254740991 + 0 ms rounded up to a multiple of 1000 ms is beyond 2^53 ms"},
		{[]slidingwindow.Option{sec, slidingwindow.Lease(3 * time.Millisecond), at(1<<53 - 4)}, "now 9007199254740988 + 3 ms rounded"},
	} {
		for name, call := range map[string]func() error{
			"AllowWith": func() error { _, err := sw.AllowWith(ctx, "k", one, c.opts...); return err },
			"PeekWith":  func() error { _, err := sw.PeekWith(ctx, "k", one, c.opts...); return err },
			"AllowAll": func() error {
				_, err := sw.AllowAll(ctx, []slidingwindow.Keyed{{Key: "k", Limits: one}}, c.opts...)
				return err
			},
			"PeekAll": func() error {
				_, err := sw.PeekAll(ctx, []slidingwindow.Keyed{{Key: "k", Limits: one}}, c.opts...)
				return err
			},
		} {
			if err := call(); !errors.Is(err, slidingwindow.ErrPrecision) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("%s %v: %v", name, c.want, err)
			}
		}
	}
	// The last multiple of p at or below 2^53 is the last time the commands take.
	for _, opts := range [][]slidingwindow.Option{
		{sec, at(1<<53 - 992)},
		{slidingwindow.Precision(time.Millisecond), at(1 << 53)},
		{sec, slidingwindow.Lease(2 * time.Millisecond), at(1<<53 - 994)},
	} {
		if _, err := sw.AllowWith(ctx, "k", one, opts...); err == nil || err.Error() != "not sent" {
			t.Fatalf("a time rounded up to at most 2^53: %v", err)
		}
	}
	if sent != 3 {
		t.Fatalf("%d commands sent", sent)
	}
}

// 20,000 requests over 20 s of the callers' clock, window 10 s, PRECISION 1000: the key holds
// every request of its window but at most (Wmax + p) / p + 2 distinct scores, all multiples of p.
func TestPrecisionKeepsABusyKeysDistinctScoresBounded(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		ls := []slidingwindow.Limit{{Window: 10 * time.Second, Max: 1_000_000}}
		most := 0
		for i := int64(0); i < 20_000; i++ {
			if r := must(t)(e.sw.AllowWith(ctx, k, ls, at(nowMs+i), slidingwindow.Precision(time.Second))); !r.Allowed {
				t.Fatalf("request %d refused: %+v", i, r)
			}
			if i%1000 != 999 {
				continue
			}
			_, scores := members(t, e.s, k)
			distinct := map[int64]bool{}
			for _, s := range scores {
				if s%1000 != 0 {
					t.Fatalf("request %d: score %d is not a multiple of 1000", i, s)
				}
				distinct[s] = true
			}
			if len(distinct) > 10+1+2 {
				t.Fatalf("request %d: %d distinct scores", i, len(distinct))
			}
			// Nothing over-trimmed: every request of the window (now - 10 s, now] is still there.
			inWindow := i + 1
			if inWindow > 10_000 {
				inWindow = 10_000
			}
			if int64(len(scores)) < inWindow {
				t.Fatalf("request %d: %d members", i, len(scores))
			}
			if len(distinct) > most {
				most = len(distinct)
			}
		}
		if most < 10 {
			t.Fatalf("at most %d distinct scores", most)
		}
	})
}
