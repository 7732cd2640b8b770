package slidingwindow_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/replay"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
	"github.com/slidingwindow/slidingwindow/clients/go/redigo"
)

const (
	nowMs     = int64(1_700_000_000_000)
	windowErr = "window must be an integer between 1 and 9007199254740 (window * 1000 <= 2^53)"
	maxErr    = "max must be an integer between 1 and 9007199254740992"
	crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
)

var (
	ctx     = context.Background()
	minute  = slidingwindow.Limit{Window: time.Minute, Max: 5}
	second3 = slidingwindow.Limit{Window: time.Second, Max: 3}
)

// env is one path: a server (with the module, or without it for the script) and a Limiter on it.
type env struct {
	name string
	s    *testredis.Server
	sw   *slidingwindow.Limiter
}

// both runs f on the module's path and on the script's.
func both(t *testing.T, f func(t *testing.T, e env)) {
	replay.Both(t, pool, func(t *testing.T, path string, s *testredis.Server, sw *slidingwindow.Limiter) {
		f(t, env{path, s, sw})
	})
}

// key is a fresh key with its own hash tag.
func key() string { return replay.Key() }

func at(ms int64) slidingwindow.Option { return slidingwindow.Now(time.UnixMilli(ms)) }

func do(t *testing.T, s *testredis.Server, name string, args ...any) any {
	t.Helper()
	v, err := s.Do(name, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return v
}

// optionCase is options a call must refuse, and a part of the error it gives.
type optionCase struct {
	opts []slidingwindow.Option
	want string
}

// unsent answers every command with the error "not sent", counting them in sent.
func unsent(sent *int) slidingwindow.Doer {
	return slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
		*sent++
		return nil, errors.New("not sent")
	})
}

// absent fails t with why when key exists.
func absent(t *testing.T, s *testredis.Server, key, why string) {
	t.Helper()
	if integer(t, s, "EXISTS", key) != 0 {
		t.Fatal(why)
	}
}

// reply runs one command through read (a testredis.Server method), failing t on an error.
func reply[T any](t *testing.T, read func(string, ...any) (T, error), name string, args ...any) T {
	t.Helper()
	v, err := read(name, args...)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return v
}

func integer(t *testing.T, s *testredis.Server, name string, args ...any) int64 {
	t.Helper()
	return reply(t, s.Int64, name, args...)
}

func serverMs(t *testing.T, s *testredis.Server) int64 {
	t.Helper()
	v := reply(t, s.Int64s, "TIME")
	return v[0]*1000 + v[1]/1000
}

// members is the key's members and scores, oldest first.
func members(t *testing.T, s *testredis.Server, key string) ([]string, []int64) {
	t.Helper()
	names, scores, err := s.Scores(key)
	if err != nil {
		t.Fatalf("ZRANGE %s: %v", key, err)
	}
	return names, scores
}

func result(allowed bool, count, remaining, retryMs, resetMs int64, limit int, key string, l slidingwindow.Limit) slidingwindow.Result {
	retry := time.Duration(retryMs) * time.Millisecond
	if retryMs < 0 {
		retry = slidingwindow.Never
	}
	return slidingwindow.Result{
		Allowed: allowed, Count: count, Remaining: remaining,
		RetryAfter: retry, ResetAfter: time.Duration(resetMs) * time.Millisecond,
		Limit: limit, BindingKey: key, BindingLimit: l,
	}
}

// same compares results (they hold a slice: Limits).
func same(a, b slidingwindow.Result) bool { return reflect.DeepEqual(a, b) }

// must(t)(call) is the call's result, or the test fails.
func must(t *testing.T) func(slidingwindow.Result, error) slidingwindow.Result {
	return func(r slidingwindow.Result, err error) slidingwindow.Result {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
}

func TestPathIsDetectedOnce(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		do(t, e.s, "CONFIG", "RESETSTAT")
		k := key()
		for i := int64(0); i < 3; i++ {
			if r := must(t)(e.sw.AllowWith(ctx, k, []slidingwindow.Limit{minute}, at(nowMs+i))); !r.Allowed {
				t.Fatalf("call %d refused: %+v", i, r)
			}
		}
		module, err := e.sw.UsesModule(ctx)
		if err != nil || module != (e.name == "module") {
			t.Fatalf("UsesModule = %v, %v", module, err)
		}
		stats := reply(t, e.s.Text, "INFO", "commandstats")
		if !strings.Contains(stats, "cmdstat_command|info:calls=1,") {
			t.Fatalf("COMMAND INFO not asked exactly once:\n%s", stats)
		}
		if e.name == "module" && (!strings.Contains(stats, "cmdstat_slidingwindow.allow:calls=3,") || strings.Contains(stats, "evalsha")) {
			t.Fatalf("module path:\n%s", stats)
		}
		if e.name == "lua" && (!strings.Contains(stats, "cmdstat_evalsha:calls=3,") || strings.Contains(stats, "slidingwindow.")) {
			t.Fatalf("script path:\n%s", stats)
		}
	})
}

func TestBurstAdmitsExactlyMax(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		var got []slidingwindow.Result
		for i := int64(0); i < 6; i++ {
			got = append(got, must(t)(e.sw.AllowWith(ctx, k, []slidingwindow.Limit{minute}, at(nowMs+i))))
		}
		for i, r := range got {
			if r.Allowed != (i < 5) {
				t.Fatalf("call %d: %+v", i, r)
			}
		}
		want := []slidingwindow.Result{
			result(true, 1, 4, 0, 60_000, 0, k, minute),
			result(true, 5, 0, 59_996, 60_000, 0, k, minute),
			// Refused: the oldest (at nowMs) leaves the window at nowMs + 60 s.
			result(false, 5, 0, 59_995, 59_999, 0, k, minute),
		}
		for i, g := range []slidingwindow.Result{got[0], got[4], got[5]} {
			if !same(g, want[i]) {
				t.Fatalf("got %+v, want %+v", g, want[i])
			}
		}
		// Exactly then the oldest has left (the trim is score <= now - window).
		if r := must(t)(e.sw.AllowWith(ctx, k, []slidingwindow.Limit{minute}, at(nowMs+60_000))); !same(r, result(true, 5, 0, 1, 60_000, 0, k, minute)) {
			t.Fatalf("at the window's end: %+v", r)
		}
		if n := integer(t, e.s, "ZCARD", k); n != 5 {
			t.Fatalf("ZCARD %d", n)
		}
	})
}

func TestPeekChangesNothing(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		three := slidingwindow.Limit{Window: time.Minute, Max: 3}
		must(t)(e.sw.AllowWith(ctx, k, []slidingwindow.Limit{three}, at(nowMs)))
		dump := func() string {
			b := reply(t, e.s.Bytes, "DUMP", k)
			return fmt.Sprint(b, integer(t, e.s, "PEXPIRETIME", k))
		}
		before := dump()
		peeked := must(t)(e.sw.PeekWith(ctx, k, []slidingwindow.Limit{three}, slidingwindow.Cost(2), at(nowMs+10)))
		if dump() != before {
			t.Fatal("PEEK changed the key")
		}
		if want := result(true, 3, 0, 60_000, 60_000, 0, k, three); !same(peeked, want) {
			t.Fatalf("peek %+v, want %+v", peeked, want)
		}
		if r := must(t)(e.sw.AllowWith(ctx, k, []slidingwindow.Limit{three}, slidingwindow.Cost(2), at(nowMs+10))); !same(r, peeked) {
			t.Fatalf("allow %+v after peek %+v", r, peeked)
		}
		missing := key()
		if r := must(t)(e.sw.Peek(ctx, missing, three)); !r.Allowed || r.Count != 1 || integer(t, e.s, "EXISTS", missing) != 0 {
			t.Fatalf("peek of a missing key: %+v", r)
		}
	})
}

func TestCostAndNeverAdmissible(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		l := slidingwindow.Limit{Window: 10 * time.Second, Max: 5}
		ls := []slidingwindow.Limit{l}
		for _, c := range []struct {
			cost, at int64
			want     slidingwindow.Result
		}{
			{3, nowMs, result(true, 3, 2, 10_000, 10_000, 0, k, l)},
			{3, nowMs + 1, result(false, 3, 2, 9_999, 9_999, 0, k, l)},
			{6, nowMs + 1, result(false, 3, 2, -1, 9_999, 0, k, l)},
		} {
			if r := must(t)(e.sw.AllowWith(ctx, k, ls, slidingwindow.Cost(c.cost), at(c.at))); !same(r, c.want) {
				t.Fatalf("cost %d: %+v, want %+v", c.cost, r, c.want)
			}
		}
		r := must(t)(e.sw.AllowN(ctx, k, 6, l))
		if r.RetryAfter != slidingwindow.Never || r.Allowed {
			t.Fatalf("a cost above max: %+v", r)
		}
		// Printed, a Result says what Never is; a wait that ends prints as a Duration.
		d := must(t)(e.sw.AllowWith(ctx, k, ls, slidingwindow.Cost(6), slidingwindow.Detail()))
		want := fmt.Sprintf("{Allowed:false Count:%d Remaining:%d RetryAfter:never ResetAfter:%v Limit:0 BindingKey:%s BindingLimit:5 per 10s Limits:[{Key:%s Limit:5 per 10s Count:%[1]d Remaining:%[2]d RetryAfter:never ResetAfter:%[3]v}] Now:%[6]v}",
			d.Count, d.Remaining, d.ResetAfter, k, k, d.Now)
		if got := fmt.Sprint(d); got != want || fmt.Sprintf("%+v", d) != want {
			t.Fatalf("printed %s\nwant    %s", got, want)
		}
		if got := fmt.Sprint(must(t)(e.sw.AllowWith(ctx, k, ls, slidingwindow.Cost(3), slidingwindow.Detail()))); !strings.Contains(got, "RetryAfter:") || strings.Contains(got, "never") {
			t.Fatalf("a wait that ends printed %s", got)
		}
	})
}

func TestMembersAreULIDsOfNow(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		l := []slidingwindow.Limit{{Window: time.Minute, Max: 10}}
		must(t)(e.sw.AllowWith(ctx, k, l, slidingwindow.Cost(4), at(nowMs)))
		must(t)(e.sw.AllowWith(ctx, k, l, slidingwindow.Cost(2), at(nowMs+7)))
		names, scores := members(t, e.s, k)
		seen := map[string]bool{}
		for i, m := range names {
			if len(m) != 26 || strings.Trim(m, crockford) != "" || m[0] > '7' || seen[m] {
				t.Fatalf("member %q", m)
			}
			seen[m] = true
			ms := int64(0)
			for _, ch := range m[:10] {
				ms = ms*32 + int64(strings.IndexRune(crockford, ch))
			}
			if ms != scores[i] {
				t.Fatalf("member %q encodes %d, scored %d", m, ms, scores[i])
			}
		}
		if len(names) != 6 {
			t.Fatalf("%d members", len(names))
		}
	})
}

func TestTTLIsOneWindowFromTheServerClock(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		one := slidingwindow.Limit{Window: time.Minute, Max: 1}
		before := serverMs(t, e.s)
		must(t)(e.sw.AllowWith(ctx, k, []slidingwindow.Limit{one}, at(nowMs)))
		after := serverMs(t, e.s)
		expiry := integer(t, e.s, "PEXPIRETIME", k)
		if expiry < before+60_000 || expiry > after+60_000 {
			t.Fatalf("expires at %d, not in [%d, %d]", expiry, before+60_000, after+60_000)
		}
		// A refused call leaves the TTL alone.
		if r := must(t)(e.sw.AllowWith(ctx, k, []slidingwindow.Limit{one}, at(nowMs+1))); r.Allowed {
			t.Fatalf("admitted: %+v", r)
		}
		if integer(t, e.s, "PEXPIRETIME", k) != expiry {
			t.Fatal("a refused call moved the TTL")
		}
	})
}

func TestNowIsTheServerClockByDefault(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		before := serverMs(t, e.s)
		if r := must(t)(e.sw.Allow(ctx, k, minute)); !r.Allowed {
			t.Fatalf("refused: %+v", r)
		}
		after := serverMs(t, e.s)
		_, scores := members(t, e.s, k)
		if len(scores) != 1 || scores[0] < before || scores[0] > after {
			t.Fatalf("scored %v, not in [%d, %d]", scores, before, after)
		}
	})
}

func TestServerErrorsKeepTheirText(t *testing.T) {
	cases := []struct {
		args []any
		want string
	}{
		{[]any{"x", 5, 1}, "ERR " + windowErr},
		{[]any{0, 5, 1}, "ERR " + windowErr},
		{[]any{10, 0, 1}, "ERR " + maxErr},
		{[]any{10, 5, "-1"}, "ERR now must be an integer between 0 and 9007199254740992, or *"},
		{[]any{10, 5, 1, "COST", 0}, "ERR cost must be an integer between 1 and 9007199254740992"},
		{[]any{10, 5, 1, "COST"}, "ERR syntax error, option 'COST' needs a value"},
		{[]any{10, 5, 1, "FOO", 1}, "ERR syntax error, unknown option 'FOO'"},
		{[]any{10, 5, 1, "LIMIT", 5, 0}, "ERR LIMIT " + maxErr},
		{[]any{10, 5}, "ERR wrong number of arguments for 'slidingwindow.%s' command"},
	}
	both(t, func(t *testing.T, e env) {
		k := key()
		do(t, e.s, "ZADD", k, nowMs, "m")
		for _, command := range []string{"allow", "peek"} {
			for _, c := range cases {
				_, err := e.sw.Call(ctx, command, k, c.args...)
				want := strings.Replace(c.want, "%s", command, 1)
				if err == nil || err.Error() != want {
					t.Fatalf("%s %v: %v, want %q", command, c.args, err, want)
				}
			}
		}
		// Through the typed API too, and as redigo's own error type.
		_, err := e.sw.Allow(ctx, k, slidingwindow.Limit{Window: time.Minute, Max: 0})
		var re testredis.Error
		if !errors.As(err, &re) || err.Error() != "ERR "+maxErr {
			t.Fatalf("max 0: %#v", err)
		}
		if integer(t, e.s, "ZCARD", k) != 1 {
			t.Fatal("an error changed the key")
		}
		do(t, e.s, "SET", k, "x")
		if _, err := e.sw.Allow(ctx, k, minute); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE Operation against a key") {
			t.Fatalf("wrong type: %v", err)
		}
		if _, err := e.sw.Refund(ctx, k, 1, time.Time{}); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Fatalf("refund, wrong type: %v", err)
		}
	})
}

// Odd argument lists through Call and CallKeys, on one server: the script's path answers what the
// module's does (the reply, or the error's text) and changes the keys as it does. The script
// gets as KEYS what CallKeys splits off as numkeys keys, which is the Go helper's own: numkeys
// of every Go integer type and as digits with leading zeros; no keys for anything else, or for
// too few words, and then the script answers the module's error. (tests/lua_diff/ holds the
// script to the module on random argument lists, split as the helpers split them.)
func TestOddArgumentListsGetTheModulesAnswer(t *testing.T) {
	s := testredis.Shared(t, true)
	rdb := redigo.Pool(s.Pool())
	paths := map[string]*slidingwindow.Limiter{
		"m": slidingwindow.NewLimiter(rdb, slidingwindow.WithPath(slidingwindow.Module)),
		"l": slidingwindow.NewLimiter(rdb, slidingwindow.WithPath(slidingwindow.Lua)),
	}
	limits := []any{"LIMIT", 1, 60, 5, "LIMIT", 2, 60, 5}
	keys := func(n any) []any { return append([]any{n, "K1", "K2", nowMs}, limits...) }
	for i, c := range []struct {
		command string
		args    []any // K1 and K2 name keys of each path's own; for allow, peek and refund, K1 is the key
		admits  bool
	}{
		{"allowall", keys(2), true},
		{"allowall", keys(int32(2)), true},
		{"allowall", keys(int64(2)), true},
		{"allowall", keys(uint(2)), true},
		{"allowall", keys(uint8(2)), true},
		{"allowall", keys("2"), true},
		{"allowall", keys([]byte("2")), true},
		{"peekall", keys("02"), true},
		{"allowall", keys("0002"), true},
		{"allowall", keys(0), false},
		{"allowall", keys("17"), false},
		{"allowall", keys(int64(-1)), false},
		{"allowall", keys(uint64(1<<64 - 1)), false},
		{"allowall", keys("x"), false},
		{"allowall", keys("+2"), false},
		{"allowall", keys(" 2"), false},
		{"allowall", keys(""), false},
		// numkeys 3, two keys and now: too few words to split.
		{"allowall", []any{3, "K1", "K2", nowMs}, false},
		// Keys and now, then nothing: every key lacks a LIMIT.
		{"peekall", []any{2, "K1", "K2", nowMs}, false},
		{"allowall", []any{1}, false},
		{"allowall", nil, false},
		{"allow", []any{"K1", 60, 5, nowMs, []byte{0, 255}}, false},
		{"allow", []any{"K1", 60, 5, nowMs, "cost", 2, "detail"}, true},
		{"refund", []any{"K1", 1, "AT"}, false},
		{"refund", []any{"K1"}, false},
	} {
		answers := map[string]string{}
		for p, sw := range paths {
			base := fmt.Sprintf("go:odd:%s:{%d-%d}", p, i, nowMs)
			args := make([]any, len(c.args))
			for j, a := range c.args {
				if a == "K1" || a == "K2" {
					a = base + ":" + a.(string)
					do(t, s, "ZADD", a, nowMs-1, "a", nowMs-2, "b")
				}
				args[j] = a
			}
			var got any
			var err error
			if c.command == "allowall" || c.command == "peekall" {
				got, err = sw.CallKeys(ctx, c.command, args...)
			} else {
				got, err = sw.Call(ctx, c.command, args[0].(string), args[1:]...)
			}
			answer := fmt.Sprint(got)
			if err != nil {
				answer = "error: " + strings.ReplaceAll(err.Error(), base, "BASE")
			}
			_, k1 := members(t, s, base+":K1")
			_, k2 := members(t, s, base+":K2")
			answers[p] = fmt.Sprintf("%s; K1 %v, K2 %v", answer, k1, k2)
		}
		if answers["l"] != answers["m"] {
			t.Errorf("%s %v: the script answered %s, the module %s", c.command, c.args, answers["l"], answers["m"])
		}
		if admitted := strings.HasPrefix(answers["m"], "[1 "); admitted != c.admits {
			t.Errorf("%s %v: the module answered %s", c.command, c.args, answers["m"])
		}
	}
}

func TestSecondLimitBindsWhenTheFirstHasRoom(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		five := slidingwindow.Limit{Window: time.Minute, Max: 5}
		limits := []slidingwindow.Limit{second3, five}
		var got []slidingwindow.Result
		for i := 0; i < 4; i++ {
			got = append(got, must(t)(e.sw.AllowWith(ctx, k, limits, at(nowMs))))
		}
		for i, want := range map[int]slidingwindow.Result{
			2: result(true, 3, 0, 1_000, 1_000, 0, k, second3),
			3: result(false, 3, 0, 1_000, 1_000, 0, k, second3),
		} {
			if !same(got[i], want) {
				t.Fatalf("call %d: %+v, want %+v", i, got[i], want)
			}
		}
		// A second on, the short window is empty; two more fill the long one.
		for _, want := range []slidingwindow.Result{
			result(true, 4, 1, 0, 60_000, 1, k, five),
			result(true, 5, 0, 59_000, 60_000, 1, k, five),
			result(false, 5, 0, 59_000, 60_000, 1, k, five),
		} {
			if r := must(t)(e.sw.AllowWith(ctx, k, limits, at(nowMs+1_000))); !same(r, want) {
				t.Fatalf("%+v, want %+v", r, want)
			}
		}
	})
}

func TestAllowAllChargesEveryKeyOrNone(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		tenant, alice, bob := k+":tenant", k+":alice", k+":bob"
		perUser := []slidingwindow.Limit{{Window: time.Second, Max: 10}, {Window: time.Minute, Max: 2}}
		tenantLimit := slidingwindow.Limit{Window: time.Minute, Max: 3}
		aliceKeys := []slidingwindow.Keyed{{Key: alice, Limits: perUser}, {Key: tenant, Limits: []slidingwindow.Limit{tenantLimit}}}
		for i := int64(0); i < 2; i++ {
			if r := must(t)(e.sw.AllowAll(ctx, aliceKeys, at(nowMs+i))); !r.Allowed {
				t.Fatalf("refused: %+v", r)
			}
		}
		// Alice's minute is full: she binds, and the tenant is not charged for her refusal.
		if r := must(t)(e.sw.AllowAll(ctx, aliceKeys, at(nowMs+2))); !same(r, result(false, 2, 0, 59_998, 59_999, 1, alice, perUser[1])) {
			t.Fatalf("alice's third: %+v", r)
		}
		if integer(t, e.s, "ZCARD", alice) != 2 || integer(t, e.s, "ZCARD", tenant) != 2 {
			t.Fatal("alice's refusal was charged")
		}
		// Bob takes the tenant's last request; then the tenant binds for Bob.
		bobKeys := []slidingwindow.Keyed{{Key: bob, Limits: perUser}, {Key: tenant, Limits: []slidingwindow.Limit{tenantLimit}}}
		if r := must(t)(e.sw.AllowAll(ctx, bobKeys, at(nowMs+3))); !r.Allowed {
			t.Fatalf("bob refused: %+v", r)
		}
		r := must(t)(e.sw.AllowAll(ctx, bobKeys, at(nowMs+4)))
		if r.Allowed || r.BindingKey != tenant || r.BindingLimit != tenantLimit || r.Limit != 2 || r.RetryAfter != 59_996*time.Millisecond {
			t.Fatalf("the tenant should bind: %+v", r)
		}
		if integer(t, e.s, "ZCARD", bob) != 1 || integer(t, e.s, "ZCARD", tenant) != 3 {
			t.Fatal("bob's refusal was charged")
		}
		// PeekAll answers what AllowAll would, changing nothing.
		if p := must(t)(e.sw.PeekAll(ctx, bobKeys, at(nowMs+4))); !same(p, r) {
			t.Fatalf("peekall %+v, allowall %+v", p, r)
		}
	})
}

func TestAllowAllWrongTypeOnTheThirdKeyChangesNothing(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		keys := []string{k + ":0", k + ":1", k + ":2"}
		l := []slidingwindow.Limit{{Window: time.Minute, Max: 9}}
		must(t)(e.sw.AllowWith(ctx, keys[0], l, at(nowMs-120_000)))
		do(t, e.s, "SET", keys[2], "x")
		before := reply(t, e.s.Bytes, "DUMP", keys[0])
		var keyed []slidingwindow.Keyed
		for _, key := range keys {
			keyed = append(keyed, slidingwindow.Keyed{Key: key, Limits: l})
		}
		if _, err := e.sw.AllowAll(ctx, keyed, at(nowMs)); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
			t.Fatalf("%v", err)
		}
		// Not even the trim of the first key's expired member.
		after := reply(t, e.s.Bytes, "DUMP", keys[0])
		if string(after) != string(before) || integer(t, e.s, "EXISTS", keys[1]) != 0 {
			t.Fatal("a refused ALLOWALL changed a key")
		}
	})
}

func TestRefundTakesBackTheNewest(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		l := []slidingwindow.Limit{{Window: time.Minute, Max: 10}}
		for i := int64(0); i < 4; i++ {
			must(t)(e.sw.AllowWith(ctx, k, l, at(nowMs+i*10)))
		}
		refund := func(n int64, atMs int64, want int64) {
			t.Helper()
			when := time.Time{}
			if atMs != 0 {
				when = time.UnixMilli(atMs)
			}
			got, err := e.sw.Refund(ctx, k, n, when)
			if err != nil || got != want {
				t.Fatalf("refund %d at %d: %d, %v; want %d", n, atMs, got, err, want)
			}
		}
		scores := func(want ...int64) {
			t.Helper()
			_, got := members(t, e.s, k)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("scores %v, want %v", got, want)
			}
		}
		refund(1, 0, 1)
		scores(nowMs, nowMs+10, nowMs+20)
		// With a time: only members logged at or before it, the newest of those first.
		must(t)(e.sw.AllowWith(ctx, k, l, at(nowMs+30)))
		expiry := integer(t, e.s, "PEXPIRETIME", k)
		refund(1, nowMs+15, 1)
		scores(nowMs, nowMs+20, nowMs+30)
		refund(5, nowMs-1, 0)
		// A refund neither trims nor touches the TTL.
		if integer(t, e.s, "PEXPIRETIME", k) != expiry {
			t.Fatal("a refund moved the TTL")
		}
		// More than are left: all of them, and the key is gone.
		refund(100, 0, 3)
		if integer(t, e.s, "EXISTS", k) != 0 {
			t.Fatal("an emptied key exists")
		}
		refund(1, 0, 0)
	})
}

func TestRefundAfterAllowAllRestoresEveryKey(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		k := key()
		user, tenant := k+":user", k+":tenant"
		keyed := []slidingwindow.Keyed{
			{Key: user, Limits: []slidingwindow.Limit{slidingwindow.PerSecond(10), slidingwindow.PerMinute(100)}},
			{Key: tenant, Limits: []slidingwindow.Limit{slidingwindow.PerMinute(1000)}},
		}
		must(t)(e.sw.AllowAll(ctx, keyed, at(nowMs)))
		want := must(t)(e.sw.PeekAll(ctx, keyed, at(nowMs+1)))
		if r := must(t)(e.sw.AllowAll(ctx, keyed, slidingwindow.Cost(3), at(nowMs+1))); !r.Allowed {
			t.Fatalf("refused: %+v", r)
		}
		for _, key := range []string{user, tenant} {
			if n, err := e.sw.Refund(ctx, key, 3, time.UnixMilli(nowMs+1)); n != 3 || err != nil {
				t.Fatalf("refund %s: %d, %v", key, n, err)
			}
		}
		if got := must(t)(e.sw.PeekAll(ctx, keyed, at(nowMs+1))); !same(got, want) {
			t.Fatalf("after the refunds %+v, before the charge %+v", got, want)
		}
	})
}

// Arguments the commands cannot take are refused before anything is sent.
func TestBadArgumentsSendNothing(t *testing.T) {
	sent := 0
	sw := slidingwindow.NewLimiter(unsent(&sent), slidingwindow.WithPath(slidingwindow.Module))
	for _, w := range []time.Duration{0, 500 * time.Millisecond, 1500 * time.Millisecond, -time.Second} {
		_, err := sw.Allow(ctx, "k", slidingwindow.Limit{Window: w, Max: 1})
		if !errors.Is(err, slidingwindow.ErrWindow) || !strings.Contains(err.Error(), w.String()) {
			t.Fatalf("window %v: %v", w, err)
		}
		_, err = sw.AllowAll(ctx, []slidingwindow.Keyed{{Key: "k", Limits: []slidingwindow.Limit{minute, {Window: w, Max: 1}}}})
		if !errors.Is(err, slidingwindow.ErrWindow) {
			t.Fatalf("AllowAll, window %v: %v", w, err)
		}
	}
	if _, err := sw.Allow(ctx, "k"); !errors.Is(err, slidingwindow.ErrNoLimits) {
		t.Fatalf("no limit: %v", err)
	}
	if _, err := sw.AllowAll(ctx, nil); !errors.Is(err, slidingwindow.ErrNoKeys) {
		t.Fatalf("no key: %v", err)
	}
	if _, err := sw.PeekAll(ctx, []slidingwindow.Keyed{{Key: "k"}}); !errors.Is(err, slidingwindow.ErrNoLimits) {
		t.Fatalf("a key without limits: %v", err)
	}
	if sent != 0 {
		t.Fatalf("%d commands sent", sent)
	}
	if _, err := sw.Allow(ctx, "k", slidingwindow.PerDay(1)); err == nil || err.Error() != "not sent" {
		t.Fatalf("a day is whole seconds: %v", err)
	}
}

// The module gone from under a running Limiter (another server now answers at its address):
// Auto moves to the script, a forced Module does not.
func TestModuleGoneMovesToTheScript(t *testing.T) {
	withModule, plain := testredis.Shared(t, true), testredis.Shared(t, false)
	var target atomic.Pointer[testredis.Server]
	target.Store(withModule)
	rdb := slidingwindow.DoFunc(func(ctx context.Context, args ...any) (any, error) {
		return redigo.Pool(target.Load().Pool()).Do(ctx, args...)
	})
	auto := slidingwindow.NewLimiter(rdb)
	forced := slidingwindow.NewLimiter(rdb, slidingwindow.WithPath(slidingwindow.Module))
	k := key()
	three := slidingwindow.Limit{Window: time.Minute, Max: 3}
	must(t)(auto.AllowWith(ctx, k, []slidingwindow.Limit{three}, at(nowMs)))
	if m, _ := auto.UsesModule(ctx); !m {
		t.Fatal("the module is loaded")
	}
	// The key moves along, as a replica promoted in its place would have it.
	dump := reply(t, withModule.Bytes, "DUMP", k)
	do(t, plain, "RESTORE", k, 0, dump)
	target.Store(plain)
	if r := must(t)(auto.AllowWith(ctx, k, []slidingwindow.Limit{three}, at(nowMs+2))); !same(r, result(true, 2, 1, 0, 60_000, 0, k, three)) {
		t.Fatalf("on the script: %+v", r)
	}
	if m, _ := auto.UsesModule(ctx); m {
		t.Fatal("still on the module")
	}
	if _, err := forced.Allow(ctx, k, three); err == nil || !strings.HasPrefix(err.Error(), "ERR unknown command") {
		t.Fatalf("forced module: %v", err)
	}
}

// A server that lost its scripts (restart, SCRIPT FLUSH) gets the script again with EVAL.
func TestNoScriptFallsBackToEval(t *testing.T) {
	s := testredis.Shared(t, false)
	sw := slidingwindow.NewLimiter(redigo.Pool(s.Pool()), slidingwindow.WithPath(slidingwindow.Lua))
	k := key()
	do(t, s, "SCRIPT", "FLUSH")
	do(t, s, "CONFIG", "RESETSTAT")
	for i := int64(0); i < 3; i++ {
		must(t)(sw.AllowWith(ctx, k, []slidingwindow.Limit{minute}, at(nowMs+i)))
	}
	stats := reply(t, s.Text, "INFO", "commandstats")
	if !strings.Contains(stats, "cmdstat_eval:calls=1,") || !strings.Contains(stats, "cmdstat_evalsha:calls=3,") {
		t.Fatalf("want one EVAL after the first EVALSHA:\n%s", stats)
	}
	if integer(t, s, "ZCARD", k) != 3 {
		t.Fatal("not every call was logged")
	}
}
