package slidingwindow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	slidingwindow "github.com/slidingwindow/slidingwindow/clients/go"
)

// SlidingWindowAllow is the seed's own caller (seeds/000_d98e3b7d69425237.txt, section 3) on this
// package: the same key and the same count, without the script, the member or the caller's
// clock. It also says whether the request was admitted, which the seed's count alone cannot: a
// refusal and the admission that filled the window both return maxRequests.
func SlidingWindowAllow(ctx context.Context, sw *slidingwindow.Limiter, id string, windowSec int, maxRequests int) (bool, int, error) {
	key := fmt.Sprintf("rate:sliding:%s", id)
	r, err := sw.Allow(ctx, key, slidingwindow.Limit{Window: time.Duration(windowSec) * time.Second, Max: int64(maxRequests)})
	if err != nil {
		return false, 0, err
	}
	return r.Allowed, int(r.Count), nil
}

func TestSeedPort(t *testing.T) {
	both(t, func(t *testing.T, e env) {
		id := key()
		for i := 1; i <= 4; i++ {
			allowed, count, err := SlidingWindowAllow(ctx, e.sw, id, 60, 3)
			// The seed's script answers count+1 when it admits, count when it refuses.
			if err != nil || allowed != (i <= 3) || count != map[bool]int{true: i, false: 3}[i <= 3] {
				t.Fatalf("call %d: %v %d %v", i, allowed, count, err)
			}
		}
		if n := integer(t, e.s, "ZCARD", "rate:sliding:"+id); n != 3 {
			t.Fatalf("%d logged", n)
		}
	})
}
