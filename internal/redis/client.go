// Package redis is Tollgate's Redis client: a deployment (one server, a
// Sentinel-managed primary, or a Cluster) as a pool of shared connections
// per node, and one prepared script call per check.
//
// A caller gives a Command (NewCommand: the script, the keys' shape, the
// arguments), a key, a decision slice and a timeout; it gets back the
// reply's numbers in the slice, or an error it can branch on (ErrTimeout,
// ErrBadReply, ErrQueueFull, ErrDialFailed, ErrNoRoute; Kind sorts every
// other). A standalone server's hot path is PoolCheck on Client.Pool; a
// topology's, Client.Check. Commands outside the checks (heartbeats, the
// region exchange) go on a side connection per node (SideDo).
//
// Concurrency and lifecycle: a Client and its Pools are safe for concurrent
// use. New starts nothing; Start dials a server's first connection or
// learns the topology, off the caller's clock, and from then on Hooks may
// be called from any goroutine. Every goroutine the client starts ends by
// itself (dials within their budget, a refresh after one round of queries,
// the sentinel watcher after a minute unused). There is no Close:
// CloseIdle closes what is idle. The client reads no file (TLS comes
// built in Options) and knows nothing of policies, headers or metrics.
package redis

// The client's surface: New, Start, and what its owner calls.

import (
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
)

// New returns a Client of the deployment opts describe; nothing is dialled
// before Start or the first check.
func New(opts Options, hooks Hooks) *Client {
	rc := &Client{opts: opts, hooks: hooks, now: clock.Mono}
	if opts.Mode == Standalone {
		rc.pool = rc.newPool(opts.Addr)
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
