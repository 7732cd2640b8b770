package httplimit_test

import (
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/httplimit"
)

// headerSpec is spec/headers.json: replies, their limits, and each variant's headers.
type headerSpec struct {
	Cases []struct {
		Name   string
		Limits []struct {
			Name   string
			Max    int64
			Window int64
		}
		Reply struct {
			Allowed          bool
			Count, Remaining int64
			RetryAfterMs     int64 `json:"retry_after_ms"`
			ResetAfterMs     int64 `json:"reset_after_ms"`
			Limit            int
		}
		Headers map[string][][2]string
	}
}

// Every case of the shared header spec (spec/headers.json, testkit's), variant "gateway": the
// headers Policy, RateLimit and RetryAfter render for each reply, Retry-After on a refusal.
func TestHeaderSpec(t *testing.T) {
	var spec headerSpec
	raw, err := os.ReadFile("../../../spec/headers.json")
	if err == nil {
		err = json.Unmarshal(raw, &spec)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range spec.Cases {
		names := make([]string, len(c.Limits))
		limits := make([]slidingwindow.Limit, len(c.Limits))
		for i, l := range c.Limits {
			names[i] = l.Name
			limits[i] = slidingwindow.Limit{Window: time.Duration(l.Window) * time.Second, Max: l.Max}
		}
		rep := c.Reply
		retry := time.Duration(rep.RetryAfterMs) * time.Millisecond
		if rep.RetryAfterMs < 0 {
			retry = slidingwindow.Never
		}
		r := slidingwindow.Result{Allowed: rep.Allowed, Count: rep.Count, Remaining: rep.Remaining,
			RetryAfter: retry, ResetAfter: time.Duration(rep.ResetAfterMs) * time.Millisecond, Limit: rep.Limit}
		got := [][2]string{{"RateLimit-Policy", httplimit.Policy(names, limits)}, {"RateLimit", httplimit.RateLimit(names, r)}}
		if v, ok := httplimit.RetryAfter(r); ok && !r.Allowed {
			got = append(got, [2]string{"Retry-After", v})
		}
		if !reflect.DeepEqual(got, c.Headers["gateway"]) {
			t.Fatalf("%s: %q, want %q", c.Name, got, c.Headers["gateway"])
		}
	}
	if len(spec.Cases) < 30 {
		t.Fatalf("%d cases", len(spec.Cases))
	}
}

// What the spec cannot say: rounding of any duration.
func TestSecondsUp(t *testing.T) {
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
