package redis

// A Client's state: its options and hooks, its pool or its topology, and
// how it names itself in logs.

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Client is one Redis deployment: a server, a Sentinel-managed primary,
// or a Cluster, as a Pool per node and the map from keys to nodes
// (topology.go).
//
// Safe for concurrent use. A Client starts no goroutine that outlives its
// work: dials end within their budget, a topology refresh after one round
// of queries, the sentinel watcher after watchIdle without checks. It has
// no Close: CloseIdle closes what is idle, and a Client nobody calls holds
// one idle connection per node at most.
type Client struct {
	opts  Options
	hooks Hooks
	pool  *Pool    // Standalone: the server's; nil otherwise
	topo  topology // Sentinel and Cluster
	now   func() int64

	lastUsed int64 // monotonic ns of the last topology check, side command or Touch; 0: none
}

// Hooks are what a Client tells its owner, from any goroutine; each may
// be nil.
type Hooks struct {
	// DialFailed is a dial that failed outside any check (a check that
	// waited for it fails with ErrDialFailed).
	DialFailed func(err error)
	// Changed is a topology that changed: a new primary, slots moved.
	Changed func()
	// RefreshFailed is a topology refresh that failed.
	RefreshFailed func(err error)
}

func (h *Hooks) dialFailed(err error) {
	if h.DialFailed != nil {
		h.DialFailed(err)
	}
}

func (h *Hooks) changed() {
	if h.Changed != nil {
		h.Changed()
	}
}

func (h *Hooks) refreshFailed(err error) {
	if h.RefreshFailed != nil {
		h.RefreshFailed(err)
	}
}

// newPool returns the pool of the node at addr, its failed dials told to
// the owner (Hooks.DialFailed).
func (rc *Client) newPool(addr string) *Pool {
	opts := rc.opts
	opts.Addr = addr
	c := NewPool(opts)
	c.onDialError = func(err error) { rc.hooks.dialFailed(err) }
	return c
}

// Describe names the deployment in logs.
func (rc *Client) Describe() string {
	switch rc.opts.Mode {
	case Sentinel:
		return fmt.Sprintf("sentinel master %q (sentinels %s)", rc.opts.MasterName, strings.Join(rc.opts.Endpoints, ","))
	case Cluster:
		return "cluster (seeds " + strings.Join(rc.opts.Endpoints, ",") + ")"
	}
	return rc.opts.Addr
}

// idleFor reports whether no topology check or side command used the
// client for d.
func (rc *Client) idleFor(d time.Duration) bool {
	return rc.now()-atomic.LoadInt64(&rc.lastUsed) > int64(d)
}

// LastUsed returns when a topology check, a side command or Touch last
// used the client (monotonic ns).
func (rc *Client) LastUsed() int64 { return atomic.LoadInt64(&rc.lastUsed) }

const (
	// minRefresh spaces topology refreshes.
	minRefresh = 250 * time.Millisecond
	// watchIdle ends the sentinel watcher after this long without checks.
	watchIdle = time.Minute
)

// topology is a client's map from keys to nodes. Guarded by its mu.
type topology struct {
	mu      sync.Mutex
	nodes   map[string]*Pool // by address, every node in use
	primary *Pool            // sentinel: the current primary
	slots   []*Pool          // cluster: owner by slot; nil until known
	extra   []string         // nodes named only by redirections, oldest first

	refreshing  int32 // 1 while a refresh runs
	lastRefresh int64 // Unix ns of the last refresh started
	learnt      int64 // monotonic ns when the last refresh succeeded
	watching    int32 // 1 while the sentinel watcher runs
}

// Touch marks the client used now: a check its owner did not send (an
// open breaker's) keeps the sentinel watcher running, as a sent one does.
func (rc *Client) Touch() { atomic.StoreInt64(&rc.lastUsed, rc.now()) }
