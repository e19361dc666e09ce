package redis

// A check on one node: PoolCheck (the hot path), pipelined behind
// others, tried again when it cannot have run (stale.go), and the
// prober's PING.

import (
	"sync/atomic"
	"time"
)

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

// PoolCheck is the hot path of a check on this node, at monotonic ns: the
// check goes to the least busy connection (the first idle one), pipelined
// behind the calls in flight there, and the pool may grow (pick). Its
// reply comes from the connection's reader.
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
	// cn.exchange and await, inlined: this is the hot path.
	cl := newCall()
	cl.d = d // its reader decodes the reply into d
	err := send(cn, nil, cl, nil, cmd, cmd.shaHead, key, timeout, c.now)
	if err == nil || cl.done {
		mu := &cn.mu
		mu.Lock()
		for !cl.done {
			cl.waiting = true
			mu.Unlock()
			<-cl.wake
			mu.Lock()
		}
		mu.Unlock()
		err = cl.err
	}
	if err != nil {
		return c.failedOn(cn, err, cmd, key, d, timeout)
	}
	releaseCall(cl)
	if d[0] != 1 && cmd.verify != nil {
		return cmd.verify(d)
	}
	return nil
}

// failedOn goes on after a check on cn failed with
// err, as roundTrip does: a lost connection is tried once more (retry),
// NOSCRIPT is answered by EVAL, any other error is the check's.
func (c *Pool) failedOn(cn *rconn, err error, cmd *Command, key string, d []int64, timeout time.Duration) error {
	cl, err := c.retry(cn, nil, err, nil, nil, cmd, cmd.shaHead, key, timeout)
	if err == errNoScript {
		cl, err = c.roundTrip(nil, nil, cmd, cmd.evalHead, key, timeout, 0)
	}
	return answered(cl, err, d, cmd)
}

// shared runs a check the shared way (call), when the pool had no
// connection to pick.
func (c *Pool) shared(cmd *Command, key string, d []int64, timeout time.Duration) error {
	cl, err := c.call(cmd, key, timeout)
	return answered(cl, err, d, cmd)
}

// answered decodes the reply of cl into d and gives cl back, or returns
// err.
func answered(cl *call, err error, d []int64, cmd *Command) error {
	if err != nil {
		return err
	}
	err = decode(cl.line, d, cmd)
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

// probe checks that the node answers within timeout, on a fresh
// connection (those pooled may have died with the server): the idle ones
// are closed, the new one joins the pool.
func (c *Pool) probe(timeout time.Duration) error {
	cn, err := c.dialSafe(true)
	if err != nil {
		return err
	}
	startReader(cn, c)
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
	if err := cn.deadErr(); err != nil { // its reader saw it die since the PONG
		c.mu.Unlock()
		return err
	}
	c.epoch++ // those open before the probe may be its predecessor's
	cn.epoch = c.epoch
	c.conns = append(c.conns, cn)
	c.dialFailed = false
	c.dialDone.Broadcast()
	c.mu.Unlock()
	return nil
}
