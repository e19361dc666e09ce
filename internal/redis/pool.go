package redis

// The pool: the connections to one Redis node, shared by every check in
// flight (wire.go). A check takes an idle connection and runs alone on it
// (solo, the interpreter's cheapest path); when none is idle it pipelines
// on the least busy one, and when that one carries growAt calls per open
// connection and fewer than poolSize are open, one more is dialled off the
// request's clock. So concurrency never waits for a dial or for a free
// connection, a burst at a pod that just started, scaled up or reconnected
// is answered by Redis, and a few connections carry hundreds of checks at
// once. Connections unused for idleTimeout are closed (all but one).
//
// Only when no connection is open at all (New's warm-up dial not done yet,
// or every connection dropped by a Redis restart) does a check wait, for
// the dial in progress, within the dial budget: the dial reaches Redis, so
// a Redis that is down or unreachable answers that wait with a failure.
// For a dial budget after a failed dial, checks fail at once
// (ErrDialFailed); a new dial is tried off the request's clock, one at a
// time. A connection that may have outlived its Redis carries no check
// before it answers a PING (stale.go).

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
)

// idleTimeout closes connections unused for this long (the last one
// stays).
const idleTimeout = time.Minute

// growAt sets when the pool grows: when its least busy connection has
// growAt calls in flight per connection open. So n connections carry
// about growAt*n*n checks at once before one more is dialled: a few
// connections for a burst of hundreds, up to poolSize. (1, not more:
// under Yaegi a check alone on an idle connection costs less than one
// pipelined behind others, so a few more connections pay.)
const growAt = 1

// pruneEvery spaces the pool's looks for idle connections.
const pruneEvery = int64(time.Second)

// Pool is the pool of connections to one Redis node.
//
// The zero value is not usable; use newPool. Safe for concurrent
// use. At most poolSize connections are open or being dialled; each
// carries any number of checks at once (up to maxQueue). Connections
// unused for idleTimeout are closed, all but one. No goroutine runs but
// the dials, each ending within its budget.
type Pool struct {
	opts Options
	now  func() time.Time // time.Now: the checks' deadlines; injected in tests
	mono func() int64     // clock.Mono: idle ages

	dialTimeout time.Duration
	watch       time.Duration // a reader's idle watch (idleWatch; shorter in tests)
	onDialError func(error)   // set once before use; counts a failed dial

	mu         sync.Mutex // guards the fields below
	dialDone   *sync.Cond // broadcast when a dial or a proof ends
	conns      []*rconn   // open connections (not those being proven)
	poolSize   int
	dialing    int   // dials in progress
	proving    int   // connections out of conns while a PING proves them (stale.go)
	forgotten  bool  // the topology no longer uses this node: no connection rejoins it
	dialEnds   int64 // dials ended, for a check waiting for one
	dialFailed bool  // the last dial failed, or a connection stopped answering; no dial succeeded since
	dialCut    bool  // the last dial failed with its connection cut (EOF, a reset): Redis is there
	silentAt   int64 // monotonic ns when Redis last went silent: a dial timed out, a connection went stale
	epoch      int64 // bumped when the connections may have outlived their Redis (stale.go)
	lastPrune  int64 // monotonic ns
	answered   int64 // monotonic ns when a reply last came on any connection (atomic; expire)

	sideMu    sync.Mutex // guards side
	side      *rconn     // the side connection (side.go): commands outside the checks
	sideStale int32      // 1: CloseIdle asked for side to be closed
}

// NewPool returns the pool of connections to opts.Addr. Nothing is dialled
// before the first check or Warm.
func NewPool(opts Options) *Pool {
	c := &Pool{opts: opts, now: time.Now, mono: clock.Mono, poolSize: opts.PoolSize, dialTimeout: DialTimeout(opts.Timeout), watch: idleWatch}
	c.dialDone = sync.NewCond(&c.mu)
	return c
}

// ConnStates counts the open connections, idle and busy (checks in
// flight), and the dials in progress.
func (c *Pool) ConnStates() (idle, busy, dialling int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cn := range c.conns {
		if atomic.LoadInt64(&cn.inflight) > 0 {
			busy++
		} else {
			idle++
		}
	}
	return idle, busy, int64(c.dialing)
}

// SetPoolSize changes the cap on open connections (the latest config wins).
func (c *Pool) SetPoolSize(n int) {
	c.mu.Lock()
	c.poolSize = n
	c.mu.Unlock()
}

// drop removes a dead connection from the pool; silent says it died
// waiting for Redis (a frozen or overloaded server): until a dial
// succeeds, checks finding no connection do not wait for one.
func (c *Pool) drop(cn *rconn, silent bool) {
	c.mu.Lock()
	if silent {
		c.dialFailed = true
		c.silentAt = c.mono()
	}
	for i, x := range c.conns {
		if x == cn {
			c.conns = append(c.conns[:i], c.conns[i+1:]...)
			break
		}
	}
	c.mu.Unlock()
}

// lost is told by cn's reader that cn died: it leaves the pool, and a
// death the pool did not cause (Redis closed it, a reset, a reply no call
// gets) makes its siblings suspect (stale.go): what ended it most likely
// ended them.
func (c *Pool) lost(cn *rconn) {
	dead := cn.deadErr()
	c.drop(cn, dead == errStale)
	if dead != errConnDead && !replyFault(dead) {
		c.suspect()
	}
}

// holds reports whether cn is one of the pool's connections.
func (c *Pool) holds(cn *rconn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range c.conns {
		if x == cn {
			return true
		}
	}
	return false
}

// pruneIdle closes the connections unused for idleTimeout but the first:
// after a burst, steady traffic keeps using the first ones and the rest
// would stay open for ever. Requires c.mu held.
func (c *Pool) pruneIdle(ns int64) {
	keep := c.conns[:0]
	for i, cn := range c.conns {
		if i > 0 && ns-cn.used >= int64(idleTimeout) && cn.closeIfIdle() {
			continue
		}
		keep = append(keep, cn)
	}
	for i := len(keep); i < len(c.conns); i++ {
		c.conns[i] = nil
	}
	c.conns = keep
}

// CloseIdle closes every connection without a call in flight, and the
// side connection: after one turns out dead (Redis restarted), its
// siblings are dead too; and a caller reclaims an unused pool this way.
func (c *Pool) CloseIdle() {
	c.mu.Lock()
	keep := c.conns[:0]
	for _, cn := range c.conns {
		if !cn.closeIfIdle() {
			keep = append(keep, cn)
		}
	}
	for i := len(keep); i < len(c.conns); i++ {
		c.conns[i] = nil
	}
	c.conns = keep
	c.mu.Unlock()
	// A side command may hold its connection for a dial budget: never wait
	// for it here (a check may be the caller); it closes it itself.
	if c.sideMu.TryLock() {
		c.closeSide()
		c.sideMu.Unlock()
	} else {
		atomic.StoreInt32(&c.sideStale, 1)
	}
}

// closeSide closes the side connection. Requires c.sideMu held.
func (c *Pool) closeSide() {
	atomic.StoreInt32(&c.sideStale, 0)
	if c.side != nil {
		c.side.closeIfIdle()
		c.side = nil
	}
}

// OpenConns returns the number of connections open (the side one's included).
func (c *Pool) OpenConns() int {
	c.mu.Lock()
	n := len(c.conns)
	c.mu.Unlock()
	c.sideMu.Lock()
	if c.side != nil {
		n++
	}
	c.sideMu.Unlock()
	return n
}

var (
	pingCmd   = []byte("*1\r\n$4\r\nPING\r\n")
	pongReply = "+PONG\r\n"
)

// PoolSize returns the cap on open connections (SetPoolSize).
func (c *Pool) PoolSize() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.poolSize
}

// suspect marks every connection of the pool as possibly outlived by its
// Redis: each proves itself before its next check; the side connection is
// dialled again before its next use.
func (c *Pool) suspect() {
	c.mu.Lock()
	c.epoch++
	c.mu.Unlock()
	atomic.StoreInt32(&c.sideStale, 1)
}
