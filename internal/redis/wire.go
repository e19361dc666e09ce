package redis

// The wire: calls written to one shared connection in order and answered
// in order (RESP pipelining).
//
// Any number of checks share a connection. A check appends its call to the
// connection's queue and writes it, both under the write lock, so the
// queue's order is the stream's order. Then it sleeps until its reply is
// in. Each pooled connection has a reader of its own (readLoop, a
// goroutine from the connection's first call to its death): it reads
// replies in order, hands each to its call and wakes that call's check.
// While nothing is owed it waits on the socket with no deadline, so a
// connection Redis closes (a CLIENT KILL, a failover, Redis's idle
// `timeout`, a restart) is seen dead when its FIN or RST arrives, and
// leaves the pool before a check is written to it: the next check goes to
// another connection or waits for a dial, and is decided by Redis.
//
// Deadlines. A call's deadline is its write time plus its timeout, renewed
// when the reply before it on its connection arrives, or while Redis
// answers the node's other connections (up to queueWait timeouts after its
// write): the budget is Redis's, for this call (a check that waited for
// the write lock, for the CPU, or for Redis to work through a burst
// written before it did not find Redis slow). The reader reads until the
// deadline of the oldest call still waiting; when it passes, every
// waiting call past its deadline fails with ErrTimeout and leaves; its
// reply, when it comes, is read and dropped. A connection that still owes
// a reply staleAfter past its deadline is closed. No select and no timer:
// the socket's deadline bounds every wait, and a check waits on a channel
// of its own that only the reader sends to.
//
// A connection whose stream can no longer be trusted (a write error,
// which crypto/tls makes permanent, a read error, a reply no call of ours
// gets) is dead: every call queued on it fails with that error, and the
// pool drops it. A call refused by a connection already dead never reached
// Redis (errNotSent): the check tries it on another.

import (
	"sync/atomic"
	"time"
)

// send queues and writes pre (when not nil) and cl in one write: prefix,
// then the call that starts with head for key (cmd nil: prefix alone).
// cl's deadline is set once the write returns (wall), plus timeout: a
// goroutine descheduled before its write does not shorten Redis's budget.
// A failed write kills the connection (crypto/tls makes write errors
// permanent, and a partial write breaks the stream): this call fails with
// errWrite (it may be tried again: Redis has not seen it whole), the calls
// written before it with errOwed (they may have reached Redis: trying them
// again could charge them twice). A function, as await and serve are, not
// a method: under Yaegi a method call allocates about 0.9 KB more, and
// these run for every check that shares a connection.
func send(cn *rconn, pre, cl *call, prefix []byte, cmd *Command, head []byte, key string, timeout time.Duration, wall func() time.Time) error {
	mu := &cn.mu // fields used more than once in locals, as in solo
	cn.wmu.Lock()
	mu.Lock()
	q := cn.queue
	if cn.dead != nil || len(q) >= maxQueue {
		return cn.refuse()
	}
	if pre != nil {
		q = append(q, pre)
	}
	q = append(q, cl)
	cn.queue = q
	if cn.timeout != timeout {
		cn.mixed = cn.timeout != 0
		cn.timeout = timeout
	}
	atomic.StoreInt64(&cn.inflight, int64(len(q)))
	mu.Unlock()
	b := append(cn.wbuf[:0], prefix...)
	if cmd != nil && len(cmd.mid) == 0 { // appendCall for one key, inlined
		b = append(append(append(b, head...), key...), cmd.tail...)
	} else {
		b = appendCall(b, cmd, head, key)
	}
	cn.wbuf = b
	nc := cn.nc
	var err error
	// The write deadline is set only when the last one set leaves less
	// than a write budget (writeUntil): most writes set none.
	if now := int64(time.Since(processStart)) + monoOrigin; now >= cn.writeUntil { // clock.Mono(), inlined, after the locks
		err = cn.renewWriteDeadline(now, timeout, wall)
	}
	n := 0
	if err == nil {
		n, err = nc.Write(b)
	}
	sent := int64(time.Since(processStart)) + monoOrigin // clock.Mono(), inlined
	mu.Lock()
	if err != nil {
		cn.sendFailed(pre, cl, err, n)
	} else {
		// One field a statement: Yaegi v0.16.1 drops the first values of a
		// multiple assignment to fields whose last value is a call.
		cl.sent = sent
		cl.timeout = int64(timeout)
		dl := sent + int64(timeout)
		cl.deadline = dl
		if pre != nil {
			cn.sent(pre, cl)
		}
		// The reader waits with no deadline while nothing is owed, or
		// with a later one (mixed timeouts): this call's bounds its read.
		if ru := cn.readUntil; ru <= 0 || dl < ru {
			cn.readUntil = dl
			err = nc.SetReadDeadline(processStart.Add(time.Duration(dl - monoOrigin))) // the wall-clock time of the monotonic deadline
			if err != nil {
				cn.kill(err) // a closed socket: this call may have been read (errOwed's case)
				err = nil    // cl is done with the error
			}
		}
	}
	mu.Unlock()
	cn.wmu.Unlock()
	return err
}

// renewWriteDeadline sets a write deadline two write budgets away, and
// writeUntil one budget away (see send). Requires cn.wmu held.
func (cn *rconn) renewWriteDeadline(ns int64, timeout time.Duration, wall func() time.Time) error {
	budget := writeBudget(timeout)
	cn.writeUntil = ns + int64(budget)
	return cn.nc.SetWriteDeadline(wall().Add(2 * budget))
}

// refuse is send's answer when the connection takes no more calls: dead,
// or its queue full. Requires cn.wmu and cn.mu held; releases them.
func (cn *rconn) refuse() error {
	err := ErrQueueFull
	if cn.dead != nil {
		err = errNotSent // it may be tried on another connection
	}
	cn.mu.Unlock()
	cn.wmu.Unlock()
	return err
}

// sendFailed fails cl and pre, whose write failed: they may be tried
// again; the calls written before them may have reached Redis and must not
// be charged twice (errOwed). Requires cn.mu held.
func (cn *rconn) sendFailed(pre, cl *call, err error, n int) {
	finish(cl, nil, errWrite)
	if pre != nil {
		finish(pre, nil, errWrite)
	}
	// A reset refused the write's first byte (n == 0: none of cl's own
	// went out to draw it): Redis's kernel answered data of ours that
	// Redis never read, which is the one call written before (see
	// closedBefore), when there is one alone.
	mine := 1 // cl, and pre
	if pre != nil {
		mine = 2
	}
	if q := cn.queue; n == 0 && reset(err) && len(q) == 1+mine && !q[0].done {
		finish(q[0], nil, errNotSent)
	}
	cn.kill(errOwed)
}

// sent is send's rarer bookkeeping once cl is written: pre shares its
// deadline. Requires cn.mu held.
func (cn *rconn) sent(pre, cl *call) {
	pre.sent = cl.sent
	pre.timeout = cl.timeout
	pre.deadline = cl.deadline
}

// writeBudget bounds a write blocked on a full socket buffer (Redis not
// reading): 10 timeouts, at least minWriteBudget. A write normally
// completes at once, whatever Redis does, and one that fails kills the
// connection, so the budget is generous.
func writeBudget(timeout time.Duration) time.Duration {
	if b := 10 * timeout; b > minWriteBudget {
		return b
	}
	return minWriteBudget
}

// exchange sends pre (when not nil) and cl (send) and returns once cl is
// done (await): cl's error, or why it was not sent.
func (cn *rconn) exchange(pre, cl *call, prefix []byte, cmd *Command, head []byte, key string, timeout time.Duration, wall func() time.Time) error {
	err := send(cn, pre, cl, prefix, cmd, head, key, timeout, wall)
	if err == nil || cl.done {
		cn.mu.Lock()
		await(cn, cl)
		cn.mu.Unlock()
		err = cl.err
	}
	return err
}
