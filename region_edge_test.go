package tollgate

// Defects an independent review of the multi-region feature found, each a
// test that failed before its fix.

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A share hash is its bucket's key and "}s": no class, rule or plan name
// holds a brace, so no bucket can be another's share hash. (With "!r",
// rules "x" and "x!r" shared a key: WRONGTYPE on every check.)
func TestRegionNoNameMakesAShareKey(t *testing.T) {
	cfg := CreateConfig()
	cfg.Average = 10
	cfg.Rules = []Rule{{Name: "x", PathPrefix: "/", Average: 100}, {Name: "x}s", PathPrefix: "/", Average: 100}}
	cfg.Region = &RegionConfig{Name: "a", Peers: []PeerConfig{{Name: "b", Endpoints: []string{"127.0.0.1:2"}}}}
	if _, err := New(nil, nil, cfg, "api"); err == nil || !strings.Contains(err.Error(), "rules[1].name") {
		t.Errorf("a rule named x}s: %v, want it refused", err)
	}
}

// With five equal regions a region's static share is 0.2: a full bucket
// holds a fifth of the limit's burst, so "fewer than a fifth of the burst
// left" (note, and decide's inlined test against nearBelow, both on the
// whole limit's burst) holds after every request. One request on a fresh
// key, far from its limit, is noted as pressing.
func TestRegionFiveRegionsNoteEveryRequest(t *testing.T) {
	own := startLiveRedis(t)
	var peers []PeerConfig
	for i, n := range []string{"b", "c", "d", "e"} {
		peers = append(peers, PeerConfig{Name: n, Endpoints: []string{"127.0.0.1:" + strconv.Itoa(9+i)}})
	}
	h := handlerOn(t, own, func(c *Config) {
		c.Class = uniqueName("region")
		c.Average, c.Period, c.Burst = 100, "1s", 100
		c.Redis.Username = ""
		c.Region = &RegionConfig{Name: "a", Interval: "1h", Peers: peers}
	})
	if rec := serve(h, "quiet-client"); rec.Code != 200 {
		t.Fatalf("first request: %d", rec.Code)
	}
	n := len(h.notes.take())
	if n != 0 {
		t.Errorf("one request with 19 of its region's 20 tokens left was noted as pressing (%d notes): every request of every key notes (a mutex per request, every key tracked)", n)
	}
}

// A reload that changes the region's configuration (here its interval)
// within exchangerStale of the previous New leaves the old exchanger's
// loop running beside the new one, until some later New happens: both
// share instanceID, so both pass lead() and both exchange the region every
// interval (taking each other's hot notes, subtracting the counts twice,
// publishing reports computed from different settings).
func TestRegionReloadLeavesTwoLeaders(t *testing.T) {
	own, peer := startLiveRedis(t), startLiveRedis(t)
	class := uniqueName("region")
	mk := func(iv string) *Tollgate {
		return handlerOn(t, own, func(c *Config) {
			c.Class = class
			c.Redis.Username = ""
			c.Region = &RegionConfig{Name: "a", Interval: iv, Peers: []PeerConfig{{Name: "b", Endpoints: []string{peer}}}}
		})
	}
	old := exchangerOf(mk("200ms"))
	time.Sleep(500 * time.Millisecond)
	cur := exchangerOf(mk("300ms")) // the reload
	time.Sleep(1500 * time.Millisecond)
	if atomic.LoadInt32(&old.running) == 1 && atomic.LoadInt32(&old.leading) == 1 && atomic.LoadInt32(&cur.leading) == 1 {
		t.Errorf("after a reload, the dropped configuration's exchange still runs and leads region a beside the new one (old: %d exchanges, new: %d); it stops only at a New more than %s after the old one's",
			atomic.LoadInt64(&old.exchangesOK), atomic.LoadInt64(&cur.exchangesOK), exchangerStale)
	}
}

// A tracked key's share hash whose n is not an integer (garbage written by
// another client of the Redis) fails the script for that key on every
// request (HINCRBY: not an integer), each a Redis failure counted by the
// breaker, rather than the key falling back to its static share.
func TestRegionGarbageShareHashFailsChecks(t *testing.T) {
	class := uniqueName("region")
	a, _, ra, _ := regionPair(t, class, nil)
	bucket := hashKey(class + "\x00h:" + "victim")
	redisCmd(t, ra, "HSET", bucket+"}s", "s", "500000", "n", "garbage")
	before := atomic.LoadInt64(&a.be.failures)
	serve(a, "victim")
	if f := atomic.LoadInt64(&a.be.failures) - before; f != 0 {
		t.Errorf("a share hash with n=garbage: the check failed against Redis (%d failures) instead of charging the static share", f)
	}
}

// A leader whose wall clock steps back (an NTP step) computes slots below
// the ones it recorded a peer as heard and acknowledging at: slot - heard
// is negative, so a peer that then goes silent is never counted silent
// until the clock has caught up (an hour here). The region keeps growing
// and keeps a share above static, while the peer, losing it, lets its own
// share below static grow back to static after staticSteps: the sum
// passes 1 for as long as the step.
func TestRegionClockStepBackHidesPeerSilence(t *testing.T) {
	ra, rb := startLiveRedis(t), startLiveRedis(t)
	l := newLink(t, rb)
	class := uniqueName("region")
	a := handlerOn(t, ra, func(c *Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 50, "1s", 50
		c.Redis.Username = ""
		// The loop of this exchanger sleeps to the hour: the test drives
		// exchanges itself, with a 200ms interval.
		c.Region = &RegionConfig{Name: "a", Interval: "1h", Peers: []PeerConfig{{Name: "b", Endpoints: []string{l.Addr()}, Timeout: "100ms"}}}
	})
	rs := *exchangerOf(a).settings()
	rs.interval = 200 * time.Millisecond
	x := &exchanger{own: a.be, peers: exchangerOf(a).peers, peerUp: make([]int32, len(rs.peers))}
	bucket := hashKey(class + "\x00h:" + "hot")
	peerReport := func(seq int64) {
		body := "tollgate-region 1 b " + strconv.FormatInt(seq, 10) + "\nack a " + strconv.FormatInt(seq, 10) + "\nk " + bucket + " 0 50000 0\n"
		redisCmd(t, rb, "SET", reportKeyOf("b"), body)
	}
	hot := func() { redisCmd(t, ra, "HINCRBY", hotKey("a"), bucket, "100") }
	s := time.Now().UnixNano()/int64(rs.interval) + 1
	iv, now := int64(rs.interval), monotonic()
	peerReport(s - 1)
	hot()
	x.exchange(&rs, s, now)
	peerReport(s)
	hot()
	x.exchange(&rs, s+1, now+iv)
	if got := shareIn(t, ra, bucket); got != 950000 {
		t.Fatalf("before the cut: a's share %d, want 950000", got)
	}
	l.Cut()
	back := s + 1 - int64(time.Hour/rs.interval) // the clock stepped back an hour
	for k := int64(1); k <= staticSteps+2; k++ {
		hot()
		x.exchange(&rs, back+k, now+(1+k)*iv)
	}
	if got := shareIn(t, ra, bucket); got > rs.static {
		t.Errorf("peer b unreachable for %d intervals after a clock step back: a's share %d is still above static %d (b's below-static share is static again by now: the sum is %d ppm)",
			staticSteps+2, got, rs.static, got+rs.peers[0].static)
	}
}

// The hot hash is read whole (HGETALL) and readValues refuses an array of
// more than maxArrayLen elements: once the pods of a region note more than
// 32768 distinct keys in an interval (128 pods at maxNotes each; any fleet
// with five regions, where every request notes), every exchange fails and
// the region stops publishing: its peers count it silent, and shares stop
// moving everywhere.
func TestRegionLargeHotHashFailsEveryExchange(t *testing.T) {
	ra, rb := startLiveRedis(t), startLiveRedis(t)
	class := uniqueName("region")
	a := handlerOn(t, ra, func(c *Config) {
		c.Class = class
		c.Redis.Username = ""
		c.Region = &RegionConfig{Name: "a", Interval: "1h", Peers: []PeerConfig{{Name: "b", Endpoints: []string{rb}}}}
	})
	rs := *exchangerOf(a).settings()
	rs.interval = 200 * time.Millisecond
	x := &exchanger{own: a.be, peers: exchangerOf(a).peers, peerUp: make([]int32, len(rs.peers))}
	redisCmd(t, ra, "EVAL", `for i = 1, 33000 do redis.call('HINCRBY', KEYS[1], 'tg{'..string.format('%010d', i)..'}', 0) end return 1`, "1", hotKey("a"))
	if !x.exchange(&rs, time.Now().UnixNano()/int64(rs.interval)+1, monotonic()) {
		t.Errorf("an exchange with 33000 keys noted in the interval failed (HGETALL's reply is past maxArrayLen): the report is not published")
	}
}
