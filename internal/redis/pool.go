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
	onDialError func(error) // set once before use; counts a failed dial

	mu         sync.Mutex // guards the fields below
	dialDone   *sync.Cond // broadcast when a dial or a proof ends
	conns      []*rconn   // open connections (not those being proven)
	poolSize   int
	dialing    int   // dials in progress
	proving    int   // connections out of conns while a PING proves them (stale.go)
	forgotten  bool  // the topology no longer uses this node: no connection rejoins it
	dialEnds   int64 // dials ended, for a check waiting for one
	dialFailed bool  // the last dial failed, or a connection stopped answering; no dial succeeded since
	silentAt   int64 // monotonic ns when Redis last went silent: a dial timed out, a connection went stale
	epoch      int64 // bumped when the connections may have outlived their Redis (stale.go)
	lastPrune  int64 // monotonic ns

	sideMu    sync.Mutex // guards side
	side      *rconn     // the side connection (side.go): commands outside the checks
	sideStale int32      // 1: CloseIdle asked for side to be closed
}

// NewPool returns the pool of connections to opts.Addr. Nothing is dialled
// before the first check or Warm.
func NewPool(opts Options) *Pool {
	c := &Pool{opts: opts, now: time.Now, mono: clock.Mono, poolSize: opts.PoolSize, dialTimeout: DialTimeout(opts.Timeout)}
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

// pick returns the least busy connection dialled at notBefore (monotonic
// ns) or later and known good, starting a dial when all are busy and the
// pool may grow. One that may have outlived its Redis is proven first (a
// PING: stale.go), and carries this check once proven. With none it waits
// for the dial or the proof in progress, and for one dial at most; it
// fails at once while Redis is silent (failingFast). Connections open,
// being proven and being dialled are at most poolSize.
func (c *Pool) pick(notBefore int64, timeout time.Duration) (*rconn, error) {
	waited := int64(-1) // the dials ended when this check began to wait for one
	c.mu.Lock()
	for {
		if c.forgotten {
			c.mu.Unlock()
			return nil, errNotSent // the topology moved on: its map has another node
		}
		ns := c.mono()
		best, suspect, busy := c.usable(notBefore, ns)
		if suspect != nil && (best == nil || atomic.LoadInt64(&best.inflight) > 0) {
			err := c.prove(suspect, timeout)
			if err == nil {
				c.tend(false, suspect.used) // proven just now: not pruned
				c.mu.Unlock()
				return suspect, nil
			}
			if err == ErrTimeout {
				c.mu.Unlock()
				return nil, err // Redis is slower than the check's budget
			}
			continue
		}
		if best == nil {
			// Behind the replies a suspect connection owes: its reader
			// finds out whether Redis answers (a frozen Redis's
			// connection goes stale), with no wait for a dial.
			best = busy
		}
		if best != nil {
			best.used = ns
			c.tend(atomic.LoadInt64(&best.inflight) >= growAt*int64(len(c.conns)), ns)
			c.mu.Unlock()
			return best, nil
		}
		failed := waited >= 0 && c.dialEnds != waited && c.dialFailed // the dial this check waited for failed
		if c.dialing == 0 && !failed && len(c.conns)+c.proving < c.poolSize {
			c.startDial()
		}
		if c.poolSize <= 0 || c.failingFast(ns) || failed || c.dialing == 0 && c.proving == 0 {
			c.mu.Unlock()
			return nil, ErrDialFailed
		}
		if waited < 0 {
			waited = c.dialEnds
		}
		c.dialDone.Wait() // a dial or a proof ends within its budget
	}
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

// roundTrip runs one call on a pooled connection: prefix, then (cmd not
// nil) the script call starting with head for key, with pre (not nil)
// answering the prefix. On a connection the server had closed (a Redis
// restart), the pool's idle connections are closed too and the call is
// tried once more on another, or a new one (retry).
func (c *Pool) roundTrip(pre *call, prefix []byte, cmd *Command, head []byte, key string, timeout time.Duration, notBefore int64) (*call, error) {
	cn, cl, err := c.attempt(pre, prefix, cmd, head, key, timeout, notBefore)
	if err == nil || cn == nil {
		return cl, err
	}
	return c.retry(cn, cl, err, pre, prefix, cmd, head, key, timeout)
}

// attempt is one try of roundTrip on a connection dialled at notBefore or
// later; cn is nil when there is none (the error says why).
func (c *Pool) attempt(pre *call, prefix []byte, cmd *Command, head []byte, key string, timeout time.Duration, notBefore int64) (*rconn, *call, error) {
	cn, err := c.pick(notBefore, timeout)
	if err != nil {
		return nil, nil, err
	}
	cl := newCall()
	if pre != nil {
		*pre = call{wake: pre.wake}
	}
	return cn, cl, cn.exchange(pre, cl, prefix, cmd, head, key, timeout, c.now)
}

// check runs the bucket script for the client key and stores the decision
// in d (PoolCheck).
func (c *Pool) check(cmd *Command, key string, d []int64, timeout time.Duration) error {
	return PoolCheck(c, cmd, key, d, timeout, c.mono())
}

// PoolCheck is the hot path of a check on this node (see
// the caller's hot path), at monotonic ns: it takes an idle connection and
// runs alone on it (solo); when none is idle, the check pipelines on the
// least busy connection (shared), and the pool may grow (pick).
func PoolCheck(c *Pool, cmd *Command, key string, d []int64, timeout time.Duration, ns int64) error {
	var cn *rconn
	load := deadLoad
	c.mu.Lock()
	for _, x := range c.conns { // pick, inlined: the least busy, the first idle
		if n := atomic.LoadInt64(&x.inflight); n < load {
			cn = x
			load = n
			if n == 0 {
				break
			}
		}
	}
	if cn != nil {
		if cn.epoch != c.epoch || ns-cn.used >= int64(proveAfter) {
			c.mu.Unlock()
			return c.shared(cmd, key, d, timeout) // pick proves it first (stale.go)
		}
		cn.used = ns // before tend: the pick is not pruned
	}
	grow := cn == nil || load >= growAt*int64(len(c.conns))
	if grow || ns-c.lastPrune >= pruneEvery {
		c.tend(grow, ns)
	}
	c.mu.Unlock()
	if cn == nil {
		return c.shared(cmd, key, d, timeout) // no connection: pick waits for the dial
	}
	if load == 0 {
		if ok, err := solo(cn, cmd, key, d, timeout, c.now); ok {
			if err != nil {
				return c.failedOn(cn, err, cmd, key, d, timeout)
			}
			return nil
		}
	}
	return pipelined(c, cn, cmd, key, d, timeout)
}

// pipelined runs a check on cn, busy, the shared way: its call queued
// behind the others and its reply awaited (cn.exchange, inlined: this is
// the hot path at saturation); a failure goes on in failedOn.
func pipelined(c *Pool, cn *rconn, cmd *Command, key string, d []int64, timeout time.Duration) error {
	cl := newCall()
	err := cn.send(nil, cl, nil, cmd, cmd.shaHead, key, timeout, c.now)
	if err == nil || cl.done {
		cn.mu.Lock()
		cn.await(cl)
		cn.mu.Unlock()
		err = cl.err
	}
	if err != nil {
		return c.failedOn(cn, err, cmd, key, d, timeout)
	}
	return answered(cl, nil, d)
}

// tend grows the pool when it should (grow: its least busy connection
// carries growAt calls per open connection, or there is none) and prunes
// idle connections at most every pruneEvery. Requires c.mu held.
func (c *Pool) tend(grow bool, ns int64) {
	if grow && c.dialing == 0 && len(c.conns)+c.proving < c.poolSize {
		c.startDial()
	}
	if ns-c.lastPrune >= pruneEvery {
		c.lastPrune = ns
		if len(c.conns) > 1 {
			c.pruneIdle(ns)
		}
	}
}

// failedOn goes on after a check on cn (solo or pipelined) failed with
// err, as roundTrip does: a lost connection is tried once more (retry),
// NOSCRIPT is answered by EVAL, any other error is the check's.
func (c *Pool) failedOn(cn *rconn, err error, cmd *Command, key string, d []int64, timeout time.Duration) error {
	cl, err := c.retry(cn, nil, err, nil, nil, cmd, cmd.shaHead, key, timeout)
	if err == errNoScript {
		cl, err = c.roundTrip(nil, nil, cmd, cmd.evalHead, key, timeout, 0)
	}
	return answered(cl, err, d)
}

// shared runs a check the shared way (call), when the pool had no
// connection to pick.
func (c *Pool) shared(cmd *Command, key string, d []int64, timeout time.Duration) error {
	cl, err := c.call(cmd, key, timeout)
	return answered(cl, err, d)
}

// answered decodes the reply of cl into d and gives cl back, or returns
// err.
func answered(cl *call, err error, d []int64) error {
	if err != nil {
		return err
	}
	err = decode(cl.line, d)
	releaseCall(cl)
	return err
}

// call is check up to the reply: the call, done, with its reply line or
// error (a redirection's line names its target).
func (c *Pool) call(cmd *Command, key string, timeout time.Duration) (*call, error) {
	cl, err := c.roundTrip(nil, nil, cmd, cmd.shaHead, key, timeout, 0)
	if err == errNoScript {
		cl, err = c.roundTrip(nil, nil, cmd, cmd.evalHead, key, timeout, 0)
	}
	return cl, err
}

var (
	pingCmd   = []byte("*1\r\n$4\r\nPING\r\n")
	pongReply = "+PONG\r\n"
)

// probe checks that the node answers within timeout, on a fresh
// connection (those pooled may have died with the server): the idle ones
// are closed, the new one joins the pool.
func (c *Pool) probe(timeout time.Duration) error {
	cn, err := c.dialSafe(true)
	if err != nil {
		return err
	}
	c.CloseIdle()
	cl := newCall()
	if err = cn.exchange(nil, cl, pingCmd, nil, nil, "", timeout, c.now); err == nil && string(cl.line) != pongReply {
		err = ErrBadReply
	}
	if err != nil {
		cn.mu.Lock()
		cn.kill(err)
		cn.mu.Unlock()
		return err
	}
	cn.born = c.mono()
	cn.used = cn.born
	c.mu.Lock()
	c.epoch++ // those open before the probe may be its predecessor's
	cn.epoch = c.epoch
	c.conns = append(c.conns, cn)
	c.dialFailed = false
	c.dialDone.Broadcast()
	c.mu.Unlock()
	return nil
}

// PoolSize returns the cap on open connections (SetPoolSize).
func (c *Pool) PoolSize() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.poolSize
}
