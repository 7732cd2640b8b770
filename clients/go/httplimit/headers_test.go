package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/httplimit"
)

// The values services/gateway's own test renders (src/headers.rs).
func TestHeaderValuesAreTheGateways(t *testing.T) {
	names := []string{"l0", "t0"}
	limits := []slidingwindow.Limit{slidingwindow.PerSecond(10), slidingwindow.PerMinute(100)}
	if got := httplimit.Policy(names, limits); got != `"l0";q=10;w=1,"t0";q=100;w=60` {
		t.Fatalf("policy %q", got)
	}
	r := slidingwindow.Result{RetryAfter: 1001 * time.Millisecond, ResetAfter: 59 * time.Second, Limit: 1}
	if got := httplimit.RateLimit(names, r); got != `"t0";r=0;t=59` {
		t.Fatalf("ratelimit %q", got)
	}
	if got, ok := httplimit.RetryAfter(r); got != "2" || !ok {
		t.Fatalf("retry-after %q %v", got, ok)
	}
	r.RetryAfter = slidingwindow.Never
	if got, ok := httplimit.RetryAfter(r); ok {
		t.Fatalf("retry-after for a cost that never fits: %q", got)
	}
	for _, c := range []struct {
		ms   int64
		want int64
	}{{-1, 0}, {0, 0}, {1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {60_000, 60}} {
		if got := httplimit.SecondsUp(time.Duration(c.ms) * time.Millisecond); got != c.want {
			t.Fatalf("%d ms: %d", c.ms, got)
		}
	}
}

func TestClientIP(t *testing.T) {
	for remote, want := range map[string]string{
		"10.1.2.3:5555":               "10.1.2.3",
		"[::ffff:127.0.0.1]:5555":     "127.0.0.1",
		"[::FFFF:10.1.2.3]:1":         "10.1.2.3",
		"[::ffff:7f00:1]:1":           "127.0.0.1",
		"[0:0:0:0:0:ffff:7f00:1]:1":   "127.0.0.1",
		"[2001:DB8:0:0:0:0:0:1]:80":   "2001:db8::1",
		"[2001:db8::ffff:1.2.3.4]:80": "2001:db8::ffff:102:304",
		"[::1]:80":                    "::1",
		"@":                           "@",
		"":                            "",
	} {
		if got := httplimit.ClientIP(&http.Request{RemoteAddr: remote}); got != want {
			t.Fatalf("%q: %q, want %q", remote, got, want)
		}
	}
	by64 := httplimit.IPv6Prefix(64)
	for remote, want := range map[string]string{
		"[2001:db8:1:2:3:4:5:6]:1": "2001:db8:1:2::/64",
		"[2001:db8:1:2::9]:1":      "2001:db8:1:2::/64",
		"[::ffff:10.0.0.1]:1":      "10.0.0.1",
		"10.0.0.2:1":               "10.0.0.2",
	} {
		if got := by64(&http.Request{RemoteAddr: remote}); got != want {
			t.Fatalf("/64 of %q: %q, want %q", remote, got, want)
		}
	}
}
