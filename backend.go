package tollgate

// A backend is one Redis deployment as the checks see it: where a check
// goes (a pool, or the topology's pools), the circuit breaker in front of
// it, and what is counted. Failure policy: fallback.go.

import (
	"errors"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

// watchIdle ends the prober after this long without checks.
const watchIdle = time.Minute

// errBreakerOpen is a check not sent: the breaker is open.
var errBreakerOpen = errors.New("tollgate: redis circuit breaker open")

// backend is one Redis deployment (a server, a Sentinel-managed primary,
// or a Cluster) with its pools, breaker and counters. Safe for concurrent
// use; counters are updated atomically. Times are monotonic ns (internal/clock).
type backend struct {
	rc      *redis.Client        // the deployment (redisconn.go)
	pool    *redis.Pool          // standalone: the server's pool (the hot path's); nil otherwise
	base    config.RedisSettings // the first New's: its mode, endpoints and credentials make the backend
	breaker *breaker
	now     func() int64 // monotonic (internal/clock)

	setMu sync.Mutex
	set   config.RedisSettings // the latest New's, for what runs outside a check (dials, probes)

	beatsMu sync.Mutex
	beats   map[string]*heartbeat // by class (heartbeat.go)
	beating int32                 // 1 while beatLoop runs

	probing int32 // 1 while probeLoop runs

	metrics metrics.Redis // served by a serveMetrics middleware (internal/metrics)

	lastUsed int64 // the last check
	lastLog  int64 // the last failure logged

	// counters (Redis counts the checks it answers: INFO commandstats)
	failures  int64 // failures counted against Redis (errors, timeouts, failed dials)
	skipped   int64 // checks not sent because the breaker was open
	fallbacks int64 // requests decided by the local fallback
	closed    int64 // requests refused with 503 (failureMode closed)

	lazyMu        sync.Mutex   // guards what is made on first use: leases, charges
	leases        *leaseTable  // made on first use (leasesOf)
	giveBacksLost int64        // leases whose give-back failed
	charges       *chargeQueue // response costs to charge (costs.go), made on first use
}

// check asks Redis, through the breaker, for decision d, with the caller's
// timeout and breaker settings, and records the outcome (redisCheck).
func (b *backend) check(cmd *redis.Command, key string, d []int64, o *config.RedisSettings, hb *heartbeat) error {
	return redisCheck(b, cmd, key, d, o, hb)
}

// redisCheck is backend.check, written for the hot path (see
// Tollgate.ServeHTTP): the common case, a standalone Redis with its breaker
// closed, is a plain function with the breaker's bookkeeping inlined;
// topologies, an open breaker and failures are out of line. (A check that
// succeeds after the breaker opened leaves it to the prober to close.)
//
// hb, when not nil, is the caller's class heartbeat: a successful check
// starts one when it is due (heartbeat.go).
func redisCheck(b *backend, cmd *redis.Command, key string, d []int64, o *config.RedisSettings, hb *heartbeat) error {
	ns := int64(time.Since(processStart)) + monoOrigin // clock.Mono(), inlined
	atomic.StoreInt64(&b.lastUsed, ns)
	if b.pool == nil || atomic.LoadInt64(&b.breaker.nextProbe) != 0 {
		if skipping(b, ns) {
			return errBreakerOpen
		}
		return b.checkOther(cmd, key, d, o, hb, ns)
	}
	if err := redis.PoolCheck(b.pool, cmd, key, d, o.Timeout, ns); err != nil {
		b.failedCheck(ns, err, o)
		return err
	}
	if ns-atomic.LoadInt64(&b.breaker.window) >= breakerWindow || ns&(histSample-1) == 0 || hb != nil && ns-atomic.LoadInt64(&hb.last) >= o.HeartbeatNS {
		b.tick(hb, ns, o)
	}
	atomic.AddInt64(&b.breaker.checks, 1)
	return nil
}

// tick is redisCheck's rare bookkeeping after a success begun at ns: the
// breaker's window rolled, the check timed (the clock's low bits pick one
// in metrics.HistSample), a heartbeat due.
func (b *backend) tick(hb *heartbeat, ns int64, o *config.RedisSettings) {
	if ns&(histSample-1) == 0 {
		b.metrics.Observe(b.now() - ns)
	}
	b.breaker.roll(ns)
	if hb != nil && ns-atomic.LoadInt64(&hb.last) >= o.HeartbeatNS {
		b.beat(hb, ns, o)
	}
}

// skipping reports, and counts, a check the open breaker does not send,
// in the common case (standalone, not yet due for a probe, the prober
// running): the fallback path's frame stays small. Everything else is
// checkOther's.
func skipping(b *backend, ns int64) bool {
	if atomic.LoadInt64(&b.breaker.nextProbe) > ns && b.pool != nil && atomic.LoadInt32(&b.probing) == 1 {
		atomic.AddInt64(&b.skipped, 1)
		return true
	}
	return false
}

// checkOther is redisCheck for a topology (sentinel, cluster) or while
// the breaker is open.
func (b *backend) checkOther(cmd *redis.Command, key string, d []int64, o *config.RedisSettings, hb *heartbeat, ns int64) error {
	if atomic.LoadInt64(&b.breaker.nextProbe) != 0 && !b.breaker.allow(ns, o.ProbeNS) {
		b.skip()
		return errBreakerOpen
	}
	if err := b.rc.Check(cmd, key, d, o.Timeout); err != nil {
		b.failedCheck(ns, err, o)
		return err
	}
	b.breaker.success(ns)
	b.tick(hb, ns, o)
	return nil
}

// skip counts a check the open breaker did not send, and makes sure the
// breaker probes by itself.
func (b *backend) skip() {
	atomic.AddInt64(&b.skipped, 1)
	if b.base.Mode != modeStandalone {
		b.rc.Touch()   // a skipped check keeps the sentinel watcher running
		b.rc.Refresh() // a promoted replica lets the next probe through (internal/redis)
	}
	b.startProber()
}

// podFault reports an error that says nothing about Redis's health but
// about the pod's own state or knowledge: the check falls back without
// counting against Redis.
func podFault(err error) bool {
	return err == redis.ErrNoRoute || err == redis.ErrQueueFull || err == errBreakerOpen
}

// failedCheck records a failed check begun at start (timed when the
// clock's low bits pick it, as tick does).
func (b *backend) failedCheck(start int64, err error, o *config.RedisSettings) {
	now := b.now()
	if start&(histSample-1) == 0 {
		b.metrics.Observe(now - start)
	}
	b.failed(now, err, o)
}

// failed records a failed check at ns. A check without a connection because
// dials fail (redis.ErrDialFailed) counts like any other; the failed dial was
// counted and logged, with its cause, by dialFailed.
func (b *backend) failed(ns int64, err error, o *config.RedisSettings) {
	if b.base.Mode != modeStandalone && err != redis.ErrQueueFull {
		b.rc.Refresh() // a node down, a failover, a slot moved
	}
	if err != errBreakerOpen {
		atomic.AddInt64(&b.metrics.Errors[redis.Kind(err)], 1)
	}
	if !podFault(err) {
		atomic.AddInt64(&b.failures, 1)
		if b.breaker.failure(ns, o.BreakerThreshold, o.ProbeNS) {
			b.rc.SuspectAll() // every node's connections prove themselves again
			b.startProber()
		}
	}
	if err != redis.ErrDialFailed {
		b.logFailure(ns, err, o)
	}
}

// dialFailed counts a dial that failed outside any check (see dialAsync)
// against Redis, with the latest New's breaker settings (a standalone
// Redis's breaker; a topology's node is judged by its checks).
func (b *backend) dialFailed(err error) {
	set := b.latest()
	ns := b.now()
	atomic.AddInt64(&b.failures, 1)
	atomic.AddInt64(&b.metrics.Errors[kindDial], 1)
	b.logFailure(ns, err, &set)
	if b.base.Mode != modeStandalone {
		// A node that failed over: the checks waiting for this dial learn
		// the topology and go to its heir (topologyCheck); they count
		// against the breaker only if they fail there too.
		b.rc.Refresh()
		return
	}
	if b.breaker.failure(ns, set.BreakerThreshold, set.ProbeNS) {
		b.rc.SuspectAll()
		b.startProber()
	}
}

// used returns when the backend was last used, monotonic ns: by a check,
// or by its client alone (a topology's check, a region exchange's side
// command, Touch).
func (b *backend) used() int64 {
	u := atomic.LoadInt64(&b.lastUsed)
	if c := b.rc.LastUsed(); c > u {
		return c
	}
	return u
}

// latest returns the latest New's settings.
func (b *backend) latest() config.RedisSettings {
	b.setMu.Lock()
	defer b.setMu.Unlock()
	return b.set
}

func (b *backend) logFailure(now int64, err error, o *config.RedisSettings) {
	last := atomic.LoadInt64(&b.lastLog)
	if last != 0 && now-last < o.ProbeNS || !atomic.CompareAndSwapInt64(&b.lastLog, last, now) {
		return
	}
	state := "closed"
	if b.breaker.isOpen() {
		state = "open"
	}
	log.Printf("tollgate: redis %s unavailable, falling back to local limits (breaker %s, %d of the last second's %d checks failed, %d failures in all): %s",
		b.rc.Describe(), state, atomic.LoadInt64(&b.breaker.failures), atomic.LoadInt64(&b.breaker.checks), atomic.LoadInt64(&b.failures), oneLine(err.Error()))
}

// oneLine escapes the line breaks of s: an error may carry a node's
// address or reply, which a hostile node could make forge a log line.
func oneLine(s string) string {
	return strings.NewReplacer("\r", `\r`, "\n", `\n`).Replace(s)
}

// startProber starts probeLoop unless it runs.
func (b *backend) startProber() {
	if atomic.CompareAndSwapInt32(&b.probing, 0, 1) {
		go b.probeLoop()
	}
}

// probeLoop probes Redis while the breaker is open, every probeInterval,
// without waiting for traffic: so the first request after Redis returns
// is decided by Redis again. It ends when the breaker closes, or after
// watchIdle without checks (the next check that finds the breaker open
// starts it again). A panic (see dialSafe) ends it.
func (b *backend) probeLoop() {
	defer func() {
		if r := recover(); r != nil {
			log.Printf("tollgate: redis %s: probing: recovered from a panic: %v", b.rc.Describe(), r)
		}
		atomic.StoreInt32(&b.probing, 0)
	}()
	for !b.idleFor(watchIdle) {
		next := atomic.LoadInt64(&b.breaker.nextProbe)
		if next == 0 {
			return
		}
		set := b.latest()
		ns := b.now()
		if ns < next {
			time.Sleep(time.Duration(next - ns))
			continue
		}
		if !b.breaker.allow(ns, set.ProbeNS) {
			continue // a check took this probe
		}
		if err := b.rc.Probe(set.Timeout); err != nil { // a PING on a fresh connection to every node
			b.logFailure(b.now(), fmt.Errorf("probing: %w", err), &set)
			continue
		}
		b.breaker.success(b.now())
		log.Printf("tollgate: redis %s answers again: breaker closed, global limits restored", b.rc.Describe())
		return
	}
}

// idleFor reports whether no check used the backend for d.
func (b *backend) idleFor(d time.Duration) bool {
	return b.now()-b.used() > int64(d)
}

// backendStats are a backend's counters since the process started.
type backendStats struct {
	Failures  int64 // checks that failed (error or timeout)
	Skipped   int64 // checks not sent: breaker open
	Fallbacks int64 // requests decided by the local fallback
	Closed    int64 // requests refused with 503 (failureMode closed)
	Lost      int64 // leases whose give-back failed (lease.go)
	Open      int   // connections open to Redis
	Breaker   bool  // the breaker is open
}

func (b *backend) stats() backendStats {
	open := b.rc.OpenConns()
	return backendStats{
		Failures:  atomic.LoadInt64(&b.failures),
		Skipped:   atomic.LoadInt64(&b.skipped),
		Fallbacks: atomic.LoadInt64(&b.fallbacks),
		Closed:    atomic.LoadInt64(&b.closed),
		Lost:      atomic.LoadInt64(&b.giveBacksLost),
		Open:      open,
		Breaker:   b.breaker.isOpen(),
	}
}

// heartbeatFor returns the class's heartbeat on this backend, creating it
// on first use.
func (b *backend) heartbeatFor(class string, now int64) *heartbeat {
	b.beatsMu.Lock()
	defer b.beatsMu.Unlock()
	if hb, ok := b.beats[class]; ok {
		return hb
	}
	if len(b.beats) >= maxHeartbeats {
		for k, hb := range b.beats {
			if now-atomic.LoadInt64(&hb.last) > int64(time.Hour) {
				delete(b.beats, k)
			}
		}
	}
	hb := &heartbeat{key: "tg{hb:" + class + "}"}
	if b.beats == nil {
		b.beats = make(map[string]*heartbeat)
	}
	b.beats[class] = hb
	return hb
}

// beat asks for a heartbeat of hb at ns (Unix ns) unless another caller
// just did, and starts the backend's heartbeat goroutine unless it runs:
// one goroutine per Redis sends every class asked for in one batch, so
// many classes cost one connection and one round trip or two.
func (b *backend) beat(hb *heartbeat, ns int64, o *config.RedisSettings) {
	last := atomic.LoadInt64(&hb.last)
	if ns-last < o.HeartbeatNS || !atomic.CompareAndSwapInt64(&hb.last, last, ns) {
		return
	}
	atomic.StoreInt64(&hb.ttlMS, 3*o.HeartbeatNS/int64(time.Millisecond))
	atomic.StoreInt32(&hb.due, 1)
	if atomic.CompareAndSwapInt32(&b.beating, 0, 1) {
		go b.beatLoop()
	}
}

// beatLoop sends the heartbeats asked for until none is left, then ends.
// A panic (see dialSafe) ends it and lets the next beat start another.
func (b *backend) beatLoop() {
	defer func() {
		_ = recover()
		atomic.StoreInt32(&b.beating, 0)
	}()
	for {
		batch := b.dueBeats()
		if len(batch) == 0 {
			atomic.StoreInt32(&b.beating, 0)
			// One asked for between dueBeats and the store above would
			// otherwise wait for the next interval.
			if !b.anyDue() || !atomic.CompareAndSwapInt32(&b.beating, 0, 1) {
				return
			}
			continue
		}
		b.sendBeats(batch)
	}
}

// sendBeats sends a batch of heartbeats, to each key's node.
func (b *backend) sendBeats(batch []*heartbeat) {
	now := b.now()
	if b.pool != nil {
		heartbeatOn(b.pool, batch, now)
		return
	}
	byNode := map[*redis.Pool][]*heartbeat{}
	for _, hb := range batch {
		if c := b.rc.NodeFor(hb.key); c != nil {
			byNode[c] = append(byNode[c], hb)
		}
	}
	for c, hbs := range byNode {
		heartbeatOn(c, hbs, now)
	}
}

// dueBeats takes the heartbeats asked for.
func (b *backend) dueBeats() []*heartbeat {
	b.beatsMu.Lock()
	defer b.beatsMu.Unlock()
	var batch []*heartbeat
	for _, hb := range b.beats {
		if atomic.CompareAndSwapInt32(&hb.due, 1, 0) {
			batch = append(batch, hb)
		}
	}
	return batch
}

// anyDue reports whether a heartbeat is asked for.
func (b *backend) anyDue() bool {
	b.beatsMu.Lock()
	defer b.beatsMu.Unlock()
	for _, hb := range b.beats {
		if atomic.LoadInt32(&hb.due) == 1 {
			return true
		}
	}
	return false
}

// chargesOf returns b's charge queue, made on first use.
func chargesOf(b *backend) *chargeQueue {
	b.lazyMu.Lock()
	defer b.lazyMu.Unlock()
	if b.charges == nil {
		b.charges = &chargeQueue{rc: b.rc, br: b.breaker}
	}
	return b.charges
}
