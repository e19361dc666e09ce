package redis

// The wire: calls written to one shared connection in order and answered
// in order (RESP pipelining).
//
// Any number of checks share a connection. A check appends its call to the
// connection's queue and writes it, both under the write lock, so the
// queue's order is the stream's order. Then it waits for its reply. No
// goroutine of the plugin's own reads: one of the waiting checks does, in
// turn (the reader). The reader reads replies in order, hands each to its
// call and wakes that call's check, until its own reply is in and no other
// reply is buffered; then it passes the reading on to the first check still
// waiting. A check that finds the connection idle takes a path of its own
// (solo): it writes, reads its own reply and returns in one frame, as with
// a connection of its own. So a burst shares a few connections without a
// dial, a wait for a free connection, or a syscall per check.
//
// Deadlines. A call's deadline is its write time plus its timeout, renewed
// when the reply before it on its connection arrives (up to queueWait
// timeouts after its write): the budget is Redis's, for this call (a
// check that waited for the write lock, for the CPU, or for Redis to work
// through a burst written before it did not find Redis slow). The reader
// reads until the deadline of the oldest call still waiting; when it
// passes, every waiting call past its deadline fails with ErrTimeout and
// leaves; its reply, when it comes, is read and dropped. A connection that
// still owes a reply staleAfter past its deadline is closed. No select and
// no timer: the socket's deadline bounds every wait, and a check waits on
// a channel of its own that only the reader sends to.
//
// A connection whose stream can no longer be trusted (a write error,
// which crypto/tls makes permanent, a read error, a reply no call of ours
// gets) is dead: every call queued on it fails with that error, and the
// pool drops it.

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
	budget := 10 * timeout // writeBudget, inlined
	if budget < minWriteBudget {
		budget = minWriteBudget
	}
	nc := cn.nc
	err := nc.SetWriteDeadline(wall().Add(budget))
	cn.writeUntil = 0 // solo's deadline is gone
	if err == nil {
		_, err = nc.Write(b)
	}
	sent := int64(time.Since(processStart)) + monoOrigin // clock.Mono(), inlined
	mu.Lock()
	if err != nil {
		cn.sendFailed(pre, cl)
	} else {
		// One field a statement: Yaegi v0.16.1 drops the first values of a
		// multiple assignment to fields whose last value is a call.
		cl.sent = sent
		cl.timeout = int64(timeout)
		cl.deadline = sent + int64(timeout)
		if pre != nil || cn.mixed {
			cn.sent(pre, cl)
		}
	}
	mu.Unlock()
	cn.wmu.Unlock()
	return err
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
func (cn *rconn) sendFailed(pre, cl *call) {
	finish(cl, nil, errWrite)
	if pre != nil {
		finish(pre, nil, errWrite)
	}
	cn.kill(errOwed)
}

// sent is send's rarer bookkeeping once cl is written: pre shares its
// deadline, and with mixed timeouts on the connection a call with an
// earlier deadline than the reader's lowers it. Requires cn.mu held.
func (cn *rconn) sent(pre, cl *call) {
	if pre != nil {
		pre.sent = cl.sent
		pre.timeout = cl.timeout
		pre.deadline = cl.deadline
	}
	if cn.mixed && cn.reading && cl.deadline < cn.readUntil {
		cn.readUntil = cl.deadline
		_ = cn.nc.SetReadDeadline(wallTime(cl.deadline))
	}
}

// solo is the common case, a check on an idle connection, written for the
// interpreter's cost model (the caller's hot path): it writes its call
// (cn.soloCall: nothing to allocate), reads its reply as the reader and
// decodes it into d, in this frame and decode's. It reports false, doing
// nothing, when the connection is busy or dead (the caller then goes the
// shared way).
//
// It holds mu, not wmu, while it writes: the queue is empty, so a writer
// (send) that holds wmu waits for mu to queue its call behind this one,
// and the stream keeps the queue's order. The write deadline is set only
// when the last one set is less than a write budget away (writeUntil).
// The decision is decoded before the lock is released: cn.soloCall is the
// next check's once the queue is empty.
func solo(cn *rconn, cmd *Command, key string, d []int64, timeout time.Duration, wall func() time.Time) (bool, error) {
	// Fields used more than once are read into locals: under Yaegi each
	// selector is a value of the frame, allocated at every call.
	mu := &cn.mu
	mu.Lock()
	if cn.dead != nil || len(cn.queue) > 0 || cn.reading {
		mu.Unlock()
		return false, nil
	}
	cl := &cn.soloCall
	cl.done = false
	cl.err = nil
	cn.queue = append(cn.queue, cl)
	cn.reading = true
	atomic.StoreInt64(&cn.inflight, 1)
	if cn.timeout != timeout { // as send does: the reader's deadline needs it
		cn.mixed = cn.timeout != 0
		cn.timeout = timeout
	}
	b := cn.sbuf[:0]
	if len(cmd.mid) == 0 { // appendCall for one key, inlined
		b = append(append(append(b, cmd.shaHead...), key...), cmd.tail...)
	} else {
		b = appendCall(b, cmd, cmd.shaHead, key)
	}
	cn.sbuf = b
	nc := cn.nc
	var err error
	if now := int64(time.Since(processStart)) + monoOrigin; now >= cn.writeUntil { // clock.Mono(), inlined, after the locks
		err = cn.renewWriteDeadline(now, timeout, wall)
	}
	if err == nil {
		_, err = nc.Write(b)
	}
	if err != nil {
		return true, cn.writeFailed(cl)
	}
	// Only the deadline: cl is the head, so nothing extends it (sent and
	// timeout are for calls behind others).
	dl := int64(time.Since(processStart)) + monoOrigin + int64(timeout) // clock.Mono(), inlined
	cl.deadline = dl
	cn.readUntil = dl
	err = nc.SetReadDeadline(processStart.Add(time.Duration(dl - monoOrigin))) // wallTime, inlined
	mu.Unlock()
	var line []byte
	if err == nil {
		line, err = cn.br.ReadSlice('\n')
	}
	mu.Lock()
	if err != nil || cn.dead != nil || len(cn.part) > 0 || len(line) < 3 || line[0] != '+' || len(cn.queue) != 1 {
		return true, cn.soloRest(line, err, d, cmd)
	}
	cl.done = true
	err = decode(line, d, cmd)
	cn.queue = cn.queue[:0] // cl alone: pop and release, inlined
	atomic.StoreInt64(&cn.inflight, 0)
	cn.reading = false
	mu.Unlock()
	return true, err
}

// renewWriteDeadline sets a write deadline two write budgets away, and
// writeUntil one budget away (see solo). Requires cn.mu held with the
// queue empty but for the caller's call.
func (cn *rconn) renewWriteDeadline(ns int64, timeout time.Duration, wall func() time.Time) error {
	budget := writeBudget(timeout)
	cn.writeUntil = ns + int64(budget)
	return cn.nc.SetWriteDeadline(wall().Add(2 * budget))
}

// writeFailed ends cl, the only call on the connection, whose write
// failed: the connection dies. Requires cn.mu held; releases it.
func (cn *rconn) writeFailed(cl *call) error {
	cn.sendFailed(nil, cl)
	cn.reading = false
	cn.mu.Unlock()
	return errWrite
}

// soloRest is solo after a read that did not give its reply alone: an
// error, another reply, calls queued behind it. Requires cn.mu held;
// releases it.
func (cn *rconn) soloRest(line []byte, err error, d []int64, cmd *Command) error {
	cl := &cn.soloCall
	if cn.dead == nil && (err != nil || len(cn.part) > 0) {
		// A read that timed out, failed, or ends a line begun before:
		// readLine's rest, without the lock (cn.reading is ours).
		cn.mu.Unlock()
		line, err = cn.readMore(line, err)
		cn.mu.Lock()
	}
	if err == nil && cn.dead == nil && len(line) >= 3 && line[0] == '+' {
		cl.done = true
		err = decode(line, d, cmd)
		cn.pop() // cl, the head: no one else reads
		cn.release()
		cn.mu.Unlock()
		return err
	}
	if cn.dead == nil {
		cn.take(line, err) // anything else: as the reader does
	}
	serve(cn, cl)
	err = cl.err
	if err == nil {
		err = decode(cl.line, d, cmd)
	}
	cn.mu.Unlock()
	return err
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
