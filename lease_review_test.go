package tollgate

// Leases under review: what a lease held stays in the bucket when its
// field goes (the pod asking again, the field's end in Redis, the
// give-back), so that a client that was hot, then idle, then bursts gets
// its burst and no more.

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// hot is a pod on addr over 100 requests a second (10 ms a token), burst
// 100, with leases of 40 for ttl; one pod counted, so a grant needs 80
// left after the request.
func hot(t *testing.T, addr, ttl string) *Tollgate {
	t.Helper()
	return alwaysHot(handlerOn(t, addr, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 100, "1s", 100
		c.Replicas = 1
		c.Redis.Heartbeat = "0"
		c.DecisionHeader = "X-Decision"
		c.Lease = config.Lease{Max: 40, TTL: ttl}
	}))
}

// alwaysHot has h's client ask for a lease from its first call (callLeased
// waits for a second otherwise): these tests count from the grant.
func alwaysHot(h *Tollgate) *Tollgate {
	h.top.lease.gap, h.top.lease.hot = 1<<62, 1
	return h
}

// earnedSince bounds what the bucket of hot earned since start: a token
// per 10 ms, and one for the part of a token it may have held already.
func earnedSince(start time.Time) int {
	return int(time.Since(start)/(10*time.Millisecond)) + 2
}

// leaseOf returns a copy of h's lease for client k (nil: none).
func leaseOf(h *Tollgate, k string) *lease {
	ls := h.top.lease
	ls.table.mu.Lock()
	defer ls.table.mu.Unlock()
	e := ls.table.leases[ls.tag+clientKeyOf(h, k)]
	if e == nil {
		return nil
	}
	c := *e
	return &c
}

// grantAndIdle sends a's first request for k (Redis admits it and leases
// 40 more: 59 left), then waits 600 ms: the bucket earns 60, so it is back
// at the 60 the lease leaves it.
func grantAndIdle(t *testing.T, a *Tollgate) {
	t.Helper()
	if rec := serve(a, "k"); rec.Code != http.StatusOK || rec.Header().Get("X-Decision") != "redis" {
		t.Fatalf("the first request: %d %q, want Redis's admission", rec.Code, rec.Header().Get("X-Decision"))
	}
	if e := leaseOf(a, "k"); e == nil || e.left != 40 {
		t.Fatalf("after the first request: lease %+v, want 40 left", e)
	}
	time.Sleep(600 * time.Millisecond)
}

// A pod that spent its lease asks again: the lease it spent (its own field,
// replaced) was part of the bucket until then, and stays spent.
func TestLeaseReaskKeepsTheSpentLeaseInTheBucket(t *testing.T) {
	addr := redistest.Start(t)
	a := hot(t, addr, "10s")
	grantAndIdle(t, a)
	start := time.Now()
	passed, how := sendAll(a, "k", 200)
	earned := earnedSince(start)
	t.Logf("a burst of 200: %d passed %v; %d earned meanwhile at most", passed, how, earned)
	if passed > 100+earned {
		t.Errorf("%d passed: more than the burst (100) and %d earned (the 40 the spent lease held came back when a asked again)", passed, earned)
	}
}

// A lease spent just before its end in Redis: the bucket does not come
// back to full when the field ends.
func TestLeaseEndInRedisKeepsWhatItSpent(t *testing.T) {
	addr := redistest.Start(t)
	a := hot(t, addr, "1s")
	b := hot(t, addr, "1s")
	if rec := serve(a, "k"); rec.Header().Get("X-Decision") != "redis" {
		t.Fatalf("the first request: %q, want Redis's admission", rec.Header().Get("X-Decision"))
	}
	e := leaseOf(a, "k")
	if e == nil || e.left != 40 {
		t.Fatalf("after the first request: lease %+v, want 40 left", e)
	}
	// Spent 60 ms before its end on the pod (the bucket has earned back
	// what the lease leaves it by then)...
	time.Sleep(time.Duration(e.end-(int64(time.Since(processStart))+monoOrigin)) - 60*time.Millisecond)
	start := time.Now()
	pa, howA := sendAll(a, "k", 40)
	// ...then its end in Redis passes, and b bursts.
	until, err := strconv.ParseFloat(e.until, 64)
	if err != nil {
		t.Fatal(err)
	}
	redistest.WaitFor(t, func() bool { return redisNowUS(t, addr) > until }, "the lease's end on Redis's clock")
	pb, howB := sendAll(b, "k", 200)
	earned := earnedSince(start)
	t.Logf("a: %d passed %v; b: %d passed %v; %d earned meanwhile at most", pa, howA, pb, howB, earned)
	if pa+pb > 100+earned {
		t.Errorf("%d + %d passed: more than the burst (100) and %d earned (a's lease came back to the bucket at its end, spent)", pa, pb, earned)
	}
}

// A lease that ends with little left gives that back, not what it spent.
func TestLeaseGiveBackKeepsWhatItSpent(t *testing.T) {
	addr := redistest.Start(t)
	a := hot(t, addr, "10s")
	b := hot(t, addr, "10s")
	grantAndIdle(t, a)
	start := time.Now()
	pa, howA := sendAll(a, "k", 39)
	if howA["lease"] != 39 {
		t.Fatalf("a: %v, want 39 from its lease", howA)
	}
	// a's lease ends with 1 left, given back.
	tb, k := a.top.lease.table, a.top.lease.tag+clientKeyOf(a, "k")
	tb.mu.Lock()
	e := tb.leases[k]
	delete(tb.leases, k)
	atomic.StoreInt64(&tb.n, int64(len(tb.leases)))
	tb.mu.Unlock()
	tb.giveBack([]*lease{e})
	pb, howB := sendAll(b, "k", 200)
	earned := earnedSince(start)
	t.Logf("a: %d passed; b: %d passed %v; %d earned meanwhile at most", pa, pb, howB, earned)
	if pa+pb > 100+earned {
		t.Errorf("%d + %d passed: more than the burst (100) and %d earned (the give-back of 1 brought back the 39 spent)", pa, pb, earned)
	}
}

// Two pods hold a lease of 20 each on one key and idle until the bucket
// is back at what they leave it; then each bursts with eight requests at
// a time: the fleet admits no more than the burst and what it earned, and
// no ask is left out when the requests are done.
func TestLeaseConcurrentPodsStayWithinTheLimit(t *testing.T) {
	addr := redistest.Start(t)
	pod := func() *Tollgate {
		return alwaysHot(handlerOn(t, addr, func(c *config.Config) {
			c.Average, c.Period, c.Burst = 100, "1s", 100
			c.Replicas, c.Redis.Heartbeat, c.DecisionHeader = 1, "0", "X-Decision"
			c.Lease = config.Lease{Max: 20, TTL: "10s"}
		}))
	}
	pods := []*Tollgate{pod(), pod()}
	for i, h := range pods {
		if rec := serve(h, "k"); rec.Header().Get("X-Decision") != "redis" {
			t.Fatalf("pod %d's first request: %q", i, rec.Header().Get("X-Decision"))
		}
		if e := leaseOf(h, "k"); e == nil || e.left != 20 {
			t.Fatalf("pod %d: lease %+v, want 20 left", i, e)
		}
	}
	time.Sleep(450 * time.Millisecond) // 45 earned: back at the 60 the leases leave
	var passed, leased int64
	done := make(chan struct{})
	start := time.Now()
	for _, h := range pods {
		for g := 0; g < 8; g++ {
			go func(h *Tollgate) {
				defer func() { done <- struct{}{} }()
				for i := 0; i < 40; i++ {
					rec := serve(h, "k")
					if rec.Code == http.StatusOK {
						atomic.AddInt64(&passed, 1)
					}
					if rec.Header().Get("X-Decision") == "lease" {
						atomic.AddInt64(&leased, 1)
					}
				}
			}(h)
		}
	}
	for i := 0; i < 16; i++ {
		<-done
	}
	earned := earnedSince(start)
	t.Logf("640 requests: %d passed, %d from leases; %d earned meanwhile at most", passed, leased, earned)
	if int(passed) > 100+earned {
		t.Errorf("%d passed: more than the burst (100) and %d earned", passed, earned)
	}
	for i, h := range pods {
		tb := h.top.lease.table
		tb.mu.Lock()
		for k, e := range tb.leases {
			if e.asking {
				t.Errorf("pod %d: an ask still out for %q with every request done", i, k)
			}
		}
		if n := atomic.LoadInt64(&tb.n); n != int64(len(tb.leases)) {
			t.Errorf("pod %d: n = %d, %d leases", i, n, len(tb.leases))
		}
		tb.mu.Unlock()
	}
}

// Replies no lease script gives: a grant above max, a grant with a
// refusal, a reply without the grant or with a negative one. None admits
// more than configured, none panics, and no ask is left out.
func TestLeaseHostileRepliesGrantNothing(t *testing.T) {
	for _, tc := range []struct {
		desc, reply string
		status      int
		decision    string // of each of the 12 requests
		evals       int64  // script calls for them
	}{
		{desc: "a grant of max", reply: "+1 50 0 1000 10 5000\r\n", status: 200, decision: "", evals: 2},
		{desc: "a grant above max", reply: "+1 50 0 1000 11 5000\r\n", status: 200, decision: "redis", evals: 12},
		{desc: "a grant with a refusal", reply: "+0 0 1500 1500 10 5000\r\n", status: 429, decision: "", evals: 1},
		{desc: "no grant in the reply", reply: "+1 50 0 1000\r\n", status: 200, decision: "local", evals: 12},
		{desc: "a negative grant", reply: "+1 50 0 1000 -10 5000\r\n", status: 200, decision: "local", evals: 12},
		{desc: "an until that is not a number", reply: "+1 50 0 1000 10 x\r\n", status: 200, decision: "local", evals: 12},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			f := redistest.StartFake(t, tc.reply)
			h := alwaysHot(handlerOn(t, f.Addr(), func(c *config.Config) {
				c.Average, c.Period, c.Burst = 100, "1h", 100
				c.Replicas, c.Redis.Heartbeat, c.DecisionHeader = 1, "0", "X-Decision"
				c.Redis.BreakerThreshold = 1000
				c.Lease = config.Lease{Max: 10, TTL: "10s"}
			}))
			for i := 0; i < 12; i++ {
				rec := serve(h, "k")
				if rec.Code != tc.status {
					t.Fatalf("request %d: %d, want %d", i+1, rec.Code, tc.status)
				}
				if got := rec.Header().Get("X-Decision"); tc.decision != "" && got != tc.decision {
					t.Fatalf("request %d: decided by %q, want %q", i+1, got, tc.decision)
				}
			}
			if n := atomic.LoadInt64(&f.Evals); n != tc.evals {
				t.Errorf("%d script calls for 12 requests, want %d", n, tc.evals)
			}
			tb := h.top.lease.table
			tb.mu.Lock()
			defer tb.mu.Unlock()
			for k, e := range tb.leases {
				if e.asking || e.left > 10 {
					t.Errorf("%q: %+v, want no ask out and at most max left", k, e)
				}
			}
		})
	}
}

// readmeACLArgs returns the ACL SETUSER arguments of the smallest ACL user
// README.md documents (the one line of the fenced block after "the
// smallest ACL user"), with >PASSWORD replaced by >password.
func readmeACLArgs(t *testing.T, password string) []string {
	t.Helper()
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "the smallest ACL user")
	if i < 0 {
		t.Fatal(`README.md has no "the smallest ACL user"`)
	}
	var block []string
	fence := 0
	for _, line := range strings.Split(string(b[i:]), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if fence++; fence == 2 {
				break
			}
			continue
		}
		if fence == 1 && strings.TrimSpace(line) != "" {
			block = append(block, strings.TrimSpace(line))
		}
	}
	if len(block) != 1 || !strings.HasPrefix(block[0], "ACL SETUSER ") {
		t.Fatalf("README's ACL block: %q", block)
	}
	args := strings.Fields(block[0])[2:]
	for j, f := range args {
		if f == ">PASSWORD" {
			args[j] = ">" + password
		}
	}
	return args
}

// The smallest ACL user the README documents runs the lease scripts: a
// grant, its spending, a give-back, and the calls that count what leases
// hold; Redis refuses none of their commands.
func TestLeaseUnderTheReadmeACL(t *testing.T) {
	addr := redistest.Start(t)
	args := readmeACLArgs(t, "acl-s3cret")
	redistest.Do(t, addr, append([]string{"ACL", "SETUSER"}, args...)...)
	h := alwaysHot(handlerOn(t, addr, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 100, "1h", 100
		c.Replicas, c.Redis.Heartbeat, c.DecisionHeader = 1, "0", "X-Decision"
		c.Redis.Username, c.Redis.Password = args[0], "acl-s3cret"
		c.Lease = config.Lease{Max: 10, TTL: "10s"}
	}))
	_, how := sendAll(h, "k", 5)
	ls := h.top.lease
	tb, k := ls.table, ls.tag+clientKeyOf(h, "k")
	tb.mu.Lock()
	e := tb.leases[k]
	delete(tb.leases, k)
	atomic.StoreInt64(&tb.n, int64(len(tb.leases)))
	tb.mu.Unlock()
	if e != nil {
		tb.giveBack([]*lease{e})
	}
	if how["redis"] != 1 || how["lease"] != 4 || e == nil || atomic.LoadInt64(&h.be.giveBacksLost) != 0 {
		t.Errorf("under README's ACL: decisions %v, lease %v, %d give-backs lost; want Redis's grant, 4 from the lease, none lost",
			how, e != nil, atomic.LoadInt64(&h.be.giveBacksLost))
	}
}

// A lease ended past the bound on what waits to go back is a lost
// give-back, and counted as one.
func TestLeaseEndedPastTheBoundIsCountedLost(t *testing.T) {
	var lost int64
	tb := &leaseTable{lost: &lost, leases: map[string]*lease{}}
	for i := 0; i < maxLeases; i++ {
		tb.ended = append(tb.ended, &lease{left: 1})
	}
	tb.mu.Lock()
	tb.leases["k"] = &lease{left: 3}
	tb.end("k", tb.leases["k"])
	tb.mu.Unlock()
	if len(tb.ended) != maxLeases || atomic.LoadInt64(&lost) != 1 {
		t.Errorf("%d waiting, %d lost; want %d waiting and the one past them lost", len(tb.ended), lost, maxLeases)
	}
}
