package e2e

// The lease tests' loads and readings (fleet_lease_test.go).

import (
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"
)

// leaseRoute is the user's configuration (userConf's options) on addr at
// path prefix, its limit and lease given by kv, but for the budget of a
// check: 1 s, not 5 ms (see fleet_lease_test.go).
func leaseRoute(name, prefix, addr string, kv ...interface{}) route {
	opts := limitOpts(addr, append([]interface{}{
		"replicas", userReplicas, "decisionHeader", "X-Tollgate-Decision",
		"redis.timeout", "1s", "redis.breakerThreshold", 3, "redis.probeInterval", "2s",
	}, kv...)...)
	return route{name, "PathPrefix(`" + prefix + "`)", opts}
}

// leaseOf is a lease: {max: n, ttl: ttl} ("" for the default).
func leaseOf(n int, ttl string) map[string]interface{} {
	l := map[string]interface{}{"max": n}
	if ttl != "" {
		l["ttl"] = ttl
	}
	return l
}

// A limit as the tests see it: burst, and one token every iv.
type leaseLimit struct {
	burst int
	iv    time.Duration
	max   int // requests per lease
}

// allows is the most the limit admits over a span of length span: burst
// plus what it earns, with the script's slack (1 + burst/64 µs).
func (l leaseLimit) allows(span time.Duration) int {
	slack := time.Microsecond + time.Duration(l.burst)*time.Microsecond/64
	return l.burst + int((span+slack)/l.iv)
}

// burstPath sends n concurrent requests for key to path, request i to
// replica i mod 3 (burstTo).
func (fe *fleetEnv) burstPath(n int, path, key string) ([]reply, time.Duration) {
	return fe.burstTo(n, path, key, roundRobin)
}

// grants returns Redis's HSET calls so far: a lease grant over one bucket
// is one.
func grants(t *testing.T, r *Redis) int {
	t.Helper()
	n, err := r.Calls("hset")
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	return int(n)
}

// checkLeased reports (without stopping the test) unless every reply of rs
// was decided by Redis, its deny cache or a lease, some by a lease (when
// exercised: a small burst may drain the bucket below the threshold
// before a replica's client is hot, callLeased), and
// the requests admitted and left unspent in the leases granted (granted
// of them: charged, and out of the bucket until they end) number exactly
// burst (+ earned in elapsed). Then the headers.
func checkLeased(t *testing.T, what string, rs []reply, elapsed time.Duration, l leaseLimit, granted int, exercised bool) {
	t.Helper()
	n, how := tally(rs)
	unspent := granted*l.max - how["lease"]
	t.Logf("%s: %d of %d admitted in %v, %d leases granted, %d of their requests unspent: %d in all (allowed %d..%d); decisions: %s",
		what, n, len(rs), elapsed.Round(time.Millisecond), granted, unspent, n+unspent, l.burst, l.allows(elapsed), formatTally(how))
	if unspent < 0 {
		t.Errorf("%s: %d admitted from leases, more than the %d x %d granted", what, how["lease"], granted, l.max)
	}
	if n+unspent > l.allows(elapsed) || n+unspent < l.burst {
		t.Errorf("%s: %d of %d admitted and %d unspent in leases, want %d in all (+%d earned in %v)",
			what, n, len(rs), unspent, l.burst, l.allows(elapsed)-l.burst, elapsed.Round(time.Millisecond))
	}
	if exercised && how["lease"] == 0 {
		t.Errorf("%s: no request admitted from a lease (%s): the burst did not exercise leases", what, formatTally(how))
	}
	checkDecided(t, what, rs, "redis", "cache", "lease")
	checkHeaders(t, rs)
}

// checkDecided reports unless every reply of rs was decided by one of by.
func checkDecided(t *testing.T, what string, rs []reply, by ...string) {
	t.Helper()
	_, how := tally(rs)
	other := len(rs)
	for _, b := range by {
		other -= how[b]
	}
	if other > 0 {
		t.Errorf("%s: %d of %d decided otherwise (%s), want every one by %v", what, other, len(rs), formatTally(how), by)
	}
}

// unspent returns the requests that granted leases of l did not admit,
// from the lease decisions of every load of rs.
func unspent(l leaseLimit, granted int, rs ...[]reply) int {
	u := granted * l.max
	for _, r := range rs {
		_, how := tally(r)
		u -= how["lease"]
	}
	return u
}

// pacedPath sends, from one goroutine per replica, a request for key to
// path every `every`, ticks times (or for ticks x every and one tick
// more, whichever ends first); a tick that finds inflight requests of its
// replica still out is skipped, so a slow fleet is offered less rather
// than a growing queue. It returns every reply and the ticks skipped.
func (fe *fleetEnv) pacedPath(path, key string, every time.Duration, ticks, inflight int) ([]reply, int) {
	var mu sync.Mutex
	var out []reply
	skipped := 0
	var wg sync.WaitGroup
	end := time.Now().Add(time.Duration(ticks+1) * every)
	for rep := range fe.fleet.Replicas {
		wg.Add(1)
		go func(rep int) {
			defer wg.Done()
			sem := make(chan struct{}, inflight)
			tick := time.NewTicker(every)
			defer tick.Stop()
			for i := 0; i < ticks && time.Now().Before(end); i++ {
				<-tick.C
				select {
				case sem <- struct{}{}:
				default:
					mu.Lock()
					skipped++
					mu.Unlock()
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					r := fe.send(rep, "GET", path, key)
					<-sem
					mu.Lock()
					out = append(out, r)
					mu.Unlock()
				}()
			}
		}(rep)
	}
	wg.Wait()
	return out, skipped
}

// span is the first send and the last reply of rs.
func span(rs []reply) (first, last time.Time) {
	for _, r := range rs {
		if first.IsZero() || r.at.Before(first) {
			first = r.at
		}
		if end := r.at.Add(r.latency); end.After(last) {
			last = end
		}
	}
	return first, last
}

// checkWindows reports unless, in every span of length w starting each
// step after the first send, and over the whole run, the admitted replies
// whose decision surely falls in it (sent at or after its start, answered
// by its end) are at most what l allows over it.
func checkWindows(t *testing.T, what string, rs []reply, l leaseLimit, w, step time.Duration) {
	t.Helper()
	var ok []reply
	for _, r := range rs {
		if r.err == nil && r.status == http.StatusOK {
			ok = append(ok, r)
		}
	}
	sort.Slice(ok, func(i, j int) bool { return ok[i].at.Before(ok[j].at) })
	in := func(from, to time.Time) int {
		n := 0
		for _, r := range ok {
			if !r.at.Before(from) && !r.at.Add(r.latency).After(to) {
				n++
			}
		}
		return n
	}
	first, last := span(rs)
	fullest, at, over, windows := 0, time.Duration(0), 0, 0
	for a := first; !a.Add(w).After(last); a = a.Add(step) {
		n := in(a, a.Add(w))
		windows++
		if n > fullest {
			fullest, at = n, a.Sub(first)
		}
		if n > l.allows(w) {
			over++
		}
	}
	whole := last.Sub(first)
	t.Logf("%s: fullest %v window (at %v): %d admitted, allowed %d; whole run: %d admitted in %v, allowed %d",
		what, w, at.Round(time.Millisecond), fullest, l.allows(w), len(ok), whole.Round(time.Millisecond), l.allows(whole))
	if over > 0 {
		t.Errorf("%s: %d of %d windows of %v over the limit, the fullest (at %v) with %d admitted: want at most %d (burst %d + earned)",
			what, over, windows, w, at.Round(time.Millisecond), fullest, l.allows(w), l.burst)
	}
	if len(ok) > l.allows(whole) {
		t.Errorf("%s: %d admitted over the whole run (%v), want at most %d", what, len(ok), whole.Round(time.Millisecond), l.allows(whole))
	}
}
