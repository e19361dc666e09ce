package regions

// The share model (shares.go): targets, guarantees and bounds, step by
// step.

import (
	"testing"
	"time"
)

func TestNextShare(t *testing.T) {
	two := NewSettings("a", 5*time.Second, 1, []string{"b"}, []int64{1}, "two")
	three := NewSettings("a", 5*time.Second, 1, []string{"b", "c"}, []int64{1, 1}, "three")
	// rate 0: unknown, any demand needs its region's static share.
	at := func(rate float64, k keyShares) keyShares {
		k.rate, k.ownRate = rate, rate > 0
		return k
	}
	for _, tc := range []struct {
		desc   string
		rs     *Settings
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

// Static shares are the weights' parts of the limit, floors a tenth of
// them; a region's rank by name staggers its exchange in the interval.
func TestNewSettings(t *testing.T) {
	rs := NewSettings("eu", time.Second, 3, []string{"us", "ap"}, []int64{1, 1}, "k")
	if rs.Static != 600000 || rs.Floor != 60000 || rs.Peers[0].Static != 200000 || rs.Peers[1].Floor != 20000 {
		t.Errorf("weights 3:1:1: static %d floor %d, peers %+v", rs.Static, rs.Floor, rs.Peers)
	}
	if rs.Order != 1 || rs.Regions != 3 || rs.Key != "k" || rs.Interval != time.Second {
		t.Errorf("order %d of %d (want 1 of 3: ap, eu, us), key %q, interval %s", rs.Order, rs.Regions, rs.Key, rs.Interval)
	}
}
