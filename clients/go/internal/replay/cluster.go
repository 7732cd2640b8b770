package replay

import (
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
	"github.com/slidingwindow/slidingwindow/clients/go/internal/testredis"
)

const nowMs = int64(1_700_000_000_000)

func at(ms int64) slidingwindow.Option { return slidingwindow.Now(time.UnixMilli(ms)) }

var movedCount = regexp.MustCompile(`errorstat_MOVED:count=(\d+)`)

// moved is the MOVED replies the nodes have sent since their stats were reset.
func moved(t *testing.T, c *testredis.Cluster) int {
	n := 0
	for _, node := range c.Nodes {
		info, err := node.Text("INFO", "errorstats")
		if err != nil {
			t.Fatal(err)
		}
		if m := movedCount.FindStringSubmatch(info); m != nil {
			v, _ := strconv.Atoi(m[1])
			n += v
		}
	}
	return n
}

// Cluster is both paths on a three-master cluster through the Doer cluster makes: every call
// reaches its key's slot directly, Top asks every master, AllowAll works on keys of one hash
// tag, and keys of different slots are refused by the server with CROSSSLOT.
func Cluster(t *testing.T, cluster func(t *testing.T, c *testredis.Cluster) slidingwindow.Doer) {
	for _, path := range []string{"module", "lua"} {
		t.Run(path, func(t *testing.T) {
			c, err := testredis.StartCluster(path == "module")
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			sw := slidingwindow.NewLimiter(cluster(t, c))
			if m, err := sw.UsesModule(ctx); err != nil || m != (path == "module") {
				t.Fatalf("UsesModule = %v, %v", m, err)
			}

			t.Run("every call reaches its slot", func(t *testing.T) {
				for _, n := range c.Nodes {
					if _, err := n.Do("CONFIG", "RESETSTAT"); err != nil {
						t.Fatal(err)
					}
				}
				two := []slidingwindow.Limit{slidingwindow.PerMinute(2)}
				for i := 0; i < 12; i++ {
					key := fmt.Sprintf("rl:{user:%d}", i)
					for j := int64(0); j < 3; j++ {
						r, err := sw.AllowWith(ctx, key, two, at(nowMs+j))
						if err != nil || r.Allowed != (j < 2) {
							t.Fatalf("%s call %d: %+v, %v", key, j, r, err)
						}
					}
					if n, err := sw.Refund(ctx, key, 1, time.UnixMilli(nowMs+1)); n != 1 || err != nil {
						t.Fatalf("refund %s: %d, %v", key, n, err)
					}
					if r, err := sw.PeekWith(ctx, key, two, at(nowMs+2)); err != nil || !r.Allowed {
						t.Fatalf("peek %s: %+v, %v", key, r, err)
					}
					tag := strings.TrimPrefix(key, "rl:")
					keyed := []slidingwindow.Keyed{{Key: tag + ":a", Limits: two}, {Key: tag, Limits: []slidingwindow.Limit{slidingwindow.PerMinute(5)}}}
					if r, err := sw.AllowAll(ctx, keyed, at(nowMs)); err != nil || !r.Allowed {
						t.Fatalf("allowall %s: %+v, %v", tag, r, err)
					}
				}
				if n := moved(t, c); n != 0 {
					t.Fatalf("%d MOVED replies", n)
				}
				holding := 0
				for _, n := range c.Nodes {
					if size, _ := n.Int64("DBSIZE"); size > 0 {
						holding++
					}
				}
				if holding < 2 {
					t.Fatalf("the keys are on %d node(s)", holding)
				}
			})

			t.Run("Top asks every master", func(t *testing.T) {
				if path == "lua" {
					if _, err := sw.Top(ctx, 10); !errors.Is(err, slidingwindow.ErrNeedsModule) {
						t.Fatalf("Top on the script path: %v", err)
					}
					return
				}
				for _, n := range c.Nodes {
					if _, err := n.Do("SLIDINGWINDOW.TOPRESET"); err != nil {
						t.Fatal(err)
					}
				}
				one := []slidingwindow.Limit{slidingwindow.PerMinute(1)}
				var want []slidingwindow.TopEntry
				for i := 0; i < 12; i++ {
					key := fmt.Sprintf("top:{user:%d}", i)
					for j := 0; j <= i+1; j++ {
						if r, err := sw.AllowWith(ctx, key, one, at(nowMs)); err != nil || r.Allowed != (j == 0) {
							t.Fatalf("%s call %d: %+v, %v", key, j, r, err)
						}
					}
					want = append([]slidingwindow.TopEntry{{Key: key, Refused: int64(i + 1)}}, want...)
				}
				listing := 0
				for _, n := range c.Nodes {
					entries, _ := n.Do("SLIDINGWINDOW.TOP")
					if list, _ := entries.([]any); len(list) > 0 {
						listing++
					}
				}
				if listing < 2 {
					t.Fatalf("the refused keys are on %d node(s)", listing)
				}
				if got, err := sw.Top(ctx, 12); err != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("Top: %+v, %v; want %+v", got, err, want)
				}
			})

			t.Run("AllowAll with one hash tag", func(t *testing.T) {
				user, tenant := "{tenant7}:user:42", "{tenant7}"
				perUser := []slidingwindow.Limit{slidingwindow.PerSecond(10), slidingwindow.PerMinute(2)}
				keyed := []slidingwindow.Keyed{{Key: user, Limits: perUser}, {Key: tenant, Limits: []slidingwindow.Limit{slidingwindow.PerMinute(3)}}}
				for i := int64(0); i < 2; i++ {
					if r, err := sw.AllowAll(ctx, keyed, at(nowMs+i)); err != nil || !r.Allowed {
						t.Fatalf("call %d: %+v, %v", i, r, err)
					}
				}
				r, err := sw.AllowAll(ctx, keyed, at(nowMs+2))
				want := slidingwindow.Result{Count: 2, RetryAfter: 59_998 * time.Millisecond, ResetAfter: 59_999 * time.Millisecond,
					Limit: 1, BindingKey: user, BindingLimit: perUser[1]}
				if err != nil || !reflect.DeepEqual(r, want) {
					t.Fatalf("%+v, %v; want %+v", r, err, want)
				}
				if n, err := sw.Refund(ctx, tenant, 1, time.UnixMilli(nowMs+1)); n != 1 || err != nil {
					t.Fatalf("refund: %d, %v", n, err)
				}
				// Two logged, and this request: one left.
				if r, err := sw.PeekAll(ctx, keyed[1:], at(nowMs+2)); err != nil || r.Remaining != 1 {
					t.Fatalf("the tenant after the refund: %+v, %v", r, err)
				}
			})

			t.Run("keys of different slots", func(t *testing.T) {
				one := []slidingwindow.Limit{slidingwindow.PerMinute(3)}
				_, err := sw.AllowAll(ctx, []slidingwindow.Keyed{{Key: "{a}:user", Limits: one}, {Key: "{b}", Limits: one}}, at(nowMs))
				if err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
					t.Fatalf("want CROSSSLOT, got %v", err)
				}
				// The node of a key answers for it, the others MOVED: no node holds either.
				for _, n := range c.Nodes {
					for _, k := range []string{"{a}:user", "{b}"} {
						if found, err := n.Int64("EXISTS", k); (err != nil && !strings.HasPrefix(err.Error(), "MOVED")) || found != 0 {
							t.Fatalf("%s exists on %s: %d, %v", k, n.Addr(), found, err)
						}
					}
				}
			})
		})
	}
}
