package httplimit_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/httplimit"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

func TestMain(m *testing.M) { os.Exit(testredis.Main(m)) }

var ids atomic.Int64

// byHeader keys requests by the X-Test-Id header, so tests sharing a server share no key.
func byHeader(r *http.Request) string { return r.Header.Get("X-Test-Id") }

type site struct {
	t   *testing.T
	srv *httptest.Server
	id  string
}

// serve puts handler behind the middleware with c, on a server with the module.
func serve(t *testing.T, s *testredis.Server, c httplimit.Config, handler http.HandlerFunc) *site {
	t.Helper()
	mw, err := httplimit.New(slidingwindow.NewLimiter(redigo.Pool(s.Pool())), c)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(handler))
	t.Cleanup(srv.Close)
	return &site{t, srv, fmt.Sprintf("client-%d-%d", time.Now().UnixNano(), ids.Add(1))}
}

func ok(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }

type answer struct {
	status int
	header http.Header
	body   string
}

func (s *site) get() answer {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.srv.URL, nil)
	req.Header.Set("X-Test-Id", s.id)
	resp, err := s.srv.Client().Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(body)}
}

func zcard(t *testing.T, s *testredis.Server, key string) int {
	t.Helper()
	n, err := s.Int64("ZCARD", key)
	if err != nil {
		t.Fatal(err)
	}
	return int(n)
}

// waitFor polls cond until it holds (10 s at most).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func TestBurstThen429WithTheGatewaysHeaders(t *testing.T) {
	s := testredis.Shared(t, true)
	site := serve(t, s, httplimit.Config{Limits: []slidingwindow.Limit{slidingwindow.PerMinute(3)}, Identity: byHeader}, ok)
	for i, remaining := range []string{"2", "1", "0"} {
		a := site.get()
		if a.status != 200 || a.body != "ok" {
			t.Fatalf("request %d: %d %q", i, a.status, a.body)
		}
		if got := a.header.Get("RateLimit-Policy"); got != `"l0";q=3;w=60` {
			t.Fatalf("RateLimit-Policy %q", got)
		}
		if got := a.header.Get("RateLimit"); got != `"l0";r=`+remaining+`;t=60` {
			t.Fatalf("request %d: RateLimit %q", i, got)
		}
		if a.header.Get("Retry-After") != "" {
			t.Fatal("Retry-After on an admitted request")
		}
	}
	a := site.get()
	if a.status != http.StatusTooManyRequests || a.header.Get("Content-Type") != "application/json" {
		t.Fatalf("the fourth: %d %v", a.status, a.header)
	}
	if a.header.Get("RateLimit-Policy") != `"l0";q=3;w=60` || a.header.Get("RateLimit") != `"l0";r=0;t=60` || a.header.Get("Retry-After") != "60" {
		t.Fatalf("the 429's headers: %v", a.header)
	}
	var body struct {
		Error        string `json:"error"`
		Limit        string `json:"limit"`
		RetryAfterMs int64  `json:"retry_after_ms"`
	}
	if err := json.Unmarshal([]byte(a.body), &body); err != nil || a.body[len(a.body)-1] != '\n' {
		t.Fatalf("body %q: %v", a.body, err)
	}
	if body.Error != "rate limited" || body.Limit != "l0" || body.RetryAfterMs <= 59_000 || body.RetryAfterMs > 60_000 {
		t.Fatalf("body %+v", body)
	}
	if n := zcard(t, s, "rl:{"+site.id+"}"); n != 3 {
		t.Fatalf("%d logged", n)
	}
}

func TestTheSecondLimitBindsAndNamesAreKept(t *testing.T) {
	s := testredis.Shared(t, true)
	site := serve(t, s, httplimit.Config{
		Limits:   []slidingwindow.Limit{slidingwindow.PerSecond(10), slidingwindow.PerMinute(2)},
		Names:    []string{"burst", "minute"},
		Identity: byHeader,
	}, ok)
	site.get()
	if a := site.get(); a.header.Get("RateLimit") != `"minute";r=0;t=60` || a.header.Get("RateLimit-Policy") != `"burst";q=10;w=1,"minute";q=2;w=60` {
		t.Fatalf("second: %v", a.header)
	}
	if a := site.get(); a.status != 429 || a.header.Get("RateLimit") != `"minute";r=0;t=60` || !bytes.Contains([]byte(a.body), []byte(`"limit":"minute"`)) {
		t.Fatalf("third: %d %v %s", a.status, a.header, a.body)
	}
}

func TestTheClientAddressIsTheDefaultIdentity(t *testing.T) {
	s := testredis.Shared(t, true)
	if _, err := s.Do("DEL", "rl:{127.0.0.1}"); err != nil {
		t.Fatal(err)
	}
	// An identity function answering "" falls back to the address too.
	for _, identity := range []func(*http.Request) string{nil, func(*http.Request) string { return "" }} {
		site := serve(t, s, httplimit.Config{Limits: []slidingwindow.Limit{slidingwindow.PerHour(100)}, Identity: identity}, ok)
		site.get()
	}
	if n := zcard(t, s, "rl:{127.0.0.1}"); n != 2 {
		t.Fatalf("rl:{127.0.0.1} holds %d", n)
	}
}

func TestHeadersAreStampedOverTheHandlersOwn(t *testing.T) {
	s := testredis.Shared(t, true)
	limits := httplimit.Config{Limits: []slidingwindow.Limit{slidingwindow.PerMinute(5)}, Identity: byHeader}
	for name, handler := range map[string]http.HandlerFunc{
		"WriteHeader": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("RateLimit", "mine")
			w.WriteHeader(http.StatusCreated)
		},
		"nothing written": func(w http.ResponseWriter, r *http.Request) { w.Header().Set("RateLimit", "mine") },
		"an informational response first": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.Header().Set("RateLimit", "mine")
			_, _ = io.WriteString(w, "ok")
		},
	} {
		a := serve(t, s, limits, handler).get()
		if a.header.Get("RateLimit") != `"l0";r=4;t=60` || len(a.header.Values("RateLimit")) != 1 {
			t.Fatalf("%s: %d %v", name, a.status, a.header)
		}
	}
}

func TestRefundsOnServerErrors(t *testing.T) {
	s := testredis.Shared(t, true)
	failing := func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }
	limits := []slidingwindow.Limit{slidingwindow.PerMinute(2)}
	refunding := serve(t, s, httplimit.Config{Limits: limits, Identity: byHeader, RefundServerErrors: true}, failing)
	for i := 0; i < 3; i++ {
		// The quota stays whole: each failed request is taken back.
		a := refunding.get()
		if a.status != 503 || a.header.Get("RateLimit") != `"l0";r=1;t=60` {
			t.Fatalf("request %d: %d %v", i, a.status, a.header)
		}
		waitFor(t, "the refund", func() bool { return zcard(t, s, "rl:{"+refunding.id+"}") == 0 })
	}
	keeping := serve(t, s, httplimit.Config{Limits: limits, Identity: byHeader}, failing)
	keeping.get()
	keeping.get()
	if a := keeping.get(); a.status != 429 {
		t.Fatalf("without RefundServerErrors: %d", a.status)
	}
	// A 4xx is the client's: kept.
	notFound := serve(t, s, httplimit.Config{Limits: limits, Identity: byHeader, RefundServerErrors: true}, http.NotFound)
	notFound.get()
	if n := zcard(t, s, "rl:{"+notFound.id+"}"); n != 1 {
		t.Fatalf("a 404 was refunded: %d left", n)
	}
}

// A refund takes back the failed request itself: not a request admitted after it, nor a
// lease's permits logged in the future (the newest members, which a REFUND without AT takes).
func TestARefundTakesBackItsOwnRequest(t *testing.T) {
	s := testredis.Shared(t, true)
	entered, release := make(chan struct{}), make(chan struct{})
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Fail") == "" {
			ok(w, r)
			return
		}
		close(entered)
		<-release
		w.WriteHeader(http.StatusInternalServerError)
	}
	limits := []slidingwindow.Limit{slidingwindow.PerMinute(10)}
	site := serve(t, s, httplimit.Config{Limits: limits, Identity: byHeader, RefundServerErrors: true}, handler)
	key := "rl:{" + site.id + "}"
	// Before the server's Close, which waits for the handler.
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock)
	scores := func() []int64 {
		_, out, err := s.Scores(key)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	failed := make(chan answer)
	go func() {
		req, _ := http.NewRequest("GET", site.srv.URL, nil)
		req.Header.Set("X-Test-Id", site.id)
		req.Header.Set("X-Fail", "1")
		resp, err := site.srv.Client().Do(req)
		if err != nil {
			failed <- answer{}
			return
		}
		resp.Body.Close()
		failed <- answer{status: resp.StatusCode}
	}()
	<-entered
	mine := scores()[0]
	// A later request, at a later ms, and a lease's permits 30 s ahead.
	waitFor(t, "the server's clock to move on", func() bool {
		v, err := s.Int64s("TIME")
		return err == nil && v[0]*1000+v[1]/1000 > mine
	})
	if a := site.get(); a.status != 200 {
		t.Fatalf("the later request: %d", a.status)
	}
	sw := slidingwindow.NewLimiter(redigo.Pool(s.Pool()))
	leased, err := sw.AllowWith(context.Background(), key, limits, slidingwindow.Cost(2), slidingwindow.Lease(30*time.Second), slidingwindow.Detail())
	if err != nil || !leased.Allowed {
		t.Fatalf("the lease: %+v, %v", leased, err)
	}
	before := scores()
	unblock()
	if a := <-failed; a.status != 500 {
		t.Fatalf("the failing request: %d", a.status)
	}
	waitFor(t, "the refund", func() bool { return zcard(t, s, key) == 3 })
	if after := scores(); fmt.Sprint(after) != fmt.Sprint(before[1:]) || after[0] <= mine {
		t.Fatalf("before the refund %v, after %v: want all but %d", before, after, mine)
	}
}

func TestRedisDown(t *testing.T) {
	gone, err := testredis.Start(true)
	if err != nil {
		t.Fatal(err)
	}
	gone.Close()
	for _, closed := range []bool{false, true} {
		var logged bytes.Buffer
		var served atomic.Int64
		site := serve(t, gone, httplimit.Config{
			Limits:     []slidingwindow.Limit{slidingwindow.PerMinute(5)},
			Identity:   byHeader,
			FailClosed: closed,
			ErrorLog:   log.New(&logged, "", 0),
		}, func(w http.ResponseWriter, r *http.Request) { served.Add(1); ok(w, r) })
		for i := 0; i < 3; i++ {
			a := site.get()
			if a.header.Get("RateLimit") != "" || a.header.Get("RateLimit-Policy") != "" {
				t.Fatalf("closed=%v: rate-limit headers without a decision: %v", closed, a.header)
			}
			if closed && (a.status != 503 || a.body != `{"error":"rate limiter unavailable"}`+"\n" || a.header.Get("Content-Type") != "application/json") {
				t.Fatalf("fail-closed: %d %q", a.status, a.body)
			}
			if !closed && (a.status != 200 || a.body != "ok") {
				t.Fatalf("fail-open: %d %q", a.status, a.body)
			}
		}
		if want := map[bool]int64{false: 3, true: 0}[closed]; served.Load() != want {
			t.Fatalf("closed=%v: the handler ran %d times", closed, served.Load())
		}
		if first, _ := logged.ReadString('\n'); !bytes.HasPrefix([]byte(first), []byte("slidingwindow: rate limiter unavailable for rl:{"+site.id+"}: ")) {
			t.Fatalf("log: %q", first)
		}
	}
}

// Failures are logged once a second at most; the first success after them says so, with the
// count of lines left out.
func TestRecoveryIsLogged(t *testing.T) {
	s := testredis.Shared(t, true)
	var down atomic.Bool
	pool := redigo.Pool(s.Pool())
	sw := slidingwindow.NewLimiter(slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
		if down.Load() {
			return nil, errors.New("connection refused")
		}
		return pool.Do(ctx, args...)
	}))
	var logged bytes.Buffer
	mw, err := httplimit.New(sw, httplimit.Config{
		Limits: []slidingwindow.Limit{slidingwindow.PerMinute(100)}, Identity: byHeader, ErrorLog: log.New(&logged, "", 0),
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(mw(http.HandlerFunc(ok)))
	defer srv.Close()
	site := &site{t, srv, fmt.Sprintf("recovery-%d", time.Now().UnixNano())}
	site.get()
	down.Store(true)
	for i := 0; i < 3; i++ {
		site.get()
	}
	down.Store(false)
	site.get()
	site.get()
	lines := bytes.Split(bytes.TrimSuffix(logged.Bytes(), []byte("\n")), []byte("\n"))
	last := string(lines[len(lines)-1])
	// However many seconds the failures took, every one was logged or counted.
	counted := len(lines) - 1
	for _, l := range lines {
		var n int
		if _, err := fmt.Sscanf(string(l[bytes.LastIndexByte(l, '(')+1:]), "%d more", &n); err == nil {
			counted += n
		}
	}
	if !bytes.HasPrefix([]byte(last), []byte("slidingwindow: rate limiter answering again")) || counted != 3 {
		t.Fatalf("log:\n%s", logged.String())
	}
}

func TestConfigIsChecked(t *testing.T) {
	sw := slidingwindow.NewLimiter(slidingwindow.DoFunc(func(context.Context, ...any) (any, error) { return nil, nil }))
	for _, c := range []struct {
		config httplimit.Config
		want   error
	}{
		{httplimit.Config{}, slidingwindow.ErrNoLimits},
		{httplimit.Config{Limits: []slidingwindow.Limit{{Window: 1500 * time.Millisecond, Max: 1}}}, slidingwindow.ErrWindow},
	} {
		if _, err := httplimit.New(sw, c.config); !errors.Is(err, c.want) {
			t.Fatalf("%+v: %v", c.config, err)
		}
	}
	if _, err := httplimit.New(sw, httplimit.Config{Limits: []slidingwindow.Limit{slidingwindow.PerSecond(1)}, Names: []string{"a", "b"}}); err == nil {
		t.Fatal("two names for one limit")
	}
}
