package redigo_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

// workload is one of `make bench`'s (bench/src/workload.rs), on a simulated clock that moves
// step µs per call: hot offers 2000 requests per window to a max of 1000, wide 20 per window
// to each key's max of 10, so about half are admitted.
type workload struct {
	name   string
	keys   int
	limit  slidingwindow.Limit
	stepUs int64
}

var workloads = []workload{
	{"hot", 1, slidingwindow.Limit{Window: 10 * time.Second, Max: 1000}, 5_000},
	{"wide", 10_000, slidingwindow.Limit{Window: 60 * time.Second, Max: 10}, 300},
}

// lane is one workload on one path, with its own keys and clock.
type lane struct {
	w      workload
	sw     *slidingwindow.Limiter
	prefix string
	nowUs  int64
	rng    *rand.Rand
}

func (l *lane) key() string {
	k := 0
	if l.w.keys > 1 {
		k = l.rng.Intn(l.w.keys)
	}
	return l.prefix + strconv.Itoa(k) + "}"
}

// warm gives every key the history of the workload's traffic before the timed calls, through
// the module's command in pipelines (the script's keys are the same data). Each key of wide
// starts its traffic at its own moment, 1 to 3 windows back, so that the keys' windows do not
// fill and empty in step.
func (l *lane) warm(b *testing.B, s *testredis.Server) {
	c := s.Pool().Get()
	defer c.Close()
	window := int64(l.w.limit.Window / time.Microsecond)
	pending := 0
	send := func(key string, us int64) {
		c.Send("SLIDINGWINDOW.ALLOW", key, int64(l.w.limit.Window/time.Second), l.w.limit.Max, us/1000)
		if pending++; pending == 1000 {
			receive(b, c, pending)
			pending = 0
		}
	}
	if l.w.keys == 1 {
		for us := l.nowUs - 3*window; us < l.nowUs; us += l.w.stepUs {
			send(l.key(), us)
		}
	}
	// Per key, one request every keys * step µs on average, at random.
	mean := float64(int64(l.w.keys) * l.w.stepUs)
	for k := 0; l.w.keys > 1 && k < l.w.keys; k++ {
		for us := l.nowUs - window - l.rng.Int63n(2*window); us < l.nowUs; us += int64(l.rng.ExpFloat64()*mean) + 1 {
			send(l.prefix+strconv.Itoa(k)+"}", us)
		}
	}
	receive(b, c, pending)
}

// pipe is the part of a connection receive uses.
type pipe interface {
	Flush() error
	Receive() (any, error)
}

func receive(b *testing.B, c pipe, n int) {
	if err := c.Flush(); err != nil {
		b.Fatal(err)
	}
	for ; n > 0; n-- {
		if _, err := c.Receive(); err != nil {
			b.Fatal(err)
		}
	}
}

// inCommand is the µs the server spent inside command name since the last CONFIG RESETSTAT
// (INFO commandstats).
func inCommand(b *testing.B, s *testredis.Server, name string) float64 {
	info, err := s.Text("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if rest := strings.TrimPrefix(line, "cmdstat_"+name+":"); rest != line {
			for _, field := range strings.Split(rest, ",") {
				if v := strings.TrimPrefix(field, "usec="); v != field {
					us, _ := strconv.ParseFloat(v, 64)
					return us
				}
			}
		}
	}
	return 0
}

func serverCPU(b *testing.B, s *testredis.Server) float64 {
	cpu, err := s.CPUSeconds()
	if err != nil {
		b.Fatal(err)
	}
	return cpu
}

// paths is the two paths a benchmark compares, by name.
var paths = []struct {
	name string
	path slidingwindow.Path
}{{"module", slidingwindow.Module}, {"lua", slidingwindow.Lua}}

// benchServer is the rounds BENCH_ROUNDS asks for (1 at least) and a server with the module,
// closed when b ends.
func benchServer(b *testing.B) (int, *testredis.Server) {
	rounds, _ := strconv.Atoi(os.Getenv("BENCH_ROUNDS"))
	if rounds < 1 {
		rounds = 1
	}
	s, err := testredis.Start(true)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return rounds, s
}

// BenchmarkAllow: Allow through a redigo pool, one call at a time, the module against the
// script on hot (one key) and wide (10,000 keys), then PING (a round trip's floor), the variants
// taking turns in each round. BENCH_ROUNDS sets the rounds (default 1). Besides ns/op (the round
// trip, as the caller sees it), server-µs/op is the server's CPU time per call (INFO cpu:
// syscalls included), in-command-µs/op the time inside SLIDINGWINDOW.ALLOW or EVALSHA (INFO
// commandstats), and admitted the share of calls admitted.
func BenchmarkAllow(b *testing.B) {
	rounds, s := benchServer(b)
	rdb := redigo.Pool(s.Pool())
	start := time.Now().UnixMicro()
	var lanes []*lane
	for _, w := range workloads {
		for _, p := range paths {
			l := &lane{w, slidingwindow.NewLimiter(rdb, slidingwindow.WithPath(p.path)),
				fmt.Sprintf("bench:%s:%s:{", w.name, p.name), start, rand.New(rand.NewSource(1))}
			l.warm(b, s)
			lanes = append(lanes, l)
		}
	}
	ctx := context.Background()
	for round := 0; round < rounds; round++ {
		for _, l := range lanes {
			path := "module"
			if strings.Contains(l.prefix, ":lua:") {
				path = "lua"
			}
			b.Run(l.w.name+"/"+path, func(b *testing.B) {
				limits := []slidingwindow.Limit{l.w.limit}
				admitted := 0
				if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
					b.Fatal(err)
				}
				cpu := serverCPU(b, s)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					l.nowUs += l.w.stepUs
					r, err := l.sw.AllowWith(ctx, l.key(), limits, slidingwindow.Now(time.UnixMicro(l.nowUs)))
					if err != nil {
						b.Fatal(err)
					}
					if r.Allowed {
						admitted++
					}
				}
				b.StopTimer()
				b.ReportMetric((serverCPU(b, s)-cpu)*1e6/float64(b.N), "server-µs/op")
				command := map[string]string{"module": "slidingwindow.allow", "lua": "evalsha"}[path]
				b.ReportMetric(inCommand(b, s, command)/float64(b.N), "in-command-µs/op")
				b.ReportMetric(float64(admitted)/float64(b.N), "admitted")
			})
		}
		// The floor: a round trip that does nothing.
		b.Run("ping", func(b *testing.B) {
			cpu := serverCPU(b, s)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := rdb.Do(ctx, "PING"); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((serverCPU(b, s)-cpu)*1e6/float64(b.N), "server-µs/op")
		})
	}
}

// calls is the Redis calls the limiter sent since the last CONFIG RESETSTAT (INFO commandstats):
// the module's ALLOW and REFUND, or the script's EVALSHA and EVAL.
func calls(b *testing.B, s *testredis.Server) int64 {
	info, err := s.Text("INFO", "commandstats")
	if err != nil {
		b.Fatal(err)
	}
	total := int64(0)
	for _, line := range strings.Split(info, "\r\n") {
		for _, name := range []string{"slidingwindow.allow", "slidingwindow.refund", "evalsha", "eval"} {
			if rest := strings.TrimPrefix(line, "cmdstat_"+name+":calls="); rest != line {
				n, _ := strconv.ParseInt(strings.SplitN(rest, ",", 2)[0], 10, 64)
				total += n
			}
		}
	}
	return total
}

// BenchmarkAllowLeased: one hot key far from its max (every request admitted), on the server's
// clock, through a Leaser (leases of 100 for 100 ms) against plain Allow, on both paths, from
// one goroutine and from 8; the variants take turns in each of BENCH_ROUNDS rounds. Besides
// ns/op, redis-calls/op is the commands the server ran per Allow (INFO commandstats),
// server-µs/op its CPU time per Allow, and admitted the share admitted.
func BenchmarkAllowLeased(b *testing.B) {
	rounds, s := benchServer(b)
	rdb := redigo.Pool(s.Pool())
	limits := []slidingwindow.Limit{{Window: 10 * time.Second, Max: 1_000_000_000}}
	type variant struct {
		name  string
		allow func(context.Context) (slidingwindow.Result, error)
	}
	var variants []variant
	for _, p := range paths {
		sw := slidingwindow.NewLimiter(rdb, slidingwindow.WithPath(p.path))
		plain := "bench:lease:" + p.name + ":allow"
		variants = append(variants, variant{p.name + "/allow", func(ctx context.Context) (slidingwindow.Result, error) {
			return sw.Allow(ctx, plain, limits...)
		}})
		lsr, err := sw.NewLeaser("bench:lease:"+p.name+":leased", limits, slidingwindow.LeaseConfig{Size: 100, Duration: 100 * time.Millisecond})
		if err != nil {
			b.Fatal(err)
		}
		defer lsr.Close(context.Background())
		variants = append(variants, variant{p.name + "/leaser", lsr.Allow})
	}
	ctx := context.Background()
	for round := 0; round < rounds; round++ {
		for _, goroutines := range []int{1, 8} {
			for _, v := range variants {
				b.Run(fmt.Sprintf("%s/goroutines=%d", v.name, goroutines), func(b *testing.B) {
					if _, err := s.Do("CONFIG", "RESETSTAT"); err != nil {
						b.Fatal(err)
					}
					cpu := serverCPU(b, s)
					var admitted atomic.Int64
					one := func() {
						r, err := v.allow(ctx)
						if err != nil {
							b.Error(err)
						} else if r.Allowed {
							admitted.Add(1)
						}
					}
					b.ResetTimer()
					if goroutines == 1 {
						for i := 0; i < b.N; i++ {
							one()
						}
					} else {
						b.SetParallelism((goroutines + runtime.GOMAXPROCS(0) - 1) / runtime.GOMAXPROCS(0))
						b.RunParallel(func(pb *testing.PB) {
							for pb.Next() {
								one()
							}
						})
					}
					b.StopTimer()
					b.ReportMetric(float64(calls(b, s))/float64(b.N), "redis-calls/op")
					b.ReportMetric((serverCPU(b, s)-cpu)*1e6/float64(b.N), "server-µs/op")
					b.ReportMetric(float64(admitted.Load())/float64(b.N), "admitted")
				})
			}
		}
	}
}
