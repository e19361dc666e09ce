package redis

// The side connection: one connection per Redis node, apart from the
// pool, for the commands outside a request's check (heartbeats, the
// region exchange). Plain commands only, pipelined; never a script, so
// that INFO commandstats counts the checks alone among the scripts. Each
// use holds the connection for one batch within the dial budget; a
// failure closes it, and the next use dials again.

import (
	"sync/atomic"
)

// onSide runs fn on c's side connection, dialling it first if needed; an
// error from fn closes it.
func (c *Pool) onSide(fn func(cn *rconn) error) error {
	c.sideMu.Lock()
	defer c.sideMu.Unlock()
	if atomic.LoadInt32(&c.sideStale) == 1 {
		c.closeSide()
	}
	if c.side == nil {
		cn, err := c.dialSafe(false) // it never runs the script
		if err != nil {
			return err
		}
		c.side = cn
	}
	if err := fn(c.side); err != nil {
		c.side.mu.Lock()
		c.side.kill(err)
		c.side.mu.Unlock()
		c.side = nil
		c.suspect() // what failed it may have failed the pool's too
		return err
	}
	return nil
}

// SideDo writes cmds (n commands, pipelined) on the side connection and
// reads their n replies (readValues).
func (c *Pool) SideDo(cmds []byte, n int) ([][]string, error) {
	var out [][]string
	err := c.onSide(func(cn *rconn) error {
		if err := cn.nc.SetDeadline(c.now().Add(c.dialTimeout)); err != nil {
			return err
		}
		if _, err := cn.nc.Write(cmds); err != nil {
			return err
		}
		out = make([][]string, 0, n)
		for i := 0; i < n; i++ {
			v, err := readValues(cn.br)
			if err != nil {
				return err
			}
			out = append(out, v)
		}
		return nil
	})
	return out, err
}
