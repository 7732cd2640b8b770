package goredis_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"strconv"
	"testing"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/goredis"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
)

// BenchmarkAllowBesideRedisRate: go-redis/redis_rate v10's Allow (GCRA, one script) beside
// this package's (an exact log: the module's command, and the script on the same server), one
// call at a time through one redis.Client, on the server's clock, on one server with the
// module. Two workloads: "hot", one key at 1000 a second (the calls offered are several times
// that, so most are refused), and "wide", 10,000 keys at 10 a second each, picked at random (all
// admitted). The variants take turns in each of BENCH_ROUNDS rounds (default 1). Besides ns/op
// (the round trip, as the caller sees it), server-µs/op is the server's CPU time per call (INFO
// cpu: syscalls included) and admitted the share admitted.
func BenchmarkAllowBesideRedisRate(b *testing.B) {
	rounds, _ := strconv.Atoi(os.Getenv("BENCH_ROUNDS"))
	s, err := testredis.Start(true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr()})
	b.Cleanup(func() { rdb.Close() })
	gcra := redis_rate.NewLimiter(rdb)
	module := goredis.NewLimiter(rdb, slidingwindow.WithPath(slidingwindow.Module))
	lua := goredis.NewLimiter(rdb, slidingwindow.WithPath(slidingwindow.Lua))
	type workload struct {
		name string
		keys int
		rate int
	}
	type variant struct {
		name  string
		allow func(ctx context.Context, key string, rate int) (bool, error)
	}
	ours := func(sw *slidingwindow.Limiter) func(context.Context, string, int) (bool, error) {
		return func(ctx context.Context, key string, rate int) (bool, error) {
			r, err := sw.Allow(ctx, key, slidingwindow.PerSecond(int64(rate)))
			return r.Allowed, err
		}
	}
	variants := []variant{
		{"redis_rate", func(ctx context.Context, key string, rate int) (bool, error) {
			r, err := gcra.Allow(ctx, key, redis_rate.PerSecond(rate))
			if err != nil {
				return false, err
			}
			return r.Allowed > 0, nil
		}},
		{"module", ours(module)},
		{"lua", ours(lua)},
	}
	ctx := context.Background()
	for round := 0; round < max(rounds, 1); round++ {
		for _, w := range []workload{{"hot", 1, 1000}, {"wide", 10_000, 10}} {
			for _, v := range variants {
				b.Run(w.name+"/"+v.name, func(b *testing.B) {
					rng := rand.New(rand.NewSource(int64(round)))
					prefix := fmt.Sprintf("bench:rate:%s:%s:{", w.name, v.name)
					cpu, err := s.CPUSeconds()
					if err != nil {
						b.Fatal(err)
					}
					admitted := 0
					b.ResetTimer()
					for i := 0; i < b.N; i++ {
						allowed, err := v.allow(ctx, prefix+strconv.Itoa(rng.Intn(w.keys))+"}", w.rate)
						if err != nil {
							b.Fatal(err)
						}
						if allowed {
							admitted++
						}
					}
					b.StopTimer()
					after, err := s.CPUSeconds()
					if err != nil {
						b.Fatal(err)
					}
					b.ReportMetric((after-cpu)*1e6/float64(b.N), "server-µs/op")
					b.ReportMetric(float64(admitted)/float64(b.N), "admitted")
				})
			}
		}
	}
}
