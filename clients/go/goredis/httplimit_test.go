package goredis_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/httplimit"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/replay"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
)

// The README's middleware through go-redis, on both paths: a 5xx answer taken back, then two
// requests admitted with their RateLimit headers and the third refused with 429, Retry-After
// and the body.
func TestMiddleware(t *testing.T) {
	replay.Both(t, client, func(t *testing.T, _ string, s *testredis.Server, sw *slidingwindow.Limiter) {
		id := strings.Trim(replay.Key(), "rl:{}")
		limit, err := httplimit.New(sw, httplimit.Config{
			Limits:             []slidingwindow.Limit{slidingwindow.PerMinute(2)},
			RefundServerErrors: true,
			Identity:           func(*http.Request) string { return id },
		})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/fail" {
				w.WriteHeader(http.StatusInternalServerError)
			}
			_, _ = io.WriteString(w, "ok")
		})))
		defer srv.Close()
		get := func(path string) (*http.Response, string) {
			resp, err := srv.Client().Get(srv.URL + path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				t.Fatal(err)
			}
			return resp, string(body)
		}
		key := "rl:{" + id + "}"
		if resp, _ := get("/fail"); resp.StatusCode != http.StatusInternalServerError {
			t.Fatalf("/fail: %d", resp.StatusCode)
		}
		// The refund follows the response: poll for it.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			n, err := s.Int64("ZCARD", key)
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the 5xx request is still logged: %d", n)
			}
		}
		for i, left := range []string{"1", "0"} {
			resp, body := get("/")
			if resp.StatusCode != http.StatusOK || body != "ok" {
				t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
			}
			if p, rl := resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"); p != `"l0";q=2;w=60` || !strings.HasPrefix(rl, `"l0";r=`+left+";t=") {
				t.Fatalf("request %d: RateLimit-Policy %q, RateLimit %q", i, p, rl)
			}
		}
		resp, body := get("/")
		var refusal struct {
			Error        string `json:"error"`
			Limit        string `json:"limit"`
			RetryAfterMs int64  `json:"retry_after_ms"`
		}
		if err := json.Unmarshal([]byte(body), &refusal); err != nil || resp.StatusCode != http.StatusTooManyRequests ||
			refusal.Error != "rate limited" || refusal.Limit != "l0" || refusal.RetryAfterMs <= 0 || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("the third: %d %q %v, Retry-After %q", resp.StatusCode, body, err, resp.Header.Get("Retry-After"))
		}
		if n, err := s.Int64("ZCARD", key); n != 2 || err != nil {
			t.Fatalf("%d logged (%v)", n, err)
		}
	})
}
