package tollgate

// Defects an independent review of the multi-region feature found, each a
// test that failed before its fix: those of the plugin (its configuration,
// its requests' notes, its exchanges across reloads). Those of the
// exchange itself are internal/regions' tests.

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// holdLease makes another pod the leader of region's exchange on addr for
// a minute: the pods of this process only flush their notes to the hot
// hash, and nothing takes them from it.
func holdLease(t *testing.T, addr, region string) {
	t.Helper()
	redistest.Do(t, addr, "SET", "tg{rg:"+region+"}:lead", "another-pod", "PX", "60000")
}

// notedIn waits up to d for region's hot hash on addr to hold field (the
// notes flushed at an interval's start), and returns the fields it held,
// field last when it was.
func notedIn(t *testing.T, addr, region, field string, d time.Duration) []string {
	t.Helper()
	var seen []string
	had := map[string]bool{}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, f := range redistest.Do(t, addr, "HKEYS", "tg{rg:"+region+"}:hot") {
			if f == field {
				return append(seen, f)
			}
			if !had[f] {
				had[f] = true
				seen = append(seen, f)
			}
		}
	}
	return seen
}

// A share hash is its bucket's key and "}s": no class, rule or plan name
// holds a brace, so no bucket can be another's share hash. (With "!r",
// rules "x" and "x!r" shared a key: WRONGTYPE on every check.)
func TestRegionNoNameMakesAShareKey(t *testing.T) {
	cfg := CreateConfig()
	cfg.Average = 10
	cfg.Rules = []config.Rule{{Name: "x", PathPrefix: "/", Average: 100}, {Name: "x}s", PathPrefix: "/", Average: 100}}
	cfg.Region = &config.RegionConfig{Name: "a", Peers: []config.PeerConfig{{Name: "b", Endpoints: []string{"127.0.0.1:2"}}}}
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
	own := redistest.Start(t)
	holdLease(t, own, "a")
	var peers []config.PeerConfig
	for i, n := range []string{"b", "c", "d", "e"} {
		peers = append(peers, config.PeerConfig{Name: n, Endpoints: []string{"127.0.0.1:" + strconv.Itoa(9+i)}})
	}
	h := handlerOn(t, own, func(c *config.Config) {
		c.Class = uniqueName("region")
		c.Average, c.Period, c.Burst = 100, "1s", 100
		c.Redis.Username = ""
		c.Region = &config.RegionConfig{Name: "a", Interval: "200ms", Peers: peers}
	})
	if rec := serve(h, "quiet-client"); rec.Code != 200 {
		t.Fatalf("first request: %d", rec.Code)
	}
	// Five intervals: a note would be flushed at the first one's start,
	// and kept two intervals.
	if n := notedIn(t, own, "a", "", time.Second); len(n) != 0 {
		t.Errorf("one request with 19 of its region's 20 tokens left was noted as pressing (%v): every request of every key notes (a mutex per request, every key tracked)", n)
	}
}

// A reload that changes the region's configuration (here its interval)
// within exchangerStale of the previous New left the old exchanger's
// loop running beside the new one, until some later New happened: both
// shared the process's identity, so both passed lead() and both exchanged
// the region every interval (taking each other's hot notes, subtracting
// the counts twice, publishing reports computed from different settings).
// The registry now drops the old one: its loop ends at its next round, and
// the new one takes the lease.
func TestRegionReloadLeavesTwoLeaders(t *testing.T) {
	own, peer := redistest.Start(t), redistest.Start(t)
	class := uniqueName("region")
	mk := func(iv string) *Tollgate {
		return handlerOn(t, own, func(c *config.Config) {
			c.Class = class
			c.Redis.Username = ""
			c.Region = &config.RegionConfig{Name: "a", Interval: iv, Peers: []config.PeerConfig{{Name: "b", Endpoints: []string{peer}}}}
		})
	}
	old := exchangerOf(mk("200ms"))
	time.Sleep(500 * time.Millisecond)
	cur := exchangerOf(mk("300ms")) // the reload
	time.Sleep(1500 * time.Millisecond)
	was := old.Stats()
	time.Sleep(600 * time.Millisecond) // three of the old interval
	st := old.Stats()
	if st.Leading || st.OK != was.OK || !cur.Stats().Leading {
		t.Errorf("after a reload, the dropped configuration's exchange still runs (leading %v, %d exchanges then %d) and the new one leads %v; want the old stopped, the new leading",
			st.Leading, was.OK, st.OK, cur.Stats().Leading)
	}
}

// A tracked key's share hash whose n is not an integer (garbage written by
// another client of the Redis) fails the script for that key on every
// request (HINCRBY: not an integer), each a Redis failure counted by the
// breaker, rather than the key falling back to its static share.
func TestRegionGarbageShareHashFailsChecks(t *testing.T) {
	class := uniqueName("region")
	a, _, ra, _ := regionPair(t, class, nil)
	bucket := bucket.HashKey(class + "\x00h:" + "victim")
	redistest.Do(t, ra, "HSET", bucket+"}s", "s", "500000", "n", "garbage")
	before := atomic.LoadInt64(&a.be.failures)
	serve(a, "victim")
	if f := atomic.LoadInt64(&a.be.failures) - before; f != 0 {
		t.Errorf("a share hash with n=garbage: the check failed against Redis (%d failures) instead of charging the static share", f)
	}
}

// A second review's findings, each a test that failed before its fix.

// A limit whose burst is its cost: a region's share of the burst (0.5)
// holds less than one request, and without a floor of one request's cost
// no request ever passed in any region (an OTP limit, failing closed).
func TestRegionSmallBurstStillAdmits(t *testing.T) {
	a, _, _, _ := regionPair(t, uniqueName("region"), func(c *config.Config) {
		c.Rules = []config.Rule{{Name: "otp", PathPrefix: "/otp", Average: 6, Period: "1m", Burst: 1, FailureMode: "closed"}}
	})
	if got := admitted(a, 3, "POST", "/otp", "X-API-Key", "k"); got != 1 {
		t.Errorf("an OTP limit of burst 1 in one of two regions: %d of 3 admitted, want 1", got)
	}
}

// In a set of several policies, a later policy's bucket emptied by an
// admitted request presses too: it is noted (the inlined test looked at
// the first policy alone).
func TestRegionLaterPolicyEmptiedIsNoted(t *testing.T) {
	own := redistest.Start(t)
	holdLease(t, own, "a")
	class := uniqueName("region")
	a := handlerOn(t, own, func(c *config.Config) {
		c.Class = class
		c.Average, c.Period, c.Burst = 50, "1s", 50
		c.Redis.Username = ""
		c.Rules = []config.Rule{{Name: "search", PathPrefix: "/search", Average: 60, Period: "1m", Burst: 2}}
		c.Region = &config.RegionConfig{Name: "a", Interval: "200ms", Peers: []config.PeerConfig{{Name: "b", Endpoints: []string{"127.0.0.1:2"}}}}
	})
	// The region's half of the rule's burst of 2: one request empties it,
	// while the top level (50 a second) keeps most of its tokens.
	if got := admitted(a, 1, "GET", "/search", "X-API-Key", "k"); got != 1 {
		t.Fatalf("first search: %d admitted", got)
	}
	field := bucket.HashKey(class+"\x00h:k") + ":search r" // a note of tokens Redis decided: the bucket's key and " r"
	if n := notedIn(t, own, "a", field, 2*time.Second); len(n) == 0 || n[len(n)-1] != field {
		t.Errorf("the rule's bucket emptied by an admitted request was not noted: %v", n)
	}
}
