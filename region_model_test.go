package tollgate

// The share model (shares.go): targets, guarantees and bounds, step by
// step and on two live regions.

import (
	"sync"
	"testing"
	"time"
)

func TestNextShare(t *testing.T) {
	two, err := compileRegion(&RegionConfig{Name: "a", Peers: []PeerConfig{{Name: "b", Endpoints: []string{"127.0.0.1:2"}}}}, redisSettings{addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	three, err := compileRegion(&RegionConfig{Name: "a", Peers: []PeerConfig{{Name: "b", Endpoints: []string{"127.0.0.1:2"}}, {Name: "c", Endpoints: []string{"127.0.0.1:3"}}}}, redisSettings{addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	// rate 0: unknown, any demand needs its region's static share.
	at := func(rate float64, k keyShares) keyShares {
		k.rate, k.ownRate = rate, rate > 0
		return k
	}
	for _, tc := range []struct {
		desc   string
		rs     *regionSettings
		k      keyShares
		silent int
		want   int64
	}{
		{"all here, peer still static: room is what the peer gave up", two, keyShares{demand: 10, peerD: []float64{0}, peerPub: []int64{0}}, 0, 500000},
		{"all here, peer at its floor", two, keyShares{demand: 10, share: 500000, peerD: []float64{0}, peerPub: []int64{50000}}, 0, 950000},
		{"none here: the floor at once", two, keyShares{demand: 0, share: 950000, peerD: []float64{10}, peerPub: []int64{50000}}, 0, 50000},
		{"70/30 of the limit", two, at(10, keyShares{demand: 7, share: 500000, peerD: []float64{3}, peerPub: []int64{300000}}), 0, 700000},
		{"70/30 of half the limit: the spare by need", two, at(20, keyShares{demand: 7, share: 500000, peerD: []float64{3}, peerPub: []int64{300000}}), 0, 700000},
		{"70/30 of twice the limit: both ask their static share", two, at(20, keyShares{demand: 28, share: 500000, peerD: []float64{12}, peerPub: []int64{500000}}), 0, 500000},
		{"idle everywhere: static", two, keyShares{demand: 0, share: 500000, peerD: []float64{0}, peerPub: []int64{0}}, 0, 500000},
		{"a peer unheard: no growth", two, keyShares{demand: 10, share: 600000, peerD: []float64{0}, peerPub: []int64{50000}}, healthySteps + 1, 600000},
		{"a peer unheard: shrinks still", two, keyShares{demand: 0, share: 600000, peerD: []float64{10}, peerPub: []int64{50000}}, healthySteps + 1, 50000},
		{"past hold: above static falls to static", two, keyShares{demand: 10, share: 950000, peerD: []float64{0}, peerPub: []int64{50000}}, holdSteps + 1, 500000},
		{"past hold: below static is kept", two, keyShares{demand: 0, share: 50000, peerD: []float64{10}, peerPub: []int64{950000}}, holdSteps + 1, 50000},
		{"past static: static", two, keyShares{demand: 0, share: 50000, peerD: []float64{10}, peerPub: []int64{950000}}, staticSteps + 1, 500000},
		{"three regions, all here", three, keyShares{demand: 10, share: 333333, peerD: []float64{0, 0}, peerPub: []int64{33333, 33333}}, 0, 933334},
		{"over-committed peers, nothing acknowledged: no growth past the room", two, keyShares{demand: 10, share: 50000, peerD: []float64{10}, peerPub: []int64{990000}}, 0, 50000},
		{"a peer that asks its guarantee claims it before it holds it", two, at(50, keyShares{demand: 40, share: 500000, peerD: []float64{25}, peerPub: []int64{50000}}), 0, 500000},
		// A peer whose report claims the whole key and a demand without
		// end takes only what this region's own demand leaves.
		{"a peer claims all, this region asks its static share: static kept", two, at(50, keyShares{demand: 25, peerD: []float64{1e9}, peerPub: []int64{ppm}}), 0, 500000},
		{"a peer claims all, this region asks a fifth of the limit: a fifth kept", two, at(50, keyShares{demand: 10, share: 500000, peerD: []float64{1e9}, peerPub: []int64{ppm}}), 0, 200000},
		{"a peer claims all, a rate only peers gave: static kept", two, keyShares{demand: 10, share: 500000, rate: 1e9, peerD: []float64{1e9}, peerPub: []int64{ppm}}, 0, 500000},
		{"a peer claims all, this region's demand back: up to what the peer acknowledged", two, at(50, keyShares{demand: 25, share: 50000, reserved: 500000, peerD: []float64{1e9}, peerPub: []int64{ppm}}), 0, 500000},
		{"a peer claims all, this region's demand back, not yet acknowledged: what was", two, at(50, keyShares{demand: 25, share: 50000, reserved: 200000, peerD: []float64{1e9}, peerPub: []int64{ppm}}), 0, 200000},
		{"three regions, one claims all: this region's guarantee kept", three, at(30, keyShares{demand: 10, share: 333333, peerD: []float64{1e9, 10}, peerPub: []int64{ppm, 333333}}), 0, 333333},
	} {
		k := tc.k
		if got := nextShare(tc.rs, &k, tc.silent); got != tc.want {
			t.Errorf("%s: %d, want %d", tc.desc, got, tc.want)
		}
	}
}

// A client split 70/30 of the limit over two regions, the first asking
// more than the limit, the second less than its static share: the first
// gets what the second leaves, shares near 70/30. When the second asks
// more than its static share too, each holds its static share, whatever
// the first asks. The shares add up to at most 1.
func TestRegionSplit7030(t *testing.T) {
	class := uniqueName("region")
	a, b, ra, rb := regionPair(t, class, func(c *Config) { c.Average, c.Burst = 20, 20 })
	bucket := hashKey(class + "\x00h:" + "split")
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
