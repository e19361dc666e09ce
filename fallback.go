package tollgate

// What happens when Redis is unavailable.
//
// Failure policy (applied in backend.check, Tollgate.decide and
// Tollgate.fallback):
//   - Redis answers with an error, refuses the connection, or does not
//     answer within redis.timeout: the check fails. Policies in failureMode
//     "open" fall back to a per-pod token bucket with the limit divided by
//     replicas (each share at least one request); the request proceeds if
//     that bucket allows it. Policies in failureMode "closed" answer 503
//     with Retry-After = probeInterval; a request with both kinds of policy
//     fails closed. The failure is counted and logged (log package: under
//     Traefik, its log at ERROR) at most once per probeInterval.
//   - A reply that no correct script produces (wrong shape, negative
//     numbers, a refusal naming no wait) is a failure like any other.
//   - breakerThreshold consecutive failures open the circuit breaker: no
//     Redis call at all while open, except one probe (a real check) per
//     probeInterval; a successful probe closes it and the global limit
//     resumes. While open, checks take the same fallback path.

import (
	"sync"
	"sync/atomic"
	"time"
)

// breaker is a consecutive-failure circuit breaker, one per Redis (shared by
// every middleware using it). Safe for concurrent use; all fields are
// accessed atomically. Its thresholds come from each caller's settings, so
// middlewares configured differently share the breaker's state but apply
// their own breakerThreshold and probeInterval. Times are Unix ns.
type breaker struct {
	failures  int64 // consecutive failures so far
	nextProbe int64 // while open, the earliest instant of the next probe
}

// allow reports whether a check may call Redis at now: always while fewer
// than threshold consecutive failures; otherwise only the one caller that
// claims the due probe, which schedules the next one interval later.
func (b *breaker) allow(now, threshold, interval int64) bool {
	if atomic.LoadInt64(&b.failures) < threshold {
		return true
	}
	next := atomic.LoadInt64(&b.nextProbe)
	return now >= next && atomic.CompareAndSwapInt64(&b.nextProbe, next, now+interval)
}

// success closes the breaker.
func (b *breaker) success() { atomic.StoreInt64(&b.failures, 0) }

// failure counts a failed call; the one that reaches threshold opens the
// breaker and schedules the first probe.
func (b *breaker) failure(now, threshold, interval int64) {
	if atomic.AddInt64(&b.failures, 1) == threshold {
		atomic.StoreInt64(&b.nextProbe, now+interval)
	}
}

// localBuckets holds the per-pod fallback buckets of every middleware in the
// process, by bucket key: the TAT of each (µs since epochUS, the pod's
// clock). Safe for concurrent use.
//
// Bounded: at most max buckets. Inserting into a full store first drops the
// buckets that are full again (equivalent to absent), then, if that freed
// less than a quarter, arbitrary ones, so a flood of distinct clients costs
// at most max entries; a dropped bucket that was not full restarts full.
type localBuckets struct {
	now func() time.Time
	max int

	mu   sync.Mutex // guards tats
	tats map[string]float64
}

func newLocalBuckets(max int) *localBuckets {
	return &localBuckets{now: time.Now, max: max, tats: make(map[string]float64)}
}

// take is takeAll over the local buckets keys[i] with shapes lims[i]: all
// charged or none; d receives the decision.
func (lb *localBuckets) take(keys []string, lims []limit, d []int64) bool {
	now := float64(lb.now().UnixMicro() - epochUS)
	tats := make([]float64, len(keys))
	lb.mu.Lock()
	for i, k := range keys {
		tats[i] = lb.tats[k]
	}
	ok := takeAll(lims, tats, now, d)
	for i, k := range keys {
		if tats[i] == lb.tats[k] {
			continue // refused and not clamped: unchanged
		}
		if _, present := lb.tats[k]; !present && len(lb.tats) >= lb.max {
			lb.evict(now)
		}
		lb.tats[k] = tats[i]
	}
	lb.mu.Unlock()
	return ok
}

// evict makes room; requires lb.mu held.
func (lb *localBuckets) evict(now float64) {
	for k, tat := range lb.tats {
		if tat <= now {
			delete(lb.tats, k)
		}
	}
	for k := range lb.tats {
		if len(lb.tats) < lb.max*3/4 {
			break
		}
		delete(lb.tats, k)
	}
}

// size returns the number of buckets held.
func (lb *localBuckets) size() int {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return len(lb.tats)
}
