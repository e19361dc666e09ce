package redis

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
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

	lastUsed int64 // monotonic ns of the last topology check or side command
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

// New returns a Client of the deployment opts describe; nothing is dialled
// before Start or the first check.
func New(opts Options, hooks Hooks) *Client {
	rc := &Client{opts: opts, hooks: hooks, now: clock.Mono, lastUsed: clock.Mono()}
	if opts.Mode == Standalone {
		rc.pool = NewPool(opts)
		rc.pool.onDialError = func(err error) { rc.dialFailed(err) }
		return rc
	}
	rc.topo.nodes = make(map[string]*Pool)
	return rc
}

// Start dials a standalone server's first connection, or learns the
// topology, off the caller's clock: the hooks may be called from then on.
func (rc *Client) Start() {
	if rc.pool != nil {
		rc.pool.Warm()
		return
	}
	rc.Refresh()
}

func (rc *Client) dialFailed(err error) {
	rc.hooks.dialFailed(err)
}

// Pool returns a standalone server's pool (the hot path's: PoolCheck),
// nil for a topology.
func (rc *Client) Pool() *Pool { return rc.pool }

// Mode returns Options.Mode.
func (rc *Client) Mode() int { return rc.opts.Mode }

// Check runs cmd for key on the key's node and decodes its reply into d:
// a topology's check (Sentinel, Cluster), following one redirection; a
// standalone server's goes to its pool (PoolCheck). The errors: see
// PoolCheck, and ErrNoRoute while the key's node is unknown.
func (rc *Client) Check(cmd *Command, key string, d []int64, timeout time.Duration) error {
	if rc.pool != nil {
		return rc.pool.check(cmd, key, d, timeout)
	}
	atomic.StoreInt64(&rc.lastUsed, rc.now())
	return rc.topologyCheck(cmd, key, d, timeout)
}

// NodeFor returns the pool of the node that serves key (the server in
// standalone mode); nil while a topology is unknown.
func (rc *Client) NodeFor(key string) *Pool {
	if rc.pool != nil {
		return rc.pool
	}
	return rc.route(key)
}

// SideDo runs cmds (n commands in RESP, pipelined; AppendCommand writes
// them) on the side connection of key's node and returns the n replies
// (see Pool.SideDo).
func (rc *Client) SideDo(key string, cmds []byte, n int) ([][]string, error) {
	c := rc.NodeFor(key)
	if c == nil {
		return nil, ErrNoRoute
	}
	atomic.StoreInt64(&rc.lastUsed, rc.now())
	return c.SideDo(cmds, n)
}

// Pools returns the pools of every node in use.
func (rc *Client) Pools() []*Pool {
	if rc.pool != nil {
		return []*Pool{rc.pool}
	}
	rc.topo.mu.Lock()
	defer rc.topo.mu.Unlock()
	cs := make([]*Pool, 0, len(rc.topo.nodes))
	for _, c := range rc.topo.nodes {
		cs = append(cs, c)
	}
	return cs
}

// SuspectAll makes every node's connections prove themselves (a PING)
// before they carry a check again: something (the breaker opening) says
// Redis may have restarted or failed over since they last answered.
func (rc *Client) SuspectAll() {
	for _, c := range rc.Pools() {
		c.suspect()
	}
}

// CloseIdle closes every node's idle connections.
func (rc *Client) CloseIdle() {
	for _, c := range rc.Pools() {
		c.CloseIdle()
	}
}

// SetPoolSize changes the cap on each node's connections.
func (rc *Client) SetPoolSize(n int) {
	for _, c := range rc.Pools() {
		c.SetPoolSize(n)
	}
}

// Probe checks that every node in use answers a PING on a fresh
// connection within timeout, the topology read first.
func (rc *Client) Probe(timeout time.Duration) error {
	if rc.pool == nil {
		rc.RefreshSync()
	}
	cs := rc.Pools()
	if len(cs) == 0 {
		return ErrNoRoute
	}
	for _, c := range cs {
		if err := c.probe(timeout); err != nil {
			return err
		}
	}
	return nil
}

// OpenConns counts the connections open to every node.
func (rc *Client) OpenConns() int {
	n := 0
	for _, c := range rc.Pools() {
		n += c.OpenConns()
	}
	return n
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

// LastUsed returns when a topology check or side command last used the
// client (monotonic ns).
func (rc *Client) LastUsed() int64 { return atomic.LoadInt64(&rc.lastUsed) }
