package redis

// The side connection: one connection per Redis node, apart from the
// pool, for the commands outside a request's check (heartbeats, the
// region exchange). Plain commands only, pipelined; never a script, so
// that INFO commandstats counts the checks alone among the scripts. Each
// use holds the connection for one batch within the dial budget; a
// failure closes it, and the next use dials again.

import (
	"bufio"
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

// maxReplyBytes bounds the bytes of one reply readValues accepts.
const maxReplyBytes = 4 << 20

// readValues reads one reply as strings: an integer, status or bulk string
// as one, an array of them (not nested) as its elements (a nil one as ""),
// a nil bulk or array as none. An error reply is one string starting with "-", so that
// a pipeline's other replies are still read. At most maxReplyBytes are
// accepted.
func readValues(br *bufio.Reader) ([]string, error) {
	line, err := replyLine(br)
	if err != nil {
		return nil, err
	}
	if line[0] != '*' {
		budget := maxReplyBytes
		v, isNil, err := readScalar(br, line, &budget)
		if err != nil || isNil {
			return nil, err
		}
		return []string{v}, nil
	}
	if string(line) == "*-1" {
		return nil, nil
	}
	n, err := parseCount(line[1:], maxArrayLen)
	if err != nil {
		return nil, err
	}
	return readElements(br, n, true)
}

// readElements reads the n elements of an array whose line was read: bulk
// strings and integers, and when lenient statuses, errors (as "-...") and
// nil bulks (as ""); at most maxReplyBytes in all.
func readElements(br *bufio.Reader, n int, lenient bool) ([]string, error) {
	budget := maxReplyBytes
	size := n
	if size > arrayPrealloc {
		size = arrayPrealloc
	}
	out := make([]string, 0, size)
	for i := 0; i < n; i++ {
		line, err := replyLine(br)
		if err != nil {
			return nil, err
		}
		if budget -= len(line); budget < 0 || !lenient && line[0] != ':' && line[0] != '$' || !lenient && string(line) == "$-1" {
			return nil, ErrBadReply
		}
		v, _, err := readScalar(br, line, &budget)
		if err != nil {
			return nil, err
		}
		out = append(out, v) // a nil element (HMGET's missing field) as ""
	}
	return out, nil
}

// replyLine reads a reply's line, without its CRLF.
func replyLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil || len(line) < 3 || line[len(line)-2] != '\r' {
		if err == nil || err == bufio.ErrBufferFull {
			err = ErrBadReply
		}
		return nil, err
	}
	return line[:len(line)-2], nil
}

// readScalar reads the rest of a scalar reply whose line is line, taking
// its bytes from budget; an array is refused.
func readScalar(br *bufio.Reader, line []byte, budget *int) (string, bool, error) {
	switch line[0] {
	case '-':
		return string(line), false, nil
	case ':', '+':
		return string(line[1:]), false, nil
	case '$':
		if string(line) == "$-1" {
			return "", true, nil
		}
		size, err := parseCount(line[1:], maxBulkLen)
		if err != nil || size > *budget {
			return "", false, ErrBadReply
		}
		*budget -= size
		b, err := readBulk(br, size)
		if err != nil {
			return "", false, err
		}
		return string(b), false, nil
	}
	return "", false, ErrBadReply
}
