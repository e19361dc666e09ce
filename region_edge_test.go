package tollgate

// Defects an independent review of the multi-region feature found, each a
// test that failed before its fix.

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
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

// A second review's findings, each a test that failed before its fix.

// A limit whose burst is its cost: a region's share of the burst (0.5)
// holds less than one request, and without a floor of one request's cost
// no request ever passed in any region (an OTP limit, failing closed).
func TestRegionSmallBurstStillAdmits(t *testing.T) {
	a, _, _, _ := regionPair(t, uniqueName("region"), func(c *Config) {
		c.Rules = []Rule{{Name: "otp", PathPrefix: "/otp", Average: 6, Period: "1m", Burst: 1, FailureMode: "closed"}}
	})
	if got := admitted(a, 3, "POST", "/otp", "X-API-Key", "k"); got != 1 {
		t.Errorf("an OTP limit of burst 1 in one of two regions: %d of 3 admitted, want 1", got)
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

// A peer that accepts connections and never answers holds no exchange
// past half an interval (it held each for the side connection's 2 s).
func TestRegionSilentPeerDoesNotStallTheExchange(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // accepted, never answered
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	a := handlerOn(t, startLiveRedis(t), func(c *Config) {
		c.Class = uniqueName("region")
		c.Redis.Username = ""
		c.Region = &RegionConfig{Name: "a", Interval: "200ms", Peers: []PeerConfig{{Name: "b", Endpoints: []string{l.Addr().String()}}}}
	})
	x := exchangerOf(a)
	time.Sleep(2 * time.Second)
	if n := atomic.LoadInt64(&x.exchangesOK); n < 5 {
		t.Errorf("%d exchanges in 2 s of a 200 ms interval with a peer that never answers, want at least 5", n)
	}
}

// Retiring: a key that pressed here in this interval never retires, so a
// bursty client does not flap between its share and static; one that has
// not pressed for retireQuiet intervals retires once every region asks for
// at most its static share.
func TestRegionRetiring(t *testing.T) {
	rs, err := compileRegion(&RegionConfig{Name: "a", Peers: []PeerConfig{{Name: "b", Endpoints: []string{"127.0.0.1:2"}}}}, redisSettings{addr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	const k, rate = "tg{retiring}", 20.0
	// b holds its floor of the key, asks nothing.
	x := &exchanger{tracked: map[string]*keyShares{}, views: []peerView{{rep: &report{keys: map[string]reportKey{k: {share: 50000, rate: rate}}}}}}
	// 1 token a second asked, a twentieth of the rate: under half of the
	// static share (10/s).
	x.tracked[k] = &keyShares{demand: 1, share: 950000, pressed: 100}
	x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 1, rate, true, 101, 0)
	if x.tracked[k] == nil || x.tracked[k].share != 950000 {
		t.Errorf("a key that pressed this interval retired (share %+v)", x.tracked[k])
	}
	x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 1, rate, false, 102, 0)
	if ks := x.tracked[k]; ks == nil || ks.share != rs.static {
		t.Errorf("a key asking a twentieth of the rate, not pressing: %+v, want its share back to static", ks)
	}
	// 8 a second: under the static share, not under half of it.
	x.tracked[k] = &keyShares{demand: 8, share: 700000, pressed: 100}
	x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 8, rate, false, 101, 0)
	if ks := x.tracked[k]; ks == nil || ks.share == rs.static {
		t.Errorf("8 a second, pressed an interval ago: %+v, want it still tracked above static", ks)
	}
	x.decideKey(rs, &report{keys: map[string]reportKey{}}, k, 8, rate, false, 100+retireQuiet, 0)
	if ks := x.tracked[k]; ks == nil || ks.share != rs.static {
		t.Errorf("8 a second, not pressed for %d intervals: %+v, want its share back to static", retireQuiet, ks)
	}
}

// In a set of several policies, a later policy's bucket emptied by an
// admitted request presses too: it is noted (the inlined test looked at
// the first policy alone).
func TestRegionLaterPolicyEmptiedIsNoted(t *testing.T) {
	class := uniqueName("region")
	a, _, _, _ := regionPair(t, class, func(c *Config) {
		c.Rules = []Rule{{Name: "search", PathPrefix: "/search", Average: 60, Period: "1m", Burst: 2}}
	})
	// The region's half of the rule's burst of 2: one request empties it,
	// while the top level (50 a second) keeps most of its tokens.
	if got := admitted(a, 1, "GET", "/search", "X-API-Key", "k"); got != 1 {
		t.Fatalf("first search: %d admitted", got)
	}
	notes := a.notes.take()
	if _, ok := notes[hashKey(class+"\x00h:k")+":search"+freshSuffix]; !ok {
		t.Errorf("the rule's bucket emptied by an admitted request was not noted: %v", notes)
	}
}

// A side reply's lines count against its budget, not its bulk strings
// alone: 70,000 integers of 64 digits are more than maxReplyBytes.
func TestSideReplyBudgetCountsEveryLine(t *testing.T) {
	var b strings.Builder
	b.WriteString("*65536\r\n")
	for i := 0; i < 65536; i++ {
		b.WriteString(":" + strings.Repeat("9", 64) + "\r\n")
	}
	if _, err := readValues(bufio.NewReader(strings.NewReader(b.String()))); err == nil {
		t.Errorf("an array of %d bytes of integer lines was read whole, past the budget of %d", b.Len(), maxReplyBytes)
	}
}
