package regions

// The exchange's peers (peers.go): a peer lost, one way or both; a peer
// that never answers.

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// watchLinkLoss makes a key hot in region a of a pair whose links go
// through links, then cuts b's link to a (and a's to b when both), and
// returns how long after the cut a's and b's shares were static, sampling
// every 20 ms while a keeps pressing; the shares may never add up past 1.
func watchLinkLoss(t *testing.T, both bool) (aStatic, bStatic time.Duration) {
	t.Helper()
	ra, rb := redistest.Start(t), redistest.Start(t)
	ab, ba := newLink(t, rb), newLink(t, ra)
	a, _ := runningPair(t, ra, rb, ab.Addr(), ba.Addr())
	const bucket = "tg{link-loss}"
	p := newPresser(a, ra, 50)
	p.drive(bucket, 5*time.Millisecond, 2*time.Second)
	if sa, sb := shareIn(t, ra, bucket), shareIn(t, rb, bucket); sa != 950000 || sb != 50000 {
		t.Fatalf("before the cut: shares a=%d b=%d", sa, sb)
	}
	cut := time.Now()
	ba.Cut()
	if both {
		ab.Cut()
	}
	for time.Since(cut) < 3*time.Second && (aStatic == 0 || bStatic == 0) {
		p.drive(bucket, 0, 10*time.Millisecond) // a keeps pressing
		sa, sb := shareIn(t, ra, bucket), shareIn(t, rb, bucket)
		if sa == 0 {
			sa = 500000
		}
		if sb == 0 {
			sb = 500000
		}
		if sa+sb > ppm {
			t.Fatalf("%s after the cut: shares a=%d b=%d add up to more than the limit", time.Since(cut), sa, sb)
		}
		if aStatic == 0 && sa <= 500000 {
			aStatic = time.Since(cut)
		}
		if bStatic == 0 && sb == 500000 {
			bStatic = time.Since(cut)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return aStatic, bStatic
}

// A region that loses its peer keeps its shares for hold, then falls back
// to static: the share above static first (within holdSteps+2 intervals),
// the one below static only after it (staticSteps+1, and no sooner than
// the other side's above-static share fell). Sampled every 20 ms, the two
// shares never add up to more than the limit.
func TestRegionLinkCutFallsBackToStatic(t *testing.T) {
	aStatic, bStatic := watchLinkLoss(t, true)
	t.Logf("after the cut: a's share static after %s, b's after %s (interval 200ms)", aStatic, bStatic)
	// The protocol's bounds from the cut are holdSteps+2 and staticSteps+2
	// intervals; one more for a 200 ms interval on a busy machine (the e2e
	// suite checks the exact bounds at 1 s).
	if aStatic == 0 || aStatic > (holdSteps+3)*testIV {
		t.Errorf("a's share back to static after %s, want within %d intervals", aStatic, holdSteps+3)
	}
	if bStatic == 0 || bStatic > (staticSteps+3)*testIV || bStatic < aStatic {
		t.Errorf("b's share back to static after %s (a's after %s), want after a's and within %d intervals", bStatic, aStatic, staticSteps+3)
	}
}

// A peer that cannot read us any more while we still read it: its reports
// keep acknowledging our last report it read, which held our growth up to
// ackSteps intervals too long; it now acknowledges only what it read in
// the same exchange. Sampled every 20 ms, the shares never add up past 1,
// and ours falls to static before the peer's grows back.
func TestRegionOneWayLoss(t *testing.T) {
	aStatic, bStatic := watchLinkLoss(t, false) // b can no longer read a; a still reads b
	t.Logf("one way lost: a static after %s, b after %s", aStatic, bStatic)
	if aStatic == 0 || bStatic == 0 || bStatic < aStatic {
		t.Errorf("one way lost: a static after %s, b after %s; want both, a first", aStatic, bStatic)
	}
}

// A peer that never answers, with an interval (200 ms) shorter than its
// read's budget (its timeout, 1 s): at most one read of it is in flight;
// an exchange that finds one outstanding counts the peer unread rather
// than starting another. (Each exchange started one, queued behind the
// last on the peer's connection: the goroutines piled up, 4 a second.)
func TestRegionSilentPeerOneReadInFlight(t *testing.T) {
	peer := silentPeer(t, true)
	x := exchangerOn(twoRegions("a", "b", testIV), ownClient(redistest.Start(t)), peerClient(peer, time.Second))
	run(t, x)
	time.Sleep(time.Second) // the loop runs, its first read is out
	before := runtime.NumGoroutine()
	time.Sleep(3 * time.Second) // 15 intervals
	after := runtime.NumGoroutine()
	t.Logf("goroutines %d, then %d after 15 intervals", before, after)
	if after-before > 3 {
		t.Errorf("a silent peer: %d goroutines, %d after 15 more intervals of 200 ms (a read of 1 s each): the reads pile up", before, after)
	}
	if n := atomic.LoadInt64(&x.exchangesOK); n < 5 {
		t.Errorf("%d exchanges in 4 s of a 200 ms interval with a peer that never answers, want at least 5", n)
	}
}
