// Package httplimit is net/http middleware over the slidingwindow package: one Allow per
// request, 429 with Retry-After and the IETF RateLimit-Policy / RateLimit headers exactly as
// services/gateway sends them, refunds when the handler answers 5xx, and fail-open or
// fail-closed when Redis cannot decide.
package httplimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

// Config is what the middleware limits, and how.
type Config struct {
	// Limits every identity gets, in order: the first is the command's positional limit.
	Limits []slidingwindow.Limit
	// Names of the limits in the headers; default l0, l1, ... (the gateway's).
	Names []string
	// Identity names who is asking; the key is "rl:{<identity>}". Default ClientIP; an empty
	// identity falls back to ClientIP. An identity from a header (an API key) must only be
	// trusted behind authentication: any client can send a fresh one with every request.
	Identity func(*http.Request) string
	// RefundServerErrors takes a request back (SLIDINGWINDOW.REFUND key 1 AT now, the server's
	// time its Allow was decided at, from DETAIL) when the handler answers 5xx, after the
	// response, without delaying it.
	RefundServerErrors bool
	// FailClosed answers 503 when Redis cannot decide (unreachable, an error, no reply within
	// Timeout); by default such requests pass, without rate-limit headers.
	FailClosed bool
	// Timeout bounds each Redis call; default 1s.
	Timeout time.Duration
	// ErrorLog gets one line per second at most about calls that failed, with the count of
	// lines left out, and one when calls succeed again; default log.Default().
	ErrorLog *log.Logger
}

// New returns the middleware. It checks the limits (slidingwindow.ErrWindow, ErrNoLimits) and
// the names.
func New(l *slidingwindow.Limiter, c Config) (func(http.Handler) http.Handler, error) {
	if len(c.Limits) == 0 {
		return nil, slidingwindow.ErrNoLimits
	}
	for _, lim := range c.Limits {
		if err := lim.Validate(); err != nil {
			return nil, err
		}
	}
	names := c.Names
	if names == nil {
		for i := range c.Limits {
			names = append(names, fmt.Sprintf("l%d", i))
		}
	}
	if len(names) != len(c.Limits) {
		return nil, errors.New("httplimit: one name for each limit")
	}
	if c.Timeout <= 0 {
		c.Timeout = time.Second
	}
	if c.ErrorLog == nil {
		c.ErrorLog = log.Default()
	}
	m := &middleware{limiter: l, c: c, names: names, policy: Policy(names, c.Limits), log: &errorLog{out: c.ErrorLog}}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(next, w, r) })
	}, nil
}

type middleware struct {
	limiter *slidingwindow.Limiter
	c       Config
	names   []string
	policy  string
	log     *errorLog
}

func (m *middleware) key(r *http.Request) string {
	id := ""
	if m.c.Identity != nil {
		id = m.c.Identity(r)
	}
	if id == "" {
		id = ClientIP(r)
	}
	return "rl:{" + id + "}"
}

func (m *middleware) serve(next http.Handler, w http.ResponseWriter, r *http.Request) {
	key := m.key(r)
	ctx, cancel := context.WithTimeout(r.Context(), m.c.Timeout)
	var opts []slidingwindow.Option
	if m.c.RefundServerErrors {
		// For the refund's AT: the time the server decided at.
		opts = append(opts, slidingwindow.Detail())
	}
	res, err := m.limiter.AllowWith(ctx, key, m.c.Limits, opts...)
	cancel()
	if err != nil && r.Context().Err() != nil {
		return // the client has gone: nobody to answer
	}
	if err != nil {
		m.log.failed(fmt.Errorf("rate limiter unavailable for %s: %w", key, err))
		if m.c.FailClosed {
			writeJSON(w, http.StatusServiceUnavailable, unavailableBody)
			return
		}
		next.ServeHTTP(w, r)
		return
	}
	m.log.succeeded()
	stamp := func(h http.Header) {
		h.Set("RateLimit-Policy", m.policy)
		h.Set("RateLimit", RateLimit(m.names, res))
	}
	if !res.Allowed {
		stamp(w.Header())
		if secs, ok := RetryAfter(res); ok {
			w.Header().Set("Retry-After", secs)
		}
		writeJSON(w, http.StatusTooManyRequests, refusedBody(m.names, res))
		return
	}
	sw := &writer{ResponseWriter: w, stamp: stamp}
	next.ServeHTTP(sw, r)
	if !sw.wrote {
		stamp(w.Header())
		sw.status = http.StatusOK
	}
	if m.c.RefundServerErrors && sw.status >= 500 {
		go m.refund(key, res.Now)
	}
}

// refund takes back the newest request of key logged at or before at, this request's own time:
// never a request logged after it (the newest without AT could be one, or a lease's permit
// logged at its end, and this request would then stay counted in its place).
func (m *middleware) refund(key string, at time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), m.c.Timeout)
	defer cancel()
	if _, err := m.limiter.Refund(ctx, key, 1, at); err != nil {
		m.log.failed(fmt.Errorf("refund of %s failed: %w", key, err))
	}
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(body))
}

// writer stamps the rate-limit headers on the response as its status is written (over any the
// handler set, as the gateway does) and keeps the status.
type writer struct {
	http.ResponseWriter
	stamp  func(http.Header)
	status int
	wrote  bool
}

func (w *writer) WriteHeader(code int) {
	// 1xx responses are informational: the real one follows.
	if !w.wrote && code >= 200 {
		w.wrote = true
		w.status = code
		w.stamp(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *writer) Write(b []byte) (int, error) {
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Flush lets streaming handlers flush through the middleware.
func (w *writer) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		if !w.wrote {
			w.WriteHeader(http.StatusOK)
		}
		f.Flush()
	}
}

// Hijack lets a handler take the connection over (websockets) when the server allows it.
func (w *writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	if h, ok := w.ResponseWriter.(http.Hijacker); ok {
		w.wrote = true
		return h.Hijack()
	}
	return nil, nil, errors.New("httplimit: the ResponseWriter cannot be hijacked")
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *writer) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// errorLog prints one line per second at most, saying how many it left out, and one line when
// calls succeed again after a failure.
type errorLog struct {
	out     *log.Logger
	failing atomic.Bool
	mu      sync.Mutex
	last    time.Time
	left    int
}

func (l *errorLog) failed(err error) {
	l.failing.Store(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if !l.last.IsZero() && now.Sub(l.last) < time.Second {
		l.left++
		return
	}
	l.out.Printf("slidingwindow: %v%s", err, l.leftOut())
	l.last = now
}

// succeeded ends a run of failures with a line; the common case costs one atomic load.
func (l *errorLog) succeeded() {
	if !l.failing.Load() {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failing.Swap(false) {
		l.out.Printf("slidingwindow: rate limiter answering again%s", l.leftOut())
	}
}

// leftOut is " (N more since the last line)" for the lines left out, and forgets them.
func (l *errorLog) leftOut() string {
	n := l.left
	l.left = 0
	if n == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d more since the last line)", n)
}
