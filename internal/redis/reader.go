package redis

// The reader of a shared connection (wire.go): replies read in order and
// handed to their calls, deadlines, and a connection that dies.

import (
	"bytes"
	"crypto/tls"
	"io"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
)

// await returns once cl is done: its connection's reader wakes it.
// Requires cn.mu held; returns with it held.
func await(cn *rconn, cl *call) {
	for !cl.done {
		cl.waiting = true
		cn.mu.Unlock()
		<-cl.wake
		cn.mu.Lock()
	}
}

// staleDeadline is readUntil when the socket's read deadline is one set
// for calls answered since (readLoop).
const staleDeadline = -2

// longDecision is a decision longer than its reader decodes inline
// (maxDecision numbers): decode reads it.
const longDecision = -2

// idleWatch is how often a reader with nothing owed looks whether its
// connection is still its pool's (one dropped or forgotten while it
// owed replies to no one, which CloseIdle skips, ends then).
const idleWatch = time.Minute

// startReader starts cn's reader (readLoop); c, when not nil, is told of
// its death (lost). Before cn's first call.
func startReader(cn *rconn, c *Pool) {
	cn.pool = c
	go readLoop(cn, c)
}

// readLoop is cn's reader, for its whole life: it reads replies in order
// and hands each to its call, until the connection dies (a read error, a
// reply no call of ours gets, a close). While calls are owed it reads until
// the deadline of the oldest one waiting (then fails those past theirs);
// while nothing is owed it waits for as long as the connection is its
// pool's (idleWatch), so Redis's FIN or RST kills the connection when it
// arrives, before another call is written to it. Then it tells the pool
// (lost) and ends: a goroutine per open connection, ending with it.
func readLoop(cn *rconn, c *Pool) {
	held := false // cn.mu is held by this goroutine (for the panic's recovery)
	defer func() {
		// A panic here would end the whole Traefik process: the
		// connection dies instead, its calls failed.
		if r := recover(); r != nil {
			if !held {
				cn.mu.Lock()
			}
			cn.kill(errConnDead)
			cn.mu.Unlock()
		}
		if c != nil {
			c.lost(cn)
		}
	}()
	mu := &cn.mu
	mu.Lock()
	held = true
	cn.readUntil = -1 // the dial's deadline is replaced below
	var watch int64   // the idle watch's deadline, when the reader set one (monotonic ns)
	dec := make([]int64, maxDecision)
	for cn.dead == nil {
		// The deadline is set under the lock: a call written meanwhile
		// with an earlier one lowers it (send).
		var until int64
		var err error
		if q := cn.queue; len(q) > 0 {
			until = q[0].deadline // oldestDeadline, its common case inlined
			if cn.mixed || q[0].done || until == 0 {
				until = cn.oldestDeadline()
			}
		}
		// readUntil: > 0 the deadline set (send sets the head's: most
		// replies need no other; or the idle watch's); staleDeadline,
		// one set for calls answered since, left to fire rather than
		// moved after every reply; 0 or -1: to be set.
		ru := cn.readUntil
		if until != 0 {
			if until != ru {
				err = cn.nc.SetReadDeadline(processStart.Add(time.Duration(until - monoOrigin))) // the wall-clock time of the monotonic deadline
				ru = until
			}
		} else if ru > 0 && ru != watch {
			ru = staleDeadline
		} else if ru <= 0 && ru != staleDeadline {
			// Nothing owed: a FIN or a reset ends the read at once; the
			// idle watch only looks, now and then, whether the
			// connection is still the pool's.
			w := int64(idleWatch)
			if c != nil {
				w = int64(c.watch)
			}
			watch = int64(time.Since(processStart)) + monoOrigin + w
			err = cn.nc.SetReadDeadline(processStart.Add(time.Duration(watch - monoOrigin)))
			ru = watch
		}
		cn.readUntil = ru
		held = false
		mu.Unlock()
		var line []byte
		late := false
		if err == nil {
			line, err = cn.br.ReadSlice('\n') // readLine, its common case inlined
			if err != nil || len(cn.part) > 0 {
				late = err != nil && isTimeout(err)
				line, err = cn.readMore(line, err)
			}
		}
		// decode, inlined: a status line's numbers, read here into dec
		// (nums of them; -1: not a decision; longDecision: more than dec
		// holds) rather than in the frame of the check they answer.
		nums := -1
		if e := len(line) - 2; err == nil && e >= 2 && line[0] == '+' && line[e] == '\r' {
			nums = 0
			start := 1 // where the number being read starts
			var v int64
			for i := 1; i <= e; i++ {
				if b := line[i]; b == ' ' || i == e {
					if i == start || i-start > maxDigits || v < 0 {
						nums = -1
						break
					}
					if nums == len(dec) {
						nums = longDecision // decoded by finish's way
						break
					}
					dec[nums] = v
					nums++
					v = 0
					start = i + 1
				} else if b -= '0'; b <= 9 {
					v = v*10 + int64(b)
				} else {
					nums = -1
					break
				}
			}
		}
		mu.Lock()
		held = true
		if cn.dead != nil {
			break // killed meanwhile (a failed write, closed idle): every call failed
		}
		ru = cn.readUntil
		if late {
			cn.readUntil = -1 // the late look set a deadline of its own (lateRead): set it again
		}
		if err != nil && isTimeout(err) && until == 0 {
			if ru == watch && len(cn.queue) > 0 && cn.oldestDeadline() == 0 {
				cn.kill(errStale) // replies owed to no one an idle watch long: Redis is gone
				break
			}
			if ru == watch && c != nil {
				held = false
				mu.Unlock()
				in := c.holds(cn)
				mu.Lock()
				held = true
				if !in && len(cn.queue) == 0 && cn.dead == nil {
					cn.kill(errConnDead) // out of its pool (dropped, forgotten) and idle: it ends
					break
				}
			}
			if ru == staleDeadline || ru == watch {
				cn.readUntil = -1 // set again at the top
			}
			continue
		}
		if len(cn.queue) == 0 {
			if err == nil {
				err = ErrBadReply // a reply no call of ours gets
			} else if isTimeout(err) {
				continue // a deadline of calls answered since
			}
			cn.kill(err)
			break
		}
		if err == io.EOF && len(cn.queue) == 1 {
			cn.closedBefore(&held) // err is EOF: the call may not have reached Redis
			break
		}
		if err != nil || line[0] != '+' || len(line) < 3 {
			cn.take(line, err)
			continue
		}
		// take, pop, finish and wake, their common case inlined.
		cl := cn.queue[0]
		cn.queue[0] = nil
		cn.queue = cn.queue[1:]
		atomic.StoreInt64(&cn.inflight, int64(len(cn.queue)))
		now := int64(time.Since(processStart)) + monoOrigin // clock.Mono(), inlined
		if c != nil {
			atomic.StoreInt64(&c.answered, now)
		}
		if next := cn.queue; len(next) > 0 && !next[0].done && next[0].deadline != 0 {
			extendTo(next[0], now)
		}
		if !cl.done {
			if d := cl.d; d == nil {
				cl.line = append(cl.line[:0], line...)
			} else if nums == len(d) {
				copy(d, dec)
			} else if nums == longDecision {
				cl.err = decode(line, d, nil)
			} else {
				cl.err = ErrBadReply
			}
			cl.done = true
			if cl.waiting {
				cl.waiting = false
				cl.wake <- struct{}{}
			}
		}
	}
	mu.Unlock()
}

// closedBefore ends cn, which Redis closed (EOF) with one call owed: did
// the call reach Redis before it closed the connection? Redis closes a
// connection it has read everything from with a FIN, and its kernel
// answers data that comes after that with a reset. So a call written
// after the FIN came (the reader had not seen it yet: a burst right
// after a CLIENT KILL or a failover) draws a reset within a round trip,
// and one Redis read before closing draws none: after resetWait, an
// empty write on the socket fails only in the first case. That call
// cannot have run, and fails with errNotSent (the check tries it on
// another connection); any other may have run and fails with EOF. No
// call is written meanwhile: cn is dead from the start. Requires cn.mu
// held; returns with it held and cn killed (held: the reader's record of
// it).
func (cn *rconn) closedBefore(held *bool) {
	cn.dead = io.EOF
	atomic.StoreInt64(&cn.inflight, deadLoad)
	*held = false
	cn.mu.Unlock()
	time.Sleep(resetWait)
	nc := cn.nc
	if tc, ok := nc.(*tls.Conn); ok {
		nc = tc.NetConn()
	}
	_, werr := nc.Write(nil)
	cn.mu.Lock()
	*held = true
	if werr != nil && !isTimeout(werr) && len(cn.queue) == 1 {
		finish(cn.queue[0], nil, errNotSent)
	}
	cn.dead = nil
	cn.kill(io.EOF)
}

// resetWait is how long closedBefore waits for a reset: a few round trips
// on a LAN. A reset later than that is not seen, and the call counts as
// possibly run (the caller's failure policy decides it).
const resetWait = 2 * time.Millisecond

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
	if c := cn.pool; c != nil {
		atomic.StoreInt64(&c.answered, clock.Mono())
	}
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
// staleAfter; 0 when no call waits (the replies owed are owed to no one:
// the reader waits for them with no deadline, and a connection is judged
// stale only while a call waits). Requires cn.mu held.
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
	return earliest
}

// staleAfter is how long past its deadline a connection may owe a reply
// before it is closed (a frozen or overloaded Redis).
const staleAfter = 250 * time.Millisecond

// expire fails the waiting calls whose deadline has passed, and reports
// whether the connection owes a reply staleAfter past its deadline.
// Requires cn.mu held.
func (cn *rconn) expire(now int64) bool {
	var answered int64 // when Redis last answered one of the node's calls
	if c := cn.pool; c != nil {
		answered = atomic.LoadInt64(&c.answered)
	}
	for _, cl := range cn.queue {
		if cl.done || cl.deadline == 0 || now < cl.deadline {
			continue
		}
		// Redis answered the node's other calls within this call's
		// timeout: it is working through a burst written before this
		// call (on this pod's other connections, or other pods'), not
		// failing. The call waits on, up to queueWait timeouts after its
		// write.
		if last := cl.sent + queueWait*cl.timeout; now-answered < cl.timeout && now < last {
			cl.deadline = answered + cl.timeout // after now
			if cl.deadline > last {
				cl.deadline = last
			}
			continue
		}
		finish(cl, nil, ErrTimeout)
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
// whether it did. (Its lock is held only briefly: writes happen under the
// write lock, wmu.)
func (cn *rconn) closeIfIdle() bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if len(cn.queue) > 0 {
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
// a slow Redis, not a busy scheduler. The look has the same flaw: a look
// that waited on an empty socket ends at its deadline, but one whose
// goroutine was descheduled between setting the deadline and reading
// ends past it, maybe without having looked; so a look that ended more
// than lateWake past its deadline looks again, up to lateLooks looks.
func lateRead(cn *rconn) ([]byte, error) {
	for i := 1; ; i++ {
		until := time.Now().Add(lateGrace)
		if err := cn.nc.SetReadDeadline(until); err != nil {
			return nil, err
		}
		line, err := cn.br.ReadSlice('\n')
		if err == nil || !isTimeout(err) || i == lateLooks || time.Since(until) < lateWake {
			return line, err
		}
		cn.part = append(cn.part, line...) // bufio dropped it: see readLine
	}
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
