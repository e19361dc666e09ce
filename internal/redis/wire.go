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
	"bufio"
	"bytes"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
)

const (
	// lateGrace is how long a read that timed out looks again for a reply
	// already received (see lateRead).
	lateGrace = 200 * time.Microsecond
	// minWriteBudget is the least a write may block (writeBudget).
	minWriteBudget = 50 * time.Millisecond
	// maxQueue bounds the calls in flight on one connection.
	maxQueue = 4096
	// readerSize is the reply buffer of a connection, and the longest
	// reply line a call may get (MaxLine).
	readerSize = 4096
)

// MaxLine is the longest status line a call's reply may be: a script's
// reply must fit.
const MaxLine = readerSize

// rconn is one connection to Redis, shared by every check in flight on it.
// Safe for concurrent use. The write lock orders calls; mu guards the
// queue and the reading role.
type rconn struct {
	nc net.Conn
	br *bufio.Reader // read only by the reader

	part []byte // a reply line read in part (reader only)

	wmu        sync.Mutex // held while a call is queued and written (but see solo)
	wbuf       []byte     // guarded by wmu
	sbuf       []byte     // solo's own, guarded by mu
	writeUntil int64      // monotonic ns until which the write deadline set leaves a write budget (solo); 0: set it

	mu        sync.Mutex
	queue     []*call       // written, reply not yet read, in stream order
	reading   bool          // a check holds the reading role
	dead      error         // not nil once the stream is unusable
	inflight  int64         // len(queue), read atomically by the pool; deadLoad once dead
	solo      call          // the call of a check alone on the connection (solo)
	mixed     bool          // calls with different timeouts were written on it
	readUntil int64         // the reader's read deadline, monotonic ns
	timeout   time.Duration // the timeout of the calls written so far
	used      int64         // monotonic ns when the pool last handed it out (guarded by the pool's mu)
	born      int64         // monotonic ns when it joined the pool
	epoch     int64         // the pool's epoch when it last proved good (guarded by the pool's mu; stale.go)
	id        int64         // its CLIENT ID; 0: unknown (set before it joins the pool)
	run       string        // its server's run_id; "": unknown (set before it joins the pool)
}

// call is one request on a connection and, once done, its reply line (a
// status line: the decision, +PONG, +OK) or its error. Fields are guarded
// by the connection's mu; line and err are read by the caller once done.
type call struct {
	sent     int64 // monotonic ns (internal/clock) when its write returned; 0 until then
	timeout  int64 // ns: its budget, from sent or from the reply before it
	deadline int64 // monotonic ns; 0 until written
	line     []byte
	err      error
	done     bool
	waiting  bool          // its check sleeps on wake
	wake     chan struct{} // capacity 1: one send per sleep
}

func newConn(nc net.Conn) *rconn {
	return &rconn{nc: nc, br: bufio.NewReaderSize(nc, readerSize), wbuf: make([]byte, 0, 256)}
}

// calls recycles calls (and their channels): a check takes one and gives
// it back once done and out of its connection's queue (releaseCall).
var calls = sync.Pool{New: func() interface{} { return &call{wake: make(chan struct{}, 1)} }}

func newCall() *call { return calls.Get().(*call) }

// releaseCall gives cl back for reuse: only a call that was answered (its
// reply read, so out of the queue) and whose check is done with it.
func releaseCall(cl *call) {
	wake := cl.wake
	line := cl.line[:0]
	*cl = call{}
	cl.wake = wake
	cl.line = line
	calls.Put(cl)
}

// finish completes cl and wakes its check. Requires cn.mu held.
func finish(cl *call, line []byte, err error) {
	if cl.done {
		return
	}
	cl.line = append(cl.line[:0], line...)
	cl.err, cl.done = err, true
	wake(cl)
}

// wake wakes cl's check if it sleeps. Requires cn.mu held.
func wake(cl *call) {
	if cl.waiting {
		cl.waiting = false
		cl.wake <- struct{}{}
	}
}

// send queues and writes pre (when not nil) and cl in one write: prefix,
// then the call that starts with head for key (cmd nil: prefix alone).
// cl's deadline is set once the write returns (wall), plus timeout: a
// goroutine descheduled before its write does not shorten Redis's budget.
// A failed write kills the connection (crypto/tls makes write errors
// permanent, and a partial write breaks the stream): this call fails with
// errWrite (it may be tried again: Redis has not seen it whole), the calls
// written before it with errOwed (they may have reached Redis: trying them
// again could charge them twice).
func (cn *rconn) send(pre, cl *call, prefix []byte, cmd *Command, head []byte, key string, timeout time.Duration, wall func() time.Time) error {
	cn.wmu.Lock()
	cn.mu.Lock()
	if cn.dead != nil || len(cn.queue) >= maxQueue {
		return cn.refuse()
	}
	if pre != nil {
		cn.queue = append(cn.queue, pre)
	}
	cn.queue = append(cn.queue, cl)
	if cn.timeout != timeout {
		cn.mixed = cn.timeout != 0
		cn.timeout = timeout
	}
	atomic.StoreInt64(&cn.inflight, int64(len(cn.queue)))
	cn.mu.Unlock()
	cn.wbuf = appendCall(append(cn.wbuf[:0], prefix...), cmd, head, key)
	err := cn.nc.SetWriteDeadline(wall().Add(writeBudget(timeout)))
	cn.writeUntil = 0 // solo's deadline is gone
	if err == nil {
		_, err = cn.nc.Write(cn.wbuf)
	}
	sent := int64(time.Since(clock.Start)) + clock.Origin // clock.Mono(), inlined
	cn.mu.Lock()
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
	cn.mu.Unlock()
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
// interpreter's cost model (see Tollgate.ServeHTTP): it writes its call
// (cn.solo: nothing to allocate), reads its reply as the reader and
// decodes it into d, in this frame and decode's. It reports false, doing
// nothing, when the connection is busy or dead (the caller then goes the
// shared way).
//
// It holds mu, not wmu, while it writes: the queue is empty, so a writer
// (send) that holds wmu waits for mu to queue its call behind this one,
// and the stream keeps the queue's order. The write deadline is set only
// when the last one set is less than a write budget away (writeUntil).
// The decision is decoded before the lock is released: cn.solo is the
// next check's once the queue is empty.
func solo(cn *rconn, cmd *Command, key string, d []int64, timeout time.Duration, wall func() time.Time) (bool, error) {
	cn.mu.Lock()
	if cn.dead != nil || len(cn.queue) > 0 || cn.reading {
		cn.mu.Unlock()
		return false, nil
	}
	cl := &cn.solo
	cl.done = false
	cl.err = nil
	cn.queue = append(cn.queue, cl)
	cn.reading = true
	atomic.StoreInt64(&cn.inflight, 1)
	if cn.timeout != timeout { // as send does: the reader's deadline needs it
		cn.mixed = cn.timeout != 0
		cn.timeout = timeout
	}
	if len(cmd.mid) == 0 { // appendCall for one policy, inlined
		cn.sbuf = append(append(append(cn.sbuf[:0], cmd.shaHead...), key...), cmd.tail...)
	} else {
		cn.sbuf = appendCall(cn.sbuf[:0], cmd, cmd.shaHead, key)
	}
	var err error
	if now := int64(time.Since(clock.Start)) + clock.Origin; now >= cn.writeUntil { // clock.Mono(), inlined, after the locks
		err = cn.renewWriteDeadline(now, timeout, wall)
	}
	if err == nil {
		_, err = cn.nc.Write(cn.sbuf)
	}
	if err != nil {
		return true, cn.writeFailed(cl)
	}
	// Only the deadline: cl is the head, so nothing extends it (sent and
	// timeout are for calls behind others).
	cl.deadline = int64(time.Since(clock.Start)) + clock.Origin + int64(timeout) // clock.Mono(), inlined
	cn.readUntil = cl.deadline
	err = cn.nc.SetReadDeadline(clock.Start.Add(time.Duration(cl.deadline - clock.Origin))) // wallTime, inlined
	cn.mu.Unlock()
	var line []byte
	if err == nil {
		line, err = cn.br.ReadSlice('\n')
	}
	cn.mu.Lock()
	if err != nil || cn.dead != nil || len(cn.part) > 0 || len(line) < 3 || line[0] != '+' || len(cn.queue) != 1 {
		return true, cn.soloRest(line, err, d)
	}
	cl.done = true
	err = decode(line, d)
	cn.queue = cn.queue[:0] // cl alone: pop and release, inlined
	atomic.StoreInt64(&cn.inflight, 0)
	cn.reading = false
	cn.mu.Unlock()
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
func (cn *rconn) soloRest(line []byte, err error, d []int64) error {
	cl := &cn.solo
	if cn.dead == nil && (err != nil || len(cn.part) > 0) {
		// A read that timed out, failed, or ends a line begun before:
		// readLine's rest, without the lock (cn.reading is ours).
		cn.mu.Unlock()
		line, err = cn.readMore(line, err)
		cn.mu.Lock()
	}
	if err == nil && cn.dead == nil && len(line) >= 3 && line[0] == '+' {
		cl.done = true
		err = decode(line, d)
		cn.pop() // cl, the head: no one else reads
		cn.release()
		cn.mu.Unlock()
		return err
	}
	if cn.dead == nil {
		cn.take(line, err) // anything else: as the reader does
	}
	cn.serve(cl)
	err = cl.err
	if err == nil {
		err = decode(cl.line, d)
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
	err := cn.send(pre, cl, prefix, cmd, head, key, timeout, wall)
	if err == nil || cl.done {
		cn.mu.Lock()
		cn.await(cl)
		cn.mu.Unlock()
		err = cl.err
	}
	return err
}

// await returns once cl is done, reading replies when no other check
// does. Requires cn.mu held; returns with it held.
func (cn *rconn) await(cl *call) {
	for !cl.done {
		if !cn.reading {
			cn.reading = true
			cn.serve(cl)
			continue
		}
		cl.waiting = true
		cn.mu.Unlock()
		<-cl.wake
		cn.mu.Lock()
	}
}

// serve reads replies as the reader until me is done and nothing more is
// buffered, then passes the reading on. Requires cn.mu held and the
// reading role taken; returns with cn.mu held and the role released.
func (cn *rconn) serve(me *call) {
	for len(cn.queue) > 0 && (!me.done || cn.br.Buffered() > 0) {
		// The deadline is set under the lock: a call written meanwhile with
		// an earlier one lowers it (send).
		until := cn.queue[0].deadline // oldestDeadline, its common case inlined
		if cn.mixed || cn.queue[0].done || until == 0 {
			until = cn.oldestDeadline()
		}
		cn.readUntil = until
		err := cn.nc.SetReadDeadline(clock.Start.Add(time.Duration(until - clock.Origin))) // wallTime, inlined
		cn.mu.Unlock()
		var line []byte
		if err == nil {
			line, err = cn.br.ReadSlice('\n') // readLine, its common case inlined
			if err != nil || len(cn.part) > 0 {
				line, err = cn.readMore(line, err)
			}
		}
		cn.mu.Lock()
		if cn.dead != nil {
			break // killed meanwhile (a failed write): every call failed
		}
		if err != nil || line[0] != '+' || len(line) < 3 {
			cn.take(line, err)
			continue
		}
		// take, pop, finish and wake, their common case inlined: under
		// Yaegi four calls a reply cost more than this frame's values.
		cl := cn.queue[0]
		cn.queue[0] = nil
		cn.queue = cn.queue[1:]
		atomic.StoreInt64(&cn.inflight, int64(len(cn.queue)))
		if next := cn.queue; len(next) > 0 && !next[0].done && next[0].deadline != 0 {
			extendTo(next[0], int64(time.Since(clock.Start))+clock.Origin)
		}
		if !cl.done {
			cl.line = append(cl.line[:0], line...)
			cl.done = true
			if cl.waiting {
				cl.waiting = false
				cl.wake <- struct{}{}
			}
		}
	}
	cn.release()
}

// take hands what one read gave (a reply line, or the error that ended
// the read) to the head of the queue. Requires cn.mu held, the reading
// role, and the connection alive.
func (cn *rconn) take(line []byte, err error) {
	if err != nil {
		if !isTimeout(err) {
			cn.kill(err)
		} else if cn.expire(clock.Mono()) {
			cn.kill(errStale)
		}
		return
	}
	cl := cn.pop()
	switch {
	case len(line) >= 3 && line[0] == '+':
		finish(cl, line, nil)
	case len(line) >= 3 && line[0] == '-':
		finish(cl, line, replyError(line)) // the line names a redirection's target
	default:
		// Not a reply any call of ours gets: the stream cannot be
		// trusted.
		finish(cl, nil, ErrBadReply)
		cn.kill(ErrBadReply)
	}
}

// pop removes the head of the queue, whose reply just arrived, and gives
// the next call its whole timeout from now (extend). Requires cn.mu held.
func (cn *rconn) pop() *call {
	cl := cn.queue[0]
	cn.queue[0] = nil
	cn.queue = cn.queue[1:]
	atomic.StoreInt64(&cn.inflight, int64(len(cn.queue)))
	if len(cn.queue) > 0 {
		cn.queue[0].extend(clock.Mono())
	}
	return cl
}

// release gives up the reading role, waking the first check still
// waiting for its reply to take it. Requires cn.mu held.
func (cn *rconn) release() {
	cn.reading = false
	for _, cl := range cn.queue {
		if !cl.done && cl.waiting {
			wake(cl) // the next reader
			break
		}
	}
}

// extend gives the call now at the head of its connection its whole
// timeout from now, when the reply before it just arrived: Redis answers
// a connection's calls in order, so a call behind a deep pipeline (a
// burst) waits for Redis to work through the calls before it, which says
// nothing of Redis's health. Never past queueWait timeouts after its
// write, and not while it is still being written. Requires cn.mu held.
func (cl *call) extend(now int64) {
	if cl.done || cl.deadline == 0 {
		return
	}
	extendTo(cl, now)
}

// extendTo is extend for a call not done and written.
func extendTo(cl *call, now int64) {
	d := now + cl.timeout
	if last := cl.sent + queueWait*cl.timeout; d > last {
		d = last
	}
	if d > cl.deadline {
		cl.deadline = d
	}
}

// queueWait bounds, in timeouts, how long a call may wait behind the
// calls written before it on its connection.
const queueWait = 10

// oldestDeadline is the earliest deadline of the calls still waiting:
// the first one's when every call on the connection has had the same
// timeout (calls are written with increasing deadlines), else found by a
// scan (middlewares with other timeouts share the connection). A call
// still being written has none yet: the reader looks again within
// staleAfter. Requires cn.mu held.
func (cn *rconn) oldestDeadline() int64 {
	var earliest int64
	for _, cl := range cn.queue {
		if cl.done {
			continue
		}
		d := cl.deadline
		if d == 0 {
			d = clock.Mono() + int64(staleAfter)
		}
		if earliest == 0 || d < earliest {
			earliest = d
		}
		if !cn.mixed {
			break
		}
	}
	if earliest == 0 {
		return cn.queue[0].deadline + int64(staleAfter)
	}
	return earliest
}

// wallTime is the wall-clock time of monotonic ns, for socket deadlines.
func wallTime(ns int64) time.Time { return clock.Start.Add(time.Duration(ns - clock.Origin)) }

// staleAfter is how long past its deadline a connection may owe a reply
// before it is closed (a frozen or overloaded Redis).
const staleAfter = 250 * time.Millisecond

// expire fails the waiting calls whose deadline has passed, and reports
// whether the connection owes a reply staleAfter past its deadline.
// Requires cn.mu held.
func (cn *rconn) expire(now int64) bool {
	for _, cl := range cn.queue {
		if !cl.done && cl.deadline != 0 && now >= cl.deadline {
			finish(cl, nil, ErrTimeout)
		}
	}
	if len(cn.queue) == 0 {
		return false
	}
	head := cn.queue[0].deadline
	return head != 0 && now-head > int64(staleAfter)
}

// kill marks the connection dead with err, fails every queued call and
// closes the socket. Requires cn.mu held.
func (cn *rconn) kill(err error) {
	if cn.dead == nil {
		cn.dead = err
		_ = cn.nc.Close()
	}
	for _, cl := range cn.queue {
		finish(cl, nil, err)
	}
	cn.queue = nil
	atomic.StoreInt64(&cn.inflight, deadLoad)
}

// deadLoad is a dead connection's load: the pool never picks it.
const deadLoad = int64(1) << 40

// closeIfIdle kills the connection unless calls are in flight on it; it reports
// whether it did.
//
// A connection whose lock is held is in use (solo holds it while it
// writes, which a Redis that stopped reading may make last a write
// budget): it is not waited for.
func (cn *rconn) closeIfIdle() bool {
	if !cn.mu.TryLock() {
		return false
	}
	defer cn.mu.Unlock()
	if len(cn.queue) > 0 || cn.reading {
		return false
	}
	cn.kill(errConnDead)
	return true
}

// deadErr returns what killed the connection, or nil.
func (cn *rconn) deadErr() error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.dead
}

// readLine reads one reply line before the read deadline (reader only).
// A read that fails part-way keeps what it got (bufio drops it from its
// buffer), and the next read goes on from there: a reply split over two
// packets around a deadline stays whole.
func (cn *rconn) readLine() ([]byte, error) {
	line, err := cn.br.ReadSlice('\n')
	if err != nil || len(cn.part) > 0 {
		return cn.readMore(line, err)
	}
	return line, nil
}

// readMore is readLine after the first read: a read that timed out (see
// lateRead), failed, or ends a line begun before.
func (cn *rconn) readMore(line []byte, err error) ([]byte, error) {
	if err != nil && isTimeout(err) {
		cn.part = append(cn.part, line...)
		line, err = lateRead(cn)
	}
	if err != nil {
		cn.part = append(cn.part, line...)
		if len(cn.part) > readerSize {
			return nil, ErrBadReply
		}
		return nil, err
	}
	if len(cn.part) > 0 {
		line = append(cn.part, line...)
		cn.part = cn.part[:0] // line is copied (finish) before the next read
	}
	return line, nil
}

// lateRead gives a read that timed out one more, short look. Go fails a
// read whose deadline has passed without looking at the socket, so on a
// CPU-starved pod a reply Redis sent well in time would count as Redis
// being slow (and open the breaker under load). The deadline is meant for
// a slow Redis, not a busy scheduler.
func lateRead(cn *rconn) ([]byte, error) {
	if err := cn.nc.SetReadDeadline(time.Now().Add(lateGrace)); err != nil {
		return nil, err
	}
	return cn.br.ReadSlice('\n')
}

// replyError is the error for an error reply: NOSCRIPT, a redirection
// (MOVED, ASK: the call keeps the line, parsed by parseRedirect), a
// demoted primary (READONLY), or any other.
func replyError(line []byte) error {
	switch {
	case bytes.HasPrefix(line, noscript):
		return errNoScript
	case bytes.HasPrefix(line, moved) || bytes.HasPrefix(line, ask):
		return errRedirect
	case bytes.HasPrefix(line, readOnly):
		return errReadOnly
	}
	return ErrBadReply
}

// Error replies matched by prefix.
var (
	noscript = []byte("-NOSCRIPT")
	moved    = []byte("-MOVED ")
	ask      = []byte("-ASK ")
	readOnly = []byte("-READONLY")
)

// command is the prepared EVALSHA (and EVAL) of one set of policies: only the
// client's key changes between requests, so a call is written as
// head, key, mid[0], key, ..., tail.
type Command struct {
	shaHead  []byte   // "*N $7 EVALSHA $40 <sha> $len <n>" and the first key's "$len"
	evalHead []byte   // the same with EVAL and the script
	mid      [][]byte // key i's suffix and key i+1's "$len"
	tail     []byte   // the last key's suffix, then interval, burst, cost of every bucket
}

// bulk appends a RESP bulk string.
func bulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, "\r\n"...)
	b = append(b, s...)
	return append(b, "\r\n"...)
}

// NewCommand prepares a call of script with len(suffixes) keys and args:
// key i is the caller's key, keyLens[i] bytes long in every call, then
// suffixes[i]. Only the caller's key changes between calls, so a call is
// written as head, key, mid[0], key, ..., tail.
func NewCommand(script *Script, keyLens []int, suffixes []string, args []string) *Command {
	n := len(suffixes)
	keyHead := func(i int) []byte {
		h := []byte("$")
		h = strconv.AppendInt(h, int64(keyLens[i]+len(suffixes[i])), 10)
		return append(h, "\r\n"...)
	}
	head := func(verb, body string) []byte {
		b := []byte("*")
		b = strconv.AppendInt(b, int64(3+n+len(args)), 10)
		b = append(b, "\r\n"...)
		b = bulk(b, verb)
		b = bulk(b, body)
		b = bulk(b, strconv.Itoa(n))
		return append(b, keyHead(0)...)
	}
	cmd := &Command{shaHead: head("EVALSHA", script.SHA), evalHead: head("EVAL", script.Body)}
	for i := 1; i < n; i++ {
		cmd.mid = append(cmd.mid, append([]byte(suffixes[i-1]+"\r\n"), keyHead(i)...))
	}
	cmd.tail = []byte(suffixes[n-1] + "\r\n")
	for _, a := range args {
		cmd.tail = bulk(cmd.tail, a)
	}
	return cmd
}

// appendCall appends cmd's call that starts with head (shaHead or
// evalHead) for the client key.
func appendCall(b []byte, cmd *Command, head []byte, key string) []byte {
	if cmd == nil {
		return b // a prefix alone (send)
	}
	b = append(b, head...)
	b = append(b, key...)
	for _, m := range cmd.mid {
		b = append(b, m...)
		b = append(b, key...)
	}
	return append(b, cmd.tail...)
}

// decode parses a script's status line of numbers ("+1 4 0 1000\r\n", at
// least 3 bytes) into d: exactly len(d) integers from 0 to the largest
// int64, of 1 to maxDigits digits, single spaces between them. What the
// numbers mean is the caller's to check. One pass and no call: the
// interpreter's cheapest parse (fmt.Sscan boxes every target; strconv is a
// call per number).
func decode(line []byte, d []int64) error {
	end := len(line) - 2
	if end < 2 || line[end] != '\r' {
		return ErrBadReply
	}
	k := 0
	start := 1 // where the number being read starts
	var v int64
	for i := 1; i <= end; i++ {
		c := line[i]
		if c == ' ' || i == end {
			if i == start || i-start > maxDigits || v < 0 || k == len(d) || c == ' ' && k == len(d)-1 {
				return ErrBadReply
			}
			d[k] = v
			k++
			v = 0
			start = i + 1
		} else if c -= '0'; c <= 9 {
			v = v*10 + int64(c)
		} else {
			return ErrBadReply
		}
	}
	if k != len(d) {
		return ErrBadReply
	}
	return nil
}

// maxDigits bounds a number of a decision: an int64 has 19 digits; 19
// digits overflow at most once, into a negative number, which decode
// refuses.
const maxDigits = 19

// Joints returns what a call writes between its keys: key i's suffix
// and key i+1's length. A caller whose keys differ in length from call to
// call writes them whole (Whole).
func (c *Command) Joints() []string {
	j := make([]string, len(c.mid))
	for i, m := range c.mid {
		j[i] = string(m)
	}
	return j
}

// Whole returns c as a call of one key, written whole by the caller:
// every key of c and the Joints between them.
func (c *Command) Whole() *Command {
	one := *c
	one.mid = nil
	return &one
}

// Append appends the call of c for key to b, as EVALSHA or (eval) EVAL:
// for a pipeline written by hand (tests, tools).
func (c *Command) Append(b []byte, key string, eval bool) []byte {
	if eval {
		return appendCall(b, c, c.evalHead, key)
	}
	return appendCall(b, c, c.shaHead, key)
}
