package tollgate

// Coalesced round trips (redis.pipeline > 0).
//
// Checks are spread round-robin over a few lanes. A lane sends the checks
// queued on it as one batch on one pooled connection: every EVALSHA in one
// write, then the replies read in order through one bufio.Reader. The first
// check to find its lane idle leads: it takes the whole queue (its own check
// included), runs it, and wakes the others; one of those whose check is not
// done yet (it arrived during the batch) leads the next batch. So at
// concurrency 1 a batch is one check; at concurrency 128 over 4 lanes, about
// 32, which makes one write and a read or two instead of 32 of each, and
// Redis reads and answers them in one go.
//
// Waiting is a sync.Cond (no channel, no select: see STYLE.md). A check
// waits at most for the batch in flight, whose deadline is its earliest
// member's, and then for its own batch, whose deadline is at most its own;
// since checks arriving later have later deadlines (same timeout), no check
// waits past its own deadline. A check whose deadline passed while it waited
// is not sent (errLate: the pod's own state). Failures: see failBatch.

import (
	"bytes"
	"sync"
	"sync/atomic"
	"time"
)

// maxBatch bounds the checks in one batch (one write of ~200 bytes each).
const maxBatch = 256

// lane is one stream of batches. Guarded by mu.
type lane struct {
	mu    sync.Mutex
	cond  *sync.Cond
	queue []*pendingCheck
	busy  bool // a leader is running a batch
}

// pendingCheck is one check in a lane: written by the leader before done is
// set under lane.mu.
type pendingCheck struct {
	cmd      *command
	key      string
	req      []byte // the EVALSHA, prepared by the check's goroutine
	deadline time.Time
	line     []byte // the decision's reply line, copied; decoded by the check
	err      error
	retry    bool // NOSCRIPT: sent again as EVAL
	done     bool
}

// newLanes returns n lanes.
func newLanes(n int) []*lane {
	ls := make([]*lane, n)
	for i := range ls {
		l := &lane{}
		l.cond = sync.NewCond(&l.mu)
		ls[i] = l
	}
	return ls
}

// checkCoalesced is check through a lane. A check that finds its lane
// idle runs alone, on the direct path (checkDirect), holding the lane; one
// that finds it busy queues: its call is prepared by its own goroutine,
// the leader only writes and reads bytes, and each check decodes its own
// reply once woken, so the interpreted work stays spread over the waiting
// goroutines.
func (c *redisClient) checkCoalesced(cmd *command, key string, d []int64, now time.Time, ns int64, timeout time.Duration) error {
	l := c.lanes[int(atomic.AddInt64(&c.nextLane, 1)%int64(len(c.lanes)))]
	l.mu.Lock()
	if !l.busy {
		l.busy = true
		l.mu.Unlock()
		err := c.checkDirect(cmd, key, d, now, ns, timeout)
		l.mu.Lock()
		l.busy = false
		if len(l.queue) > 0 {
			l.cond.Broadcast()
		}
		l.mu.Unlock()
		return err
	}
	l.mu.Unlock()
	p := &pendingCheck{cmd: cmd, key: key, deadline: now.Add(timeout), req: cmd.appendCall(nil, cmd.shaHead, key)}
	l.mu.Lock()
	l.queue = append(l.queue, p)
	for !p.done {
		if l.busy {
			l.cond.Wait()
			continue
		}
		l.busy = true
		batch := l.queue
		if len(batch) > maxBatch {
			batch = batch[:maxBatch]
		}
		l.queue = append([]*pendingCheck(nil), l.queue[len(batch):]...)
		l.mu.Unlock()
		c.runBatch(batch)
		l.mu.Lock()
		for _, q := range batch {
			q.done = true
		}
		l.busy = false
		l.cond.Broadcast()
	}
	l.mu.Unlock()
	if p.err != nil {
		return p.err
	}
	return decode(p.line, d)
}

// runBatch sends batch on one connection and stores each outcome. A
// connection the server had closed (Redis restarted) is replaced once, as
// in retry.
func (c *redisClient) runBatch(batch []*pendingCheck) {
	now := c.now()
	live := make([]*pendingCheck, 0, len(batch))
	var deadline time.Time
	for _, p := range batch {
		if !p.deadline.After(now) {
			p.err = errLate
			continue
		}
		if len(live) == 0 || p.deadline.Before(deadline) {
			deadline = p.deadline
		}
		live = append(live, p)
	}
	if len(live) == 0 {
		return
	}
	for attempt := 0; attempt < 2; attempt++ {
		cn, err := c.get(deadline)
		if err != nil {
			failBatch(live, err)
			return
		}
		read, err := exchangeBatch(cn, live, deadline)
		if err == nil {
			c.put(cn, c.now())
			return
		}
		if err == errLate {
			c.put(cn, c.now())
			failBatch(live, err)
			return
		}
		c.discard(cn)
		if read > 0 || !isStale(err) || attempt == 1 {
			failBatch(live[read:], err)
			return
		}
		c.closeIdle()
	}
}

// failBatch gives every check of batch err.
func failBatch(batch []*pendingCheck, err error) {
	for _, p := range batch {
		p.err = err
	}
}

// exchangeBatch writes every check of batch in one write and reads their
// replies in order, storing each decision line or error reply; checks answered
// NOSCRIPT are sent again as EVAL, together, once all replies are in. It
// returns how many replies it read and the error that broke the stream
// (the connection is then unusable, except after errLate: nothing sent).
func exchangeBatch(cn *rconn, batch []*pendingCheck, deadline time.Time) (int, error) {
	if err := cn.nc.SetDeadline(deadline); err != nil {
		return 0, err
	}
	cn.buf = cn.buf[:0]
	for _, p := range batch {
		cn.buf = append(cn.buf, p.req...)
	}
	if n, err := cn.nc.Write(cn.buf); err != nil {
		return 0, lateWrite(n, err)
	}
	retries := 0
	for i, p := range batch {
		line, err := cn.br.ReadSlice('\n')
		if err != nil {
			if line, err = lateRead(cn, err); err != nil {
				return i, err
			}
		}
		switch {
		case len(line) >= 4 && line[0] == '+':
			p.line = append(p.line[:0], line...)
		case len(line) > 0 && line[0] == '-' && bytes.HasPrefix(line, noscript):
			p.retry = true
			p.err = errBadReply // until EVAL answers
			retries++
		case len(line) > 0 && line[0] == '-':
			p.err = replyError(line)
		default:
			// Not a reply this script gives: the stream cannot be trusted.
			return i, errBadReply
		}
	}
	if retries == 0 {
		return len(batch), nil
	}
	return len(batch), evalBatch(cn, batch)
}

// evalBatch sends the checks of batch marked retry as EVAL (the script
// cache was flushed) and reads their replies.
func evalBatch(cn *rconn, batch []*pendingCheck) error {
	cn.buf = cn.buf[:0]
	for _, p := range batch {
		if p.retry {
			cn.buf = p.cmd.appendCall(cn.buf, p.cmd.evalHead, p.key)
		}
	}
	if _, err := cn.nc.Write(cn.buf); err != nil {
		return err
	}
	for _, p := range batch {
		if !p.retry {
			continue
		}
		line, err := cn.br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) >= 4 && line[0] == '+' {
			p.line, p.err = append(p.line[:0], line...), nil
		} else {
			p.err = replyError(line)
		}
	}
	return nil
}
