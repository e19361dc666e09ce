package redis

// Connections that may have outlived their Redis, and the calls that may
// be tried again.
//
// A pooled connection is known good while nothing has happened since it
// last answered: no connection of its node lost (a reset, EOF, a failed
// write, a stale connection, a failed dial or side command), no breaker
// transition or topology change, no probe that reconnected, and the pool
// handed it out less than proveAfter ago. (A timeout alone is not such
// an event: Redis or the pod was slow, the connection is still good.)
// Each such event bumps the pool's epoch; a connection proven at an
// older epoch, or idle for longer, is suspect: a restarted Redis closed
// it (its FIN unread), Redis's `timeout` did, or a freeze left it owing
// replies. A suspect connection carries no check until it answers a
// PING, sent alone by the check that picked it; one that does not
// answer is closed, with its idle siblings of the same age, and the
// check goes on on another connection or waits for a dial. So the first
// burst after an incident is decided by Redis, and the hot path pays two
// comparisons when nothing has happened.
//
// Exactly once. A call that may have run is never run again: a check
// written whole to a connection that then failed (a reset, EOF, a
// timeout) fails, and the caller's failure policy decides, unless a
// connection dialled then reaches another Redis process (another run_id,
// or without +info a lower CLIENT ID: restarted), whose state never saw
// the call. A call that cannot have run is tried once more, on a good
// connection: its write failed (Redis never read it whole: errWrite), or
// the connection was dead before it was written (errNotSent). (Redis may
// run a call and lose the connection before its reply is written, when
// another client kills it in the same event-loop turn; such a call is not
// retried.)

import (
	"sync/atomic"
	"time"
)

// proveAfter is how long a connection may go unused and still carry a
// check without a PING first: below Redis's shortest `timeout` (1 s), so
// a connection closed by it is found out before a check is written.
const proveAfter = 500 * time.Millisecond

// usable returns the least busy connection dialled at notBefore or later
// that is known good, the first suspect one that carries no call (idle,
// or owing only the replies of calls that timed out: its PING drains
// them), and the least busy suspect one that carries calls. Requires c.mu
// held.
func (c *Pool) usable(notBefore, ns int64) (*rconn, *rconn, *rconn) {
	var best, suspect, busy *rconn
	load, busyLoad := deadLoad, deadLoad
	for _, cn := range c.conns {
		if cn.born < notBefore {
			continue
		}
		n := atomic.LoadInt64(&cn.inflight)
		if cn.epoch != c.epoch || ns-cn.used >= int64(proveAfter) {
			if suspect == nil && (n == 0 || n < deadLoad && cn.owesOnly()) {
				suspect = cn
			} else if n > 0 && n < busyLoad {
				busy = cn
				busyLoad = n
			}
			continue
		}
		if n < load {
			best = cn
			load = n
			if n == 0 {
				break
			}
		}
	}
	return best, suspect, busy
}

// owesOnly reports whether every call on cn is done (timed out): what it
// carries are replies owed to no one. It does not
// wait for cn's lock.
func (cn *rconn) owesOnly() bool {
	if !cn.mu.TryLock() {
		return false
	}
	defer cn.mu.Unlock()
	if cn.dead != nil {
		return false
	}
	for _, cl := range cn.queue {
		if !cl.done {
			return false
		}
	}
	return true
}

// prove takes cn out of the pool and sends it a PING within timeout,
// alone. Answered, cn rejoins the pool proven at the epoch it was taken
// at. Not answered in time, it rejoins it still suspect (the PING's reply
// is owed like a timed-out check's: the next proof drains it) and prove
// returns ErrTimeout, the check's failure; gone stale, it is dropped and
// the pool marked silent, as a stale connection does. Dead (a reset, EOF),
// it is closed, and so are the idle connections as suspect as it was
// (most likely they share its fate); the rest become suspect. Requires
// c.mu held; releases it while the PING is out.
func (c *Pool) prove(cn *rconn, timeout time.Duration) error {
	c.remove(cn)
	c.proving++ // still counted against poolSize
	epoch := c.epoch
	c.mu.Unlock()
	cl := newCall()
	// The PING has a write budget (10 timeouts, at least 50 ms), not the
	// check's timeout: it proves a connection, and a busy pod that reads
	// its PONG late must not fail the check it guards (the
	// drills saw a 5 ms PING missed under a burst on 2 cores). A frozen
	// Redis costs the first check after an idle spell that wait, once:
	// then the connection goes stale and the pool silent.
	err := cn.exchange(nil, cl, pingCmd, nil, nil, "", writeBudget(timeout), c.now)
	if err == nil && string(cl.line) != pongReply {
		err = ErrBadReply
	}
	if err == nil {
		releaseCall(cl)
	}
	late := err == ErrTimeout || err != nil && isTimeout(err)
	dead := cn.deadErr()
	if err != nil && !late && dead == nil {
		cn.mu.Lock()
		cn.kill(errConnDead)
		cn.mu.Unlock()
		dead = errConnDead
	}
	c.mu.Lock()
	c.proving--
	if dead == nil {
		dead = cn.deadErr() // its reader may have seen it die since (a FIN right after the PONG)
		if dead != nil && (err == nil || late) {
			err, late = dead, false
		}
	}
	if err == nil && c.forgotten {
		cn.mu.Lock()
		cn.kill(errConnDead)
		cn.mu.Unlock()
		err, dead = errConnDead, errConnDead
	}
	switch {
	case err == nil:
		cn.epoch = epoch
		cn.used = c.mono()
		// First: the pool's first connections carry steady traffic and
		// the rest are pruned when idle (pruneIdle).
		c.conns = append([]*rconn{cn}, c.conns...)
	case dead == errStale:
		c.dialFailed = true // checks with no connection fail at once (failingFast)
		c.silentAt = c.mono()
		late = true
	case dead == nil:
		c.conns = append(c.conns, cn) // late: still suspect
	default:
		c.closeSuspect(epoch, c.mono())
		c.epoch++
	}
	c.dialDone.Broadcast()
	if late {
		return ErrTimeout
	}
	return err
}

// remove takes cn out of the pool's list. Requires c.mu held.
func (c *Pool) remove(cn *rconn) {
	at := -1
	for i, x := range c.conns {
		if x == cn {
			at = i
			break
		}
	}
	if at >= 0 {
		copy(c.conns[at:], c.conns[at+1:])
		c.conns[len(c.conns)-1] = nil
		c.conns = c.conns[:len(c.conns)-1]
	}
}

// closeSuspect closes the idle connections that were suspect at epoch.
// Requires c.mu held.
func (c *Pool) closeSuspect(epoch, ns int64) {
	keep := c.conns[:0]
	for _, cn := range c.conns {
		if (cn.epoch != epoch || ns-cn.used >= int64(proveAfter)) && cn.closeIfIdle() {
			continue
		}
		keep = append(keep, cn)
	}
	for i := len(keep); i < len(c.conns); i++ {
		c.conns[i] = nil
	}
	c.conns = keep
}

// failingFast reports whether a check finding no connection fails at
// once rather than wait for a dial: Redis went silent (a dial timed out,
// a connection went stale) less than a dial budget ago, and a dial would
// most likely hold the check for its whole budget. A dial refused or
// reset fails at once by itself: waiting for the next one costs nothing
// when Redis is still away, and finds Redis when it is back (a dial that
// failed during an outage, or that a restart cut, must not fail the
// first burst after it). Requires c.mu held.
func (c *Pool) failingFast(ns int64) bool {
	return c.dialFailed && c.silentAt != 0 && ns-c.silentAt < int64(c.dialTimeout)
}

// forget closes the idle connections of a node the topology no longer
// uses, and keeps any dialled or proven from now on out of its pool.
func (c *Pool) forget() {
	c.mu.Lock()
	c.forgotten = true
	c.mu.Unlock()
	c.CloseIdle()
}

// restarted reports whether next, dialled after lost ended, reaches
// another Redis process than lost did: another run_id, or without run ids
// a lower CLIENT ID (IDs grow with every connection a process accepts).
// Unknown is not restarted.
func restarted(lost, next *rconn) bool {
	if lost.run != "" && next.run != "" {
		return lost.run != next.run
	}
	return lost.id > 0 && next.id > 0 && next.id < lost.id
}

// retry goes on after a call cl on cn failed with err: anything but a
// reply makes the pool's connections suspect, a dead connection is
// dropped, and a call that cannot have run is tried once more, on a good
// connection (the pick proves the one it lands on): one never written
// whole (neverSent), or one whose connection ended under it when Redis
// has restarted since, which a connection dialled now tells by its
// CLIENT ID: lower than the lost connection's (IDs start again with the
// process). Anything else may have run, and is not run again.
func (c *Pool) retry(cn *rconn, cl *call, err error, pre *call, prefix []byte, cmd *Command, head []byte, key string, timeout time.Duration) (*call, error) {
	if !replyFault(err) {
		c.suspect()
	}
	if dead := cn.deadErr(); dead != nil {
		c.drop(cn, dead == errStale)
	}
	var notBefore int64
	if !neverSent(err) {
		if !lostUnder(err) || cn.id == 0 && cn.run == "" {
			return cl, err
		}
		notBefore = c.mono() // a connection to the Redis there is now
	}
	// A call that cannot have run is tried again within its budget: a
	// connection killed with its siblings (CLIENT KILL, a failover) may
	// leave the next pick another dead one, or a dial cut under way.
	until := c.mono() + int64(timeout)
	for try := 0; ; try++ {
		next, perr := c.pick(notBefore, timeout)
		if perr != nil || notBefore != 0 && !restarted(cn, next) {
			return cl, err // the same Redis (or unknown): it may have run the call
		}
		if pre != nil {
			*pre = call{wake: pre.wake}
		}
		cl = newCall()
		if err = next.exchange(pre, cl, prefix, cmd, head, key, timeout, c.now); err != nil {
			if !replyFault(err) {
				c.suspect()
			}
			if dead := next.deadErr(); dead != nil {
				c.drop(next, dead == errStale)
			}
		}
		if !neverSent(err) || try == maxResends || c.mono() >= until {
			return cl, err
		}
		cn, notBefore = next, 0
	}
}

// maxResends bounds the tries again of a call that cannot have run.
const maxResends = 3

// pick returns the least busy connection dialled at notBefore (monotonic
// ns) or later and known good, starting a dial when all are busy and the
// pool may grow. One that may have outlived its Redis is proven first (a
// PING: stale.go), and carries this check once proven. With none it waits
// for the dial or the proof in progress, and for one dial at most; it
// fails at once while Redis is silent (failingFast). Connections open,
// being proven and being dialled are at most poolSize.
func (c *Pool) pick(notBefore int64, timeout time.Duration) (*rconn, error) {
	waited := int64(-1) // the dials ended when this check began to wait for one
	recut := false      // it waits for a dial again after one was cut
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
		// The dial this check waited for failed; one cut under way (a
		// CLIENT KILL, a failover caught it in its handshake) is waited
		// for once more.
		failed := waited >= 0 && c.dialEnds != waited && c.dialFailed
		if failed && c.dialCut && !recut {
			failed, recut, waited = false, true, c.dialEnds
		}
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
