package slidingwindow_test

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

// The Lua path against the module, on one server with the module loaded, as the Python and
// Node.js suites do: the same seeded random call streams (COST, PEEK, LIMIT, LEASE, PRECISION, DETAIL, the
// options in any order, time going back, whole windows passing; ALLOWALL, PEEKALL, REFUND over
// several keys) go to twin keys, one driven by the module, one by the script, and to a third
// driven by either at random; at lateness 0 and at 20 s (the module's slidingwindow.lateness,
// the script's WithLateness). Replies (or error texts), every key's scores and whether it has a
// TTL must agree.

const start = int64(1_700_000_000_000)

type twins struct {
	s           *testredis.Server
	module, lua *slidingwindow.Limiter
}

func newTwins(t *testing.T) twins { return lateTwins(t, 0) }

// lateTwins are twins at lateness g: for g > 0 on a server of their own.
func lateTwins(t *testing.T, g time.Duration) twins {
	s := testredis.Shared(t, true)
	if g > 0 {
		var err error
		if s, err = testredis.Start(true); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		if _, err := s.Do("CONFIG", "SET", "slidingwindow.lateness", int64(g/time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	rdb := redigo.Pool(s.Pool())
	return twins{s, slidingwindow.NewLimiter(rdb, slidingwindow.WithPath(slidingwindow.Module)),
		slidingwindow.NewLimiter(rdb, slidingwindow.WithPath(slidingwindow.Lua), slidingwindow.WithLateness(g))}
}

// lateness is each stream's two runs.
var lateness = []time.Duration{0, 20 * time.Second}

// timesAndDetail are the groups `LEASE ms`, `PRECISION p` and `DETAIL`, each drawn or not; now
// and then now + ms is past 2^53, or rounded up past it.
func timesAndDetail(r *rand.Rand, now int64) [][]any {
	spell := func(upper, lower string) string {
		if r.Intn(4) == 0 {
			return lower
		}
		return upper
	}
	var groups [][]any
	switch roll := r.Intn(100); {
	case roll < 2:
		groups = append(groups, []any{spell("LEASE", "lease"), int64(1)<<53 - now + 1})
	case roll < 4:
		// 2^53 - 1 rounds up to 2^53 + 8.
		groups = append(groups, []any{spell("LEASE", "lease"), int64(1)<<53 - 1 - now}, []any{spell("PRECISION", "precision"), 1000})
	case roll < 25:
		groups = append(groups, []any{spell("LEASE", "lease"), between(r, 1, 3_000)})
	}
	if r.Intn(100) < 30 && len(groups) < 2 {
		groups = append(groups, []any{spell("PRECISION", "precision"), pick(r, []int64{1, 7, 1000, 60_000})})
	}
	if r.Intn(100) < 30 {
		groups = append(groups, []any{spell("DETAIL", "detail")})
	}
	return groups
}

// drawn counts what a stream exercised: calls admitted with a lease and with a precision, DETAIL
// replies, and errors naming LEASE and PRECISION.
type drawn struct{ leased, rounded, detailed, leaseErrors, precisionErrors int }

func (d *drawn) add(args []any, reply any) {
	leased, rounded := false, false
	for _, a := range args {
		if s, ok := a.(string); ok {
			leased = leased || strings.EqualFold(s, "LEASE")
			rounded = rounded || strings.EqualFold(s, "PRECISION")
		}
	}
	switch v := reply.(type) {
	case []any:
		if len(v) == 8 {
			d.detailed++
		}
		if leased && v[0] == int64(1) {
			d.leased++
		}
		if rounded && v[0] == int64(1) {
			d.rounded++
		}
	case string:
		if strings.HasPrefix(v, "error: ERR LEASE") {
			d.leaseErrors++
		}
		if strings.HasPrefix(v, "error: ERR PRECISION") {
			d.precisionErrors++
		}
	}
}

func (d drawn) check(t *testing.T) {
	t.Helper()
	if d.leased == 0 || d.rounded == 0 || d.detailed == 0 || d.leaseErrors == 0 || d.precisionErrors == 0 {
		t.Fatalf("the stream drew %+v", d)
	}
}

// flat is the groups of options in a random order, one after the other.
func flat(r *rand.Rand, groups [][]any) []any {
	r.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	var out []any
	for _, g := range groups {
		out = append(out, g...)
	}
	return out
}

// outcome is a reply, or the error's text, so that errors compare too.
func outcome(reply any, err error) any {
	if err != nil {
		return "error: " + err.Error()
	}
	return reply
}

func (tw twins) scores(t *testing.T, key string) []string {
	t.Helper()
	v, err := tw.s.Strings("ZRANGE", key, 0, -1, "WITHSCORES")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// same checks that the keys hold the same members' scores and agree on having a TTL.
func (tw twins) same(t *testing.T, what string, keys ...string) {
	t.Helper()
	want := tw.scores(t, keys[0])
	var scores []string
	for i := 1; i < len(want); i += 2 {
		scores = append(scores, want[i])
	}
	ttl := func(k string) bool { n, _ := tw.s.Int64("PTTL", k); return n > 0 }
	for _, k := range keys[1:] {
		got := tw.scores(t, k)
		var gs []string
		for i := 1; i < len(got); i += 2 {
			gs = append(gs, got[i])
		}
		if !reflect.DeepEqual(gs, scores) || ttl(k) != ttl(keys[0]) {
			t.Fatalf("%s: %s holds %v (TTL %v), %s %v (TTL %v)", what, k, gs, ttl(k), keys[0], scores, ttl(keys[0]))
		}
	}
}

type stream struct {
	name               string
	seed               int64
	steps              int
	windows, maxes     []int64
	most               int
	back, jump, stride int64
}

func pick(r *rand.Rand, xs []int64) int64 { return xs[r.Intn(len(xs))] }

func between(r *rand.Rand, lo, hi int64) int64 { return lo + r.Int63n(hi-lo+1) }

func TestScriptEqualsModuleOnStreams(t *testing.T) {
	for _, sc := range []stream{
		{"one", 11, 400, []int64{60, 120}, []int64{1, 3, 8}, 1, 50, 30, 10_000},
		{"several", 12, 400, []int64{1, 2, 10, 60}, []int64{1, 3, 7}, 4, 50, 30, 600},
	} {
		for _, g := range lateness {
			sc, g := sc, g
			t.Run(fmt.Sprintf("%s/lateness %v", sc.name, g), func(t *testing.T) {
				tw := lateTwins(t, g)
				r := rand.New(rand.NewSource(sc.seed))
				keys := map[string]string{}
				for _, p := range []string{"module", "lua", "mixed"} {
					keys[p] = fmt.Sprintf("go:%s:%s:%d:{%d}", sc.name, p, g/time.Millisecond, sc.seed)
				}
				now, admitted := start, 0
				var seen drawn
				for step := 0; step < sc.steps; step++ {
					limits := make([][2]int64, 1+r.Intn(sc.most))
					wmax := int64(0)
					for i := range limits {
						limits[i] = [2]int64{pick(r, sc.windows), pick(r, sc.maxes)}
						if limits[i][0] > wmax {
							wmax = limits[i][0]
						}
					}
					// A window of a minute or more keeps every key alive (by the server's clock).
					if wmax < 60 {
						limits[0][0], wmax = 60, 60
					}
					wmax *= 1000
					switch dice := r.Int63n(1000); {
					case dice < sc.back:
						now -= between(r, 0, wmax)
					case dice < sc.back+sc.jump:
						now += between(r, 1, 3)*wmax + between(r, -1, 1)
					default:
						now += between(r, 0, sc.stride)
					}
					cost := int64(1)
					if roll := r.Intn(100); roll < 10 {
						cost = between(r, 2, 4)
					} else if roll < 13 {
						cost = limits[0][1] + 1
					}
					command := "allow"
					if r.Intn(100) < 30 {
						command = "peek"
					}
					groups := timesAndDetail(r, now)
					if cost != 1 {
						groups = append(groups, []any{"COST", cost})
					}
					for _, l := range limits[1:] {
						groups = append(groups, []any{"LIMIT", l[0], l[1]})
					}
					args := append([]any{limits[0][0], limits[0][1], now}, flat(r, groups)...)
					mixed := tw.module
					if r.Intn(2) == 1 {
						mixed = tw.lua
					}
					what := fmt.Sprintf("step %d: %s %v", step, command, args)
					want := outcome(tw.module.Call(ctx, command, keys["module"], args...))
					for name, got := range map[string]any{
						"lua":   outcome(tw.lua.Call(ctx, command, keys["lua"], args...)),
						"mixed": outcome(mixed.Call(ctx, command, keys["mixed"], args...)),
					} {
						if !reflect.DeepEqual(got, want) {
							t.Fatalf("%s: %s answered %v, the module %v", what, name, got, want)
						}
					}
					tw.same(t, what, keys["module"], keys["lua"], keys["mixed"])
					if v, ok := want.([]any); ok && command == "allow" && v[0] == int64(1) {
						admitted++
					}
					seen.add(args, want)
				}
				if admitted == 0 || admitted == sc.steps {
					t.Fatalf("%d of %d admitted", admitted, sc.steps)
				}
				seen.check(t)
			})
		}
	}
}

type keysStream struct {
	name                 string
	seed                 int64
	steps, pool          int
	mostKeys, mostLimits int
	windows, maxes       []int64
	refunds, peeks       int
}

func TestScriptEqualsModuleOverSeveralKeys(t *testing.T) {
	for _, sc := range []keysStream{
		{"tenant", 14, 300, 3, 2, 2, []int64{1, 60}, []int64{2, 3, 6}, 25, 20},
		{"wide", 15, 200, 6, 6, 4, []int64{1, 5, 60, 120}, []int64{1, 3, 8}, 25, 20},
	} {
		for _, g := range lateness {
			sc, g := sc, g
			t.Run(fmt.Sprintf("%s/lateness %v", sc.name, g), func(t *testing.T) {
				tw := lateTwins(t, g)
				r := rand.New(rand.NewSource(sc.seed))
				sets := map[string][]string{}
				for _, p := range []string{"module", "lua", "mixed"} {
					for k := 0; k < sc.pool; k++ {
						// One hash tag per set, as a cluster would need.
						sets[p] = append(sets[p], fmt.Sprintf("go:%s:%s:%d:%d:{%d}", sc.name, p, g/time.Millisecond, k, sc.seed))
					}
				}
				now := start
				admitted, refunded := 0, int64(0)
				var seen drawn
				for step := 0; step < sc.steps; step++ {
					switch dice := r.Int63n(1000); {
					case dice < 60:
						now -= between(r, 0, 60_000)
					case dice < 80:
						now += between(r, 60_000, 180_000) + between(r, -1, 1)
					default:
						now += between(r, 0, 2_000)
					}
					mixed := tw.module
					if r.Intn(2) == 1 {
						mixed = tw.lua
					}
					var what string
					var want any
					if roll := r.Intn(100); roll < sc.refunds {
						k := r.Intn(sc.pool)
						args := []any{pick(r, []int64{1, 1, 2, 3, 10})}
						switch r.Intn(5) {
						case 1:
							args = append(args, "AT", now)
						case 2:
							args = append(args, "AT", now-between(r, 0, 5_000))
						case 3:
							args = append(args, "AT", "*")
						case 4:
							// A lease's end.
							args = append(args, "AT", now+between(r, 1, 3_000))
						}
						what = fmt.Sprintf("step %d: refund key %d %v", step, k, args)
						want = outcome(tw.module.Call(ctx, "refund", sets["module"][k], args...))
						for name, got := range map[string]any{
							"lua":   outcome(tw.lua.Call(ctx, "refund", sets["lua"][k], args...)),
							"mixed": outcome(mixed.Call(ctx, "refund", sets["mixed"][k], args...)),
						} {
							if !reflect.DeepEqual(got, want) {
								t.Fatalf("%s: %s answered %v, the module %v", what, name, got, want)
							}
						}
						if n, ok := want.(int64); ok {
							refunded += n
						}
					} else {
						command := "allowall"
						if roll < sc.refunds+sc.peeks {
							command = "peekall"
						}
						chosen := r.Perm(sc.pool)[:1+r.Intn(sc.mostKeys)]
						var limits [][3]int64
						for i := range chosen {
							mine := make([][2]int64, 1+r.Intn(sc.mostLimits))
							long := false
							for j := range mine {
								mine[j] = [2]int64{pick(r, sc.windows), pick(r, sc.maxes)}
								long = long || mine[j][0] >= 60
							}
							if !long {
								mine[0][0] = 60
							}
							for _, l := range mine {
								limits = append(limits, [3]int64{int64(i + 1), l[0], l[1]})
							}
						}
						r.Shuffle(len(limits), func(i, j int) { limits[i], limits[j] = limits[j], limits[i] })
						cost := int64(1)
						if roll := r.Intn(10); roll >= 9 {
							cost = limits[0][2] + 1
						} else if roll >= 7 {
							cost = between(r, 2, 3)
						}
						groups := timesAndDetail(r, now)
						if cost != 1 {
							groups = append(groups, []any{"COST", cost})
						}
						for _, l := range limits {
							groups = append(groups, []any{"LIMIT", l[0], l[1], l[2]})
						}
						options := flat(r, groups)
						argsOf := func(p string) []any {
							args := []any{len(chosen)}
							for _, k := range chosen {
								args = append(args, sets[p][k])
							}
							return append(append(args, now), options...)
						}
						what = fmt.Sprintf("step %d: %s %v", step, command, argsOf("lua"))
						want = outcome(tw.module.CallKeys(ctx, command, argsOf("module")...))
						for name, got := range map[string]any{
							"lua":   outcome(tw.lua.CallKeys(ctx, command, argsOf("lua")...)),
							"mixed": outcome(mixed.CallKeys(ctx, command, argsOf("mixed")...)),
						} {
							if !reflect.DeepEqual(got, want) {
								t.Fatalf("%s: %s answered %v, the module %v", what, name, got, want)
							}
						}
						if v, ok := want.([]any); ok && command == "allowall" && v[0] == int64(1) {
							admitted++
						}
						seen.add(options, want)
					}
					for k := 0; k < sc.pool; k++ {
						tw.same(t, fmt.Sprintf("%s: key %d", what, k), sets["module"][k], sets["lua"][k], sets["mixed"][k])
					}
				}
				if admitted == 0 || admitted == sc.steps || refunded == 0 {
					t.Fatalf("%d admitted, %d refunded", admitted, refunded)
				}
				seen.check(t)
			})
		}
	}
}

// Malformed and odd argument lists: the same reply or the same error text, byte for byte.
func TestScriptEqualsModuleOnAnyArguments(t *testing.T) {
	tokens := []any{"", "0", "1", "01", "-1", "1.5", "inf", "*", "x", "9007199254740993", "9007199254740992",
		"COST", "cost", "LEASE", "lease", "PRECISION", "precision", "1000", "DETAIL", "detail", "FOO", []byte{0, 255}}
	keyTokens := []any{"", "0", "1", "2", "3", "17", "-1", "1.5", "inf", "*", "x", "9007199254740993", "COST", "cost",
		"LIMIT", "limit", "AT", "at", "LEASE", "lease", "PRECISION", "precision", "1000", "DETAIL", "detail", "FOO", []byte{0, 255}, "k1", "k2"}
	for _, c := range []struct {
		command string
		pool    []any
	}{
		{"allow", tokens}, {"peek", append(append([]any{}, tokens...), "LIMIT", "limit")},
		{"allowall", keyTokens}, {"peekall", keyTokens}, {"refund", keyTokens},
	} {
		c := c
		t.Run(c.command, func(t *testing.T) {
			tw := newTwins(t)
			r := rand.New(rand.NewSource(int64(len(c.command) + len(c.pool))))
			errors := 0
			const calls = 1500
			for i := 0; i < calls; i++ {
				args := make([]any, r.Intn(12))
				for j := range args {
					args[j] = c.pool[r.Intn(len(c.pool))]
				}
				prefix := fmt.Sprintf("go:junk:%s:%d:{%d}", c.command, i, i)
				if r.Intn(3) != 0 {
					switch c.command {
					case "allow", "peek":
						head := []any{between(r, 1, 100), between(r, 1, 10), start + int64(i)}
						args = append(head, after(args, 3)...)
					case "refund":
						args = append([]any{between(r, 1, 3)}, after(args, 1)...)
					default:
						n := 1 + r.Intn(3)
						head := []any{n}
						for j := 1; j <= n; j++ {
							head = append(head, fmt.Sprintf("k%d", j))
						}
						head = append(head, start+int64(i))
						if r.Intn(2) == 1 {
							for j := 1; j <= n; j++ {
								head = append(head, "LIMIT", j, 60, 5)
							}
						}
						args = append(head, args...)
					}
				}
				// Each side's keys: k1, k2 and k3 name keys of its own.
				side := func(p string) []any {
					out := make([]any, len(args))
					for j, a := range args {
						if s, ok := a.(string); ok && (s == "k1" || s == "k2" || s == "k3") {
							a = prefix + ":" + p + ":" + s
						}
						out[j] = a
					}
					return out
				}
				run := func(sw *slidingwindow.Limiter, p string) any {
					if c.command == "allow" || c.command == "peek" || c.command == "refund" {
						return outcome(sw.Call(ctx, c.command, prefix+":"+p, side(p)...))
					}
					return outcome(sw.CallKeys(ctx, c.command, side(p)...))
				}
				for _, p := range []string{"m", "l"} {
					for _, k := range []string{"", ":k1", ":k2"} {
						if _, err := tw.s.Do("ZADD", prefix+":"+p+k, start+int64(i)-1, "a", start+int64(i)-2, "b"); err != nil {
							t.Fatal(err)
						}
					}
				}
				plain := func(v any, p string) any {
					if s, ok := v.(string); ok {
						return strings.ReplaceAll(s, prefix+":"+p, "KEY")
					}
					return v
				}
				want, got := plain(run(tw.module, "m"), "m"), plain(run(tw.lua, "l"), "l")
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("%s %q: the script answered %v, the module %v", c.command, args, got, want)
				}
				for _, k := range []string{"", ":k1", ":k2", ":k3"} {
					tw.same(t, fmt.Sprintf("%s %q", c.command, args), prefix+":m"+k, prefix+":l"+k)
				}
				if _, ok := want.(string); ok {
					errors++
				}
			}
			if errors == 0 || errors == calls {
				t.Fatalf("%d of %d calls were errors", errors, calls)
			}
		})
	}
}

// after is args without its first n elements (all of them when it is shorter).
func after(args []any, n int) []any {
	if n > len(args) {
		n = len(args)
	}
	return args[n:]
}
