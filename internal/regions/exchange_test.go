package regions

// The exchange's loop and its leader (exchange.go): the lease, the clock
// it is scheduled on, the notes it reads.

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// Two exchangers of one region on one Redis (in one process: its Redis
// written two ways) contend for the lease like two pods: one leads, the
// lease taken, then renewed. (With the process's identity as the holder,
// both held it for good.)
func TestRegionTwoExchangersOneLease(t *testing.T) {
	own, peer := redistest.Start(t), redistest.Start(t)
	rs := twoRegions("a", "b", time.Hour)
	x := exchangerOn(rs, ownClient(own), peerClient(peer, time.Second))
	y := exchangerOn(rs, ownClient(own), peerClient(peer, time.Second))
	for round := 0; round < 2; round++ { // taken, then renewed
		lx, ly := x.lead(rs), y.lead(rs)
		if lx == ly {
			t.Errorf("round %d: first exchanger leads %v, second %v; want exactly one", round, lx, ly)
		}
	}
}

// The exchange's schedule reads the wall clock: a clock stepped back an
// hour or forward a day neither stalls the loop nor breaks the shares.
func TestRegionClockSteps(t *testing.T) {
	start := time.Now()
	sleepUntil(time.Now().Add(time.Hour).UnixNano(), int64(50*time.Millisecond))
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Errorf("sleepUntil an hour ahead slept %s, want at most two intervals", d)
	}
	ra, rb := redistest.Start(t), redistest.Start(t)
	a, _ := runningPair(t, ra, rb, rb, ra)
	const bucket = "tg{clock-steps}"
	newPresser(a, ra, 50).drive(bucket, 5*time.Millisecond, 2*time.Second)
	if sa := shareIn(t, ra, bucket); sa <= 500000 {
		t.Fatalf("before the steps: a's share %d, want above static", sa)
	}
	rs := a.Settings()
	// A second leader on the same Redis, its clock stepped: an hour back,
	// then a day ahead.
	x := exchangerOn(rs, a.Own(), a.peers...)
	slot := time.Now().UnixNano() / int64(rs.Interval)
	for _, s := range []int64{slot - int64(time.Hour/rs.Interval), slot + int64(24*time.Hour/rs.Interval), slot} {
		x.exchange(rs, s, clock.Mono())
		sa, sb := shareIn(t, ra, bucket), shareIn(t, rb, bucket)
		if sa == 0 {
			sa = 500000
		}
		if sb == 0 {
			sb = 500000
		}
		if sa+sb > ppm || sa < 50000 || sb < 50000 {
			t.Errorf("slot %+d: shares a=%d b=%d", s-slot, sa, sb)
		}
	}
}

// A leader whose wall clock steps back (an NTP step) computes slots below
// the ones it recorded a peer as heard and acknowledging at: were silence
// counted in slots, slot - heard would be negative, and a peer that then
// goes silent never counted silent until the clock caught up (an hour
// here): the region would keep a share above static while the peer,
// losing it, lets its own share below static grow back to static after
// staticSteps, the sum past 1 for as long as the step.
func TestRegionClockStepBackHidesPeerSilence(t *testing.T) {
	ra, rb := redistest.Start(t), redistest.Start(t)
	l := newLink(t, rb)
	rs := twoRegions("a", "b", testIV)
	x := exchangerOn(rs, ownClient(ra), peerClient(l.Addr(), 100*time.Millisecond))
	const bucket = "tg{step-back}"
	peerReport := func(seq int64) {
		body := "tollgate-region 1 b " + strconv.FormatInt(seq, 10) + "\nack a " + strconv.FormatInt(seq, 10) + "\nk " + bucket + " 0 50000 0\n"
		redistest.Do(t, rb, "SET", reportKeyOf("b"), body)
	}
	hot := func() { redistest.Do(t, ra, "HINCRBY", hotKey("a"), bucket, "100") }
	s := time.Now().UnixNano()/int64(rs.Interval) + 1
	iv, now := int64(rs.Interval), clock.Mono()
	peerReport(s - 1)
	hot()
	x.exchange(rs, s, now)
	peerReport(s)
	hot()
	x.exchange(rs, s+1, now+iv)
	if got := shareIn(t, ra, bucket); got != 950000 {
		t.Fatalf("before the cut: a's share %d, want 950000", got)
	}
	l.Cut()
	back := s + 1 - int64(time.Hour/rs.Interval) // the clock stepped back an hour
	for k := int64(1); k <= staticSteps+2; k++ {
		hot()
		x.exchange(rs, back+k, now+(1+k)*iv)
	}
	if got := shareIn(t, ra, bucket); got > rs.Static {
		t.Errorf("peer b unreachable for %d intervals after a clock step back: a's share %d is still above static %d (b's below-static share is static again by now: the sum is %d ppm)",
			staticSteps+2, got, rs.Static, got+rs.Peers[0].Static)
	}
}

// The pods of a region may note more keys in an interval than one reply
// may hold (128 pods at maxNotes each; any fleet with five regions, where
// every request notes): the leader reads a sample of them. (It read the
// hot hash whole, HGETALL, a reply past the client's bound: every
// exchange failed and the region stopped publishing; its peers counted it
// silent, and shares stopped moving everywhere.)
func TestRegionLargeHotHashFailsEveryExchange(t *testing.T) {
	ra, rb := redistest.Start(t), redistest.Start(t)
	rs := twoRegions("a", "b", testIV)
	x := exchangerOn(rs, ownClient(ra), peerClient(rb, time.Second))
	redistest.Do(t, ra, "EVAL", `for i = 1, 33000 do redis.call('HINCRBY', KEYS[1], 'tg{'..string.format('%010d', i)..'}', 0) end return 1`, "1", hotKey("a"))
	if !x.exchange(rs, time.Now().UnixNano()/int64(rs.Interval)+1, clock.Mono()) {
		t.Errorf("an exchange with 33000 keys noted in the interval failed: the report is not published")
	}
}

// A peer that accepts connections and never answers holds no exchange
// past half an interval (it held each for the side connection's 2 s).
func TestRegionSilentPeerDoesNotStallTheExchange(t *testing.T) {
	peer := silentPeer(t, false)
	x := exchangerOn(twoRegions("a", "b", testIV), ownClient(redistest.Start(t)), peerClient(peer, time.Second))
	run(t, x)
	time.Sleep(2 * time.Second)
	if n := atomic.LoadInt64(&x.exchangesOK); n < 5 {
		t.Errorf("%d exchanges in 2 s of a 200 ms interval with a peer that never answers, want at least 5", n)
	}
}
