package slidingwindow_test

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/mna/redisc"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/httplimit"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo/cluster"
)

// The README's examples, compiled (they need a server, so they do not run here).

func ExampleLimiter_Allow() {
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", "127.0.0.1:6379") }}
	sw := slidingwindow.NewLimiter(redigo.Pool(pool))
	r, err := sw.Allow(context.Background(), "rl:{user:42}", slidingwindow.PerSecond(10), slidingwindow.PerMinute(100))
	if err != nil {
		return // Redis could not decide: fail open or closed
	}
	fmt.Println(r.Allowed, r.Remaining, r.RetryAfter)
}

func ExampleLimiter_AllowAll() {
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", "127.0.0.1:6379") }}
	sw := slidingwindow.NewLimiter(redigo.Pool(pool))
	ctx := context.Background()
	user, tenant := "rl:{acme}:user:42", "rl:{acme}"
	keyed := []slidingwindow.Keyed{
		{Key: user, Limits: []slidingwindow.Limit{slidingwindow.PerSecond(10), slidingwindow.PerMinute(100)}},
		{Key: tenant, Limits: []slidingwindow.Limit{slidingwindow.PerMinute(1000)}},
	}
	// Detail: r.Now is the server's time of the decision, for the refund's AT.
	r, err := sw.AllowAll(ctx, keyed, slidingwindow.Detail())
	if err != nil {
		return
	}
	if !r.Allowed {
		fmt.Println(r.BindingKey, r.BindingLimit) // rl:{acme}:user:42 10 per 1s
		return
	}
	if upstream() >= 500 {
		// Not the caller's fault: take the request back from every key it was charged to.
		for _, k := range keyed {
			sw.Refund(ctx, k.Key, 1, r.Now)
		}
	}
}

func upstream() int { return http.StatusOK }

func Example_cluster() {
	rc := &redisc.Cluster{
		StartupNodes: []string{"10.0.0.1:6379"},
		CreatePool: func(addr string, opts ...redis.DialOption) (*redis.Pool, error) {
			return &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr, opts...) }}, nil
		},
	}
	if err := rc.Refresh(); err != nil { // loads the slot map
		return
	}
	sw := slidingwindow.NewLimiter(cluster.New(rc))
	sw.Allow(context.Background(), "rl:{user:42}", slidingwindow.PerSecond(10))
}

func Example_middleware() {
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", "127.0.0.1:6379") }}
	limit, err := httplimit.New(slidingwindow.NewLimiter(redigo.Pool(pool)), httplimit.Config{
		Limits:             []slidingwindow.Limit{slidingwindow.PerSecond(10), slidingwindow.PerMinute(100)},
		RefundServerErrors: true,
	})
	if err != nil {
		panic(err)
	}
	http.ListenAndServe("127.0.0.1:8080", limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})))
}

func ExampleLeaser() {
	pool := &redis.Pool{Dial: func() (redis.Conn, error) { return redis.Dial("tcp", "127.0.0.1:6379") }}
	sw := slidingwindow.NewLimiter(redigo.Pool(pool))
	// One global key for the whole fleet: 2000 a second, taken 100 at a time for 100 ms.
	global, err := sw.NewLeaser("rl:{global}", []slidingwindow.Limit{slidingwindow.PerSecond(2000)},
		slidingwindow.LeaseConfig{Size: 100, Duration: 100 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	defer global.Close(context.Background()) // returns the permits not handed out
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	r, err := global.Allow(ctx) // from memory while the lease lasts and has permits
	if err != nil {
		return
	}
	fmt.Println(r.Allowed, r.Remaining)
}
