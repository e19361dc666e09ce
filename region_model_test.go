package tollgate

// The share model (internal/regions: shares.go) on two live regions'
// middlewares: the shares their clients' requests move.

import (
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
)

// A client split 70/30 of the limit over two regions, the first asking
// more than the limit, the second less than its static share: the first
// gets what the second leaves, shares near 70/30. When the second asks
// more than its static share too, each holds its static share, whatever
// the first asks. The shares add up to at most 1.
func TestRegionSplit7030(t *testing.T) {
	class := uniqueName("region")
	a, b, ra, rb := regionPair(t, class, func(c *config.Config) { c.Average, c.Burst = 20, 20 })
	bucket := bucket.HashKey(class + "\x00h:" + "split")
	// split drives both for d and returns each region's share, averaged
	// over the last second's samples (b asks a token or two an interval:
	// its demand, and so both shares, move from one to the next).
	split := func(gapB, d time.Duration) (sa, sb int64) {
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); drive(a, "split", 35*time.Millisecond, d) }()
		go func() { defer wg.Done(); drive(b, "split", gapB, d) }()
		time.Sleep(d - time.Second)
		for i := 0; i < 10; i++ {
			ia, ib := shareIn(t, ra, bucket), shareIn(t, rb, bucket)
			if ia+ib > ppm {
				t.Errorf("shares a=%d b=%d add up to more than the limit", ia, ib)
			}
			sa, sb = sa+ia, sb+ib
			time.Sleep(100 * time.Millisecond)
		}
		wg.Wait()
		return sa / 10, sb / 10
	}
	// 28/s and 6/s against 20/s: b needs 0.3 of the limit.
	sa, sb := split(167*time.Millisecond, 4*time.Second)
	t.Logf("28/s and 6/s: shares a=%d b=%d", sa, sb)
	if sa < 600000 || sa > 760000 || sb < 240000 || sb > 400000 || sa+sb > ppm {
		t.Errorf("28/s and 6/s: shares a=%d b=%d, want near 700000 and 300000, at most 1 together", sa, sb)
	}
	// 28/s and 12/s: b's refusals come from Redis, seldom from its deny
	// cache (a wait of 100 ms, a request every 83 ms).
	sa, sb = split(83*time.Millisecond, 3*time.Second)
	t.Logf("28/s and 12/s: shares a=%d b=%d", sa, sb)
	if sa < 450000 || sa > 550000 || sb < 450000 || sb > 550000 {
		t.Errorf("28/s and 12/s: shares a=%d b=%d, want both near static (500000): each asks more than its static share", sa, sb)
	}
}
