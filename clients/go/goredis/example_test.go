package goredis_test

import (
	"fmt"
	"log"
	"net/http"

	"github.com/redis/go-redis/v9"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/goredis"
	"github.com/slidingwindow/slidingwindow/clients/go/httplimit"
)

// The README's middleware on go-redis: 10 requests a second and 100 a minute for each client
// address, 5xx answers taken back.
func Example_httplimit() {
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })

	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	limit, err := httplimit.New(goredis.NewLimiter(rdb), httplimit.Config{
		Limits:             []slidingwindow.Limit{slidingwindow.PerSecond(10), slidingwindow.PerMinute(100)},
		RefundServerErrors: true,
	})
	if err != nil {
		log.Fatal(err) // ErrWindow, ErrNoLimits: the Config is checked here
	}
	log.Fatal(http.ListenAndServe(":8080", limit(mux)))
}
