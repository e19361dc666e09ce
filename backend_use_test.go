package tollgate

// What keeps a backend in use: its checks, and what its client does
// without them (a region exchange's side commands, checks the open
// breaker skips). Both failed on the first layout with internal packages.

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// A region's exchange keeps its Redis in use (its own and its peers'), as
// the checks do: a backend used by the exchange alone is not reclaimed by
// the next New of another connection.
func TestExchangeKeepsBackendsInUse(t *testing.T) {
	own, peer := redistest.Start(t), redistest.Start(t)
	tg := handlerOn(t, own, func(c *config.Config) {
		c.Class = uniqueName("region")
		c.Region = &config.RegionConfig{Name: "a", Interval: "100ms", Peers: []config.PeerConfig{{Name: "b", Endpoints: []string{peer}}}}
	})
	var pb *backend
	shared.mu.Lock()
	for _, b := range shared.backends {
		if b.base.Addr == peer {
			pb = b
		}
	}
	shared.mu.Unlock()
	if pb == nil {
		t.Fatal("no backend for the peer's Redis")
	}
	x := exchangerOf(tg)
	long := shared.now() - int64(backendIdle) - 1 // backendIdle without a check
	atomic.StoreInt64(&tg.be.lastUsed, long)
	atomic.StoreInt64(&pb.lastUsed, long)
	mark := clock.Mono()
	st := x.Stats()
	n := st.OK + st.Failed
	redistest.WaitFor(t, func() bool { st := x.Stats(); return st.OK+st.Failed >= n+2 }, "two exchanges")
	if tg.be.used() <= mark {
		t.Error("the own region's backend: the exchange's side commands left it unused")
	}
	if pb.used() <= mark {
		t.Error("the peer's backend: the exchange's reads left it unused")
	}
	handlerOn(t, own, nil) // another connection's New reclaims idle backends
	shared.mu.Lock()
	kept := false
	for _, b := range shared.backends {
		kept = kept || b == pb
	}
	shared.mu.Unlock()
	if !kept {
		t.Error("the peer's backend, in use by the exchange, was reclaimed")
	}
}

// The sentinel watcher runs while checks come: a check the open breaker
// skips is one (the watcher's idle clock, the client's LastUsed, moves).
func TestSkippedCheckKeepsSentinelWatcher(t *testing.T) {
	set := config.RedisSettings{Mode: redis.Sentinel, Endpoints: []string{"127.0.0.1:" + redistest.FreePort(t)}, MasterName: "m",
		Timeout: 5 * time.Millisecond, PoolSize: 1, ProbeNS: int64(time.Hour)}
	b := &backend{base: set, breaker: &breaker{}, now: clock.Mono, set: set, lastUsed: clock.Mono()}
	if err := connect(b, set); err != nil {
		t.Fatal(err)
	}
	atomic.StoreInt64(&b.breaker.nextProbe, clock.Mono()+int64(time.Hour)) // open, no probe due
	atomic.StoreInt32(&b.probing, 1)                                       // as if the prober ran
	before := b.rc.LastUsed()
	time.Sleep(2 * time.Millisecond)
	cmd := newCommand([]*config.Policy{{Shard: bucket.Limit{Interval: 1, Burst: 1, Cost: 1}}}, 14)
	if err := redisCheck(b, cmd, "tg{0123456789}", make([]int64, 4), &set, nil); err != errBreakerOpen {
		t.Fatalf("check: %v, want the breaker open", err)
	}
	if b.rc.LastUsed() == before {
		t.Error("a check skipped by the open breaker left the client idle: the sentinel watcher ends after watchIdle of such checks")
	}
}
