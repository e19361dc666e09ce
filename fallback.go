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
//   - The circuit breaker opens when Redis looks sick, not when a few
//     checks were unlucky: breakerThreshold failures within one second
//     that are also at least half of that second's checks. (A dead or
//     frozen Redis fails every check and opens it after breakerThreshold
//     of them; a CPU-starved pod whose Redis misses the deadline now and
//     then keeps using Redis.) While open: no Redis call at all, except
//     one probe (a real check) per probeInterval; a successful probe
//     closes it and the global limit resumes. Checks take the same
//     fallback path while it is open.
//   - Sentinel and Cluster (internal/redis): a failed check, a check skipped by
//     the open breaker, MOVED and READONLY also make the backend read the
//     topology again (at most every 250 ms, off the request's clock). While
//     a node is down its keys take the fallback; a changed topology (a
//     replica promoted) lets the next check through the breaker at once.
//     Until the topology is first known, checks fall back without counting
//     against Redis (the client's ErrNoRoute).

import (
	"sync/atomic"
	"time"
)

// breakerWindow is the span over which the breaker compares failures with
// checks.
const breakerWindow = int64(time.Second)

// breaker is a failure-rate circuit breaker, one per Redis (shared by every
// middleware using it). Safe for concurrent use; all fields are accessed
// atomically, and the window's counts are approximate under contention (a
// roll may lose a few). Its thresholds come from each caller's settings, so
// middlewares configured differently share the breaker's state but apply
// their own breakerThreshold and probeInterval. Times are monotonic ns
// (internal/clock).
type breaker struct {
	nextProbe int64 // 0 while closed; while open, the earliest next probe
	window    int64 // start of the current window
	checks    int64 // checks that went to Redis in the window
	failures  int64 // of which failed

	opened, closed int64 // transitions, for the metrics
}

// allow reports whether a check may call Redis at now while the breaker is
// open: only the one caller that claims the due probe, which schedules the
// next one interval later. (Callers test nextProbe != 0 first.)
func (b *breaker) allow(now, interval int64) bool {
	next := atomic.LoadInt64(&b.nextProbe)
	return next == 0 || now >= next && atomic.CompareAndSwapInt64(&b.nextProbe, next, now+interval)
}

// roll starts a new window at now when the current one is over.
func (b *breaker) roll(now int64) {
	w := atomic.LoadInt64(&b.window)
	if now-w >= breakerWindow && atomic.CompareAndSwapInt64(&b.window, w, now) {
		atomic.StoreInt64(&b.checks, 0)
		atomic.StoreInt64(&b.failures, 0)
	}
}

// success counts a successful call and closes the breaker if it was open
// (the probe succeeded).
func (b *breaker) success(now int64) {
	b.roll(now)
	atomic.AddInt64(&b.checks, 1)
	for next := atomic.LoadInt64(&b.nextProbe); next != 0; next = atomic.LoadInt64(&b.nextProbe) {
		if atomic.CompareAndSwapInt64(&b.nextProbe, next, 0) {
			atomic.AddInt64(&b.closed, 1)
			return
		}
	}
}

// failure counts a failed call; when the window holds threshold failures
// that are at least half its checks, the breaker opens and schedules the
// first probe. It reports whether this call opened it.
func (b *breaker) failure(now, threshold, interval int64) bool {
	b.roll(now)
	c := atomic.AddInt64(&b.checks, 1)
	f := atomic.AddInt64(&b.failures, 1)
	if f >= threshold && 2*f >= c && atomic.CompareAndSwapInt64(&b.nextProbe, 0, now+interval) {
		atomic.AddInt64(&b.opened, 1)
		return true
	}
	return false
}

// probeSoon lets the next check through as a probe, when open: the
// topology changed (a failover), so Redis may be back.
func (b *breaker) probeSoon() {
	if next := atomic.LoadInt64(&b.nextProbe); next > 1 {
		atomic.CompareAndSwapInt64(&b.nextProbe, next, 1)
	}
}

// isOpen reports whether the breaker is open.
func (b *breaker) isOpen() bool { return atomic.LoadInt64(&b.nextProbe) != 0 }
