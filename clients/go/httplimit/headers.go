package httplimit

import (
	"strconv"
	"strings"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

// The headers, in the IETF httpapi RateLimit draft's syntax, exactly as services/gateway
// sends them.

// Policy is the RateLimit-Policy value, every limit by name: `"l0";q=10;w=1,"l1";q=100;w=60`.
func Policy(names []string, limits []slidingwindow.Limit) string {
	items := make([]string, len(limits))
	for i, l := range limits {
		items[i] = quote(names[i]) + ";q=" + strconv.FormatInt(l.Max, 10) +
			";w=" + strconv.FormatInt(int64(l.Window/time.Second), 10)
	}
	return strings.Join(items, ",")
}

// RateLimit is the RateLimit value for the binding limit: its name, its remaining requests r,
// and t, the seconds (rounded up) until its window is empty: `"l1";r=37;t=58`.
func RateLimit(names []string, r slidingwindow.Result) string {
	return quote(names[r.Limit]) + ";r=" + strconv.FormatInt(r.Remaining, 10) +
		";t=" + strconv.FormatInt(SecondsUp(r.ResetAfter), 10)
}

// quote is name as a structured-field string, as the gateway writes it: printable ASCII, `"`
// and `\` escaped, any other character as `_`.
func quote(name string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range name {
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteRune(c)
		case c >= ' ' && c <= '~':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	b.WriteByte('"')
	return b.String()
}

// RetryAfter is the Retry-After value, whole seconds rounded up, and false when no wait admits
// the request (slidingwindow.Never).
func RetryAfter(r slidingwindow.Result) (string, bool) {
	if r.RetryAfter < 0 {
		return "", false
	}
	return strconv.FormatInt(SecondsUp(r.RetryAfter), 10), true
}

// SecondsUp is d in whole seconds, rounded up (a client that waits that long is admitted); 0
// for d <= 0.
func SecondsUp(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// refusedBody is the 429's JSON body: `{"error":"rate limited","limit":"l0","retry_after_ms":N}`.
func refusedBody(names []string, r slidingwindow.Result) string {
	retry := int64(-1)
	if r.RetryAfter >= 0 {
		retry = int64(r.RetryAfter / time.Millisecond)
	}
	return `{"error":"rate limited","limit":"` + names[r.Limit] + `","retry_after_ms":` +
		strconv.FormatInt(retry, 10) + "}\n"
}

const unavailableBody = `{"error":"rate limiter unavailable"}` + "\n"
