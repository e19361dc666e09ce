package tollgate

// Process-wide resources. Traefik calls New once per router and again on
// every configuration reload, and never closes what it built. So nothing is
// owned by a handler: Redis connection pools, their circuit breakers and the
// fallback buckets live here, shared by every handler with the same
// settings. This is the one piece of package-level state, and it is bounded:
//   - backends: one per distinct Redis connection (address, credentials,
//     database, TLS); timeouts, pool size and breaker settings are the
//     caller's, so a reload that changes them reuses the pool. A backend no
//     handler has used for backendIdle has its connections closed at the
//     next New and is forgotten (a handler still holding it re-dials).
//   - local buckets: one bounded store (maxLocalBuckets), see localBuckets.
// No goroutine runs for ever: reclaiming happens inside New, and every
// goroutine the plugin starts ends by itself: dials (redisClient.dialAsync;
// at most poolSize per node, each within its dial budget), heartbeat
// batches (backend.beatLoop; one per Redis, until nothing is due), topology
// refreshes (backend.refreshNow; one per deployment, one round of queries)
// and the sentinel watcher (backend.watchSentinels; ends after watchIdle
// without checks).

import (
	"crypto/tls"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

const (
	maxLocalBuckets = 100000
	backendIdle     = 10 * time.Minute
)

// registry holds the shared resources.
type registry struct {
	now func() time.Time

	mu       sync.Mutex // guards backends
	backends map[string]*backend
	locals   *localStores
}

// shared is the process's registry.
var shared = newRegistry()

func newRegistry() *registry {
	return &registry{now: time.Now, backends: make(map[string]*backend), locals: newLocalStores()}
}

// backend returns the backend for set's connection, creating it on first
// use, and reclaims backends left idle by reloads. The latest poolSize wins.
func (r *registry) backend(set redisSettings) (*backend, error) {
	key := set.connKey()
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, b := range r.backends {
		if k != key && now.UnixNano()-atomic.LoadInt64(&b.lastUsed) > int64(backendIdle) {
			for _, c := range b.clients() {
				c.closeIdle()
			}
			delete(r.backends, k)
		}
	}
	if b, ok := r.backends[key]; ok {
		atomic.StoreInt64(&b.lastUsed, now.UnixNano())
		for _, c := range b.clients() {
			c.setPoolSize(set.poolSize)
		}
		b.setMu.Lock()
		b.set = set
		b.setMu.Unlock()
		return b, nil
	}
	b := &backend{
		base:     set,
		breaker:  &breaker{},
		now:      time.Now,
		lastUsed: now.UnixNano(),
		set:      set,
	}
	if set.mode == modeStandalone {
		client, err := newRedisClient(set)
		if err != nil {
			return nil, err
		}
		client.onDialError = func(err error) { b.dialFailed(err) }
		b.client = client
		client.warm()
	} else {
		if set.useTLS {
			conf, err := tlsConfig(set)
			if err != nil {
				return nil, err
			}
			conf.ServerName = "" // nodes are verified by their own address (dialOptions)
			b.tlsConf = conf
		}
		b.topo.nodes = make(map[string]*redisClient)
		b.refresh() // learns the topology off the request's clock
	}
	r.backends[key] = b
	return b, nil
}

// backend is one Redis deployment (a server, a Sentinel-managed primary,
// or a Cluster) with its pools, breaker and counters. Safe for concurrent
// use; counters are updated atomically.
type backend struct {
	client  *redisClient  // standalone: the server's pool; nil otherwise
	topo    topology      // sentinel and cluster: the nodes (topology.go)
	base    redisSettings // the first New's: its mode, endpoints and credentials make the backend
	tlsConf *tls.Config   // sentinel and cluster with TLS: for topology queries, naming no server
	breaker *breaker
	now     func() time.Time

	setMu sync.Mutex
	set   redisSettings // the latest New's, for failures outside a check (dials)

	beatsMu sync.Mutex
	beats   map[string]*heartbeat // by class (heartbeat.go)
	beating int32                 // 1 while beatLoop runs

	lastUsed int64 // Unix ns of the last check
	lastLog  int64 // Unix ns of the last failure logged

	// counters (Redis counts the checks it answers: INFO commandstats)
	failures  int64 // failures counted against Redis (errors, timeouts, failed dials)
	skipped   int64 // checks not sent because the breaker was open
	fallbacks int64 // requests decided by the local fallback
	closed    int64 // requests refused with 503 (failureMode closed)
}

// check asks Redis, through the breaker, for decision d, with the caller's
// timeout and breaker settings, and records the outcome. The
// closed-breaker test is inlined; failures are handled by failed (the hot
// path stays small, see Tollgate.ServeHTTP).
//
// hb, when not nil, is the caller's class heartbeat: a successful check
// starts one when it is due (heartbeat.go).
func (b *backend) check(cmd *command, key string, d []int64, o *redisSettings, hb *heartbeat) error {
	now := b.now()
	ns := now.UnixNano()
	atomic.StoreInt64(&b.lastUsed, ns)
	if atomic.LoadInt64(&b.breaker.nextProbe) != 0 && !b.breaker.allow(ns, o.probeNS) {
		atomic.AddInt64(&b.skipped, 1)
		if b.base.mode != modeStandalone {
			b.refresh() // a promoted replica lets the next probe through (topology.go)
		}
		return errBreakerOpen
	}
	var err error
	if b.base.mode == modeStandalone {
		err = b.client.check(cmd, key, d, now, ns, o.timeout)
	} else {
		err = b.topologyCheck(cmd, key, d, now, ns, o)
	}
	if err != nil {
		b.failed(ns, err, o)
	} else {
		b.breaker.success(ns)
		if hb != nil && ns-atomic.LoadInt64(&hb.last) >= o.heartbeatNS {
			b.beat(hb, ns, o)
		}
	}
	return err
}

// failed records a failed check.
func (b *backend) failed(ns int64, err error, o *redisSettings) {
	// A connection still being dialled, every connection busy, or a check
	// that reached its connection after its deadline is the pod's own state
	// (a cold pool under a burst, a starved CPU), not Redis's health: the
	// request falls back but the breaker does not count it. A failed dial
	// was counted when it failed (dialFailed).
	if err == errDialFailed {
		return // counted and logged, with its cause, by dialFailed
	}
	if b.base.mode != modeStandalone && err != errLate && err != errPoolExhausted {
		b.refresh() // a node down, a failover, a slot moved
	}
	if err != errDialing && err != errPoolExhausted && err != errLate && err != errNoRoute {
		b.breaker.failure(ns, o.breakerThreshold, o.probeNS)
		atomic.AddInt64(&b.failures, 1)
	}
	b.logFailure(ns, err, o)
}

// dialFailed counts a dial that failed outside any check (see dialAsync)
// against Redis, with the latest New's breaker settings.
func (b *backend) dialFailed(err error) {
	b.setMu.Lock()
	set := b.set
	b.setMu.Unlock()
	ns := b.now().UnixNano()
	b.breaker.failure(ns, set.breakerThreshold, set.probeNS)
	atomic.AddInt64(&b.failures, 1)
	b.logFailure(ns, err, &set)
	if b.base.mode != modeStandalone {
		b.refresh()
	}
}

func (b *backend) logFailure(now int64, err error, o *redisSettings) {
	last := atomic.LoadInt64(&b.lastLog)
	if now-last < o.probeNS || !atomic.CompareAndSwapInt64(&b.lastLog, last, now) {
		return
	}
	state := "closed"
	if b.breaker.isOpen() {
		state = "open"
	}
	log.Printf("tollgate: redis %s unavailable, falling back to local limits (breaker %s, %d of the last second's %d checks failed, %d failures in all): %v",
		b.describe(), state, atomic.LoadInt64(&b.breaker.failures), atomic.LoadInt64(&b.breaker.checks), atomic.LoadInt64(&b.failures), err)
}

// backendStats are a backend's counters since the process started.
type backendStats struct {
	Failures  int64 // checks that failed (error or timeout)
	Skipped   int64 // checks not sent: breaker open
	Fallbacks int64 // requests decided by the local fallback
	Closed    int64 // requests refused with 503 (failureMode closed)
	Open      int   // connections open to Redis
	Breaker   bool  // the breaker is open
}

// clients returns the pools of every node in use.
func (b *backend) clients() []*redisClient {
	if b.base.mode == modeStandalone {
		return []*redisClient{b.client}
	}
	b.topo.mu.Lock()
	defer b.topo.mu.Unlock()
	var cs []*redisClient
	for _, c := range b.topo.nodes {
		cs = append(cs, c)
	}
	return cs
}

// describe names the deployment in logs.
func (b *backend) describe() string {
	switch b.base.mode {
	case modeSentinel:
		return fmt.Sprintf("sentinel master %q (sentinels %s)", b.base.masterName, strings.Join(b.base.endpoints, ","))
	case modeCluster:
		return "cluster (seeds " + strings.Join(b.base.endpoints, ",") + ")"
	}
	return b.base.addr
}

func (b *backend) stats() backendStats {
	open := 0
	for _, c := range b.clients() {
		c.mu.Lock()
		open += c.open
		c.mu.Unlock()
	}
	return backendStats{
		Failures:  atomic.LoadInt64(&b.failures),
		Skipped:   atomic.LoadInt64(&b.skipped),
		Fallbacks: atomic.LoadInt64(&b.fallbacks),
		Closed:    atomic.LoadInt64(&b.closed),
		Open:      open,
		Breaker:   b.breaker.isOpen(),
	}
}
