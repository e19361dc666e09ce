package e2e

// DelayProxy: a TCP proxy on a loopback port in front of one address that
// delays every byte by a fixed time each way, as a link between two
// regions does, and counts what crosses it. The multi-region suite puts
// one in front of each region's Redis for each other region (the peer
// endpoints of the region options), so that a test can cut a link
// (Cut: the port refuses, open connections are closed), restore it on the
// same port (Restore), and count the commands and bytes one region sends
// another.

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// DelayProxy forwards connections to Target, each chunk no earlier than
// Delay after it arrived, in order.
type DelayProxy struct {
	Target string
	Delay  time.Duration

	addr string // 127.0.0.1:port, kept across Cut and Restore

	mu     sync.Mutex // guards ln, conns, cut, closed
	ln     net.Listener
	conns  map[net.Conn]struct{}
	cut    bool
	closed bool
	wg     sync.WaitGroup // the accept loop and every connection's pumps

	up, down, commands, accepted int64 // atomic
}

// ProxyStats is a snapshot of a DelayProxy's counters.
type ProxyStats struct {
	BytesUp   int64 // client -> target
	BytesDown int64 // target -> client
	Commands  int64 // RESP commands client -> target
	Accepted  int64 // connections accepted
}

// Sub returns s - o, counter by counter.
func (s ProxyStats) Sub(o ProxyStats) ProxyStats {
	return ProxyStats{s.BytesUp - o.BytesUp, s.BytesDown - o.BytesDown, s.Commands - o.Commands, s.Accepted - o.Accepted}
}

// Add returns s + o, counter by counter.
func (s ProxyStats) Add(o ProxyStats) ProxyStats {
	return ProxyStats{s.BytesUp + o.BytesUp, s.BytesDown + o.BytesDown, s.Commands + o.Commands, s.Accepted + o.Accepted}
}

// StartDelayProxy listens on a free loopback port in front of target.
func StartDelayProxy(target string, delay time.Duration) (*DelayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &DelayProxy{Target: target, Delay: delay, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's host:port, the same before and after Cut and Restore.
func (p *DelayProxy) Addr() string { return p.addr }

// Stats returns the counters.
func (p *DelayProxy) Stats() ProxyStats {
	return ProxyStats{atomic.LoadInt64(&p.up), atomic.LoadInt64(&p.down), atomic.LoadInt64(&p.commands), atomic.LoadInt64(&p.accepted)}
}

// Cut closes the listener and every open connection: until Restore, a
// dial of Addr is refused.
func (p *DelayProxy) Cut() {
	p.mu.Lock()
	p.cut = true
	ln := p.ln
	p.ln = nil
	conns := p.conns
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for c := range conns {
		_ = c.Close()
	}
}

// IsCut reports whether the link is cut.
func (p *DelayProxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Restore listens again on the same port. The port was ours a moment ago;
// the listen is retried for a second in case the kernel holds it briefly.
func (p *DelayProxy) Restore() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errors.New("delay proxy closed")
	}
	if !p.cut {
		p.mu.Unlock()
		return nil
	}
	p.mu.Unlock()
	var ln net.Listener
	var err error
	for deadline := time.Now().Add(time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ln, err = net.Listen("tcp", p.addr); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("delay proxy: listen again on %s: %w", p.addr, err)
	}
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.serve(ln)
	return nil
}

// Close cuts the link for good and waits for every goroutine.
func (p *DelayProxy) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.Cut()
	p.wg.Wait()
}

func (p *DelayProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Cut
			}
			atomic.AddInt64(&p.accepted, 1)
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.handle(c)
			}()
		}
	}()
}

// track adds c to the open connections, or reports that the link is cut.
func (p *DelayProxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *DelayProxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

func (p *DelayProxy) handle(client net.Conn) {
	server, err := net.DialTimeout("tcp", p.Target, 2*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	if !p.track(client, server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	var parser respCounter
	done := make(chan struct{}, 2)
	go func() {
		p.pump(server, client, &p.up, func(b []byte) { atomic.AddInt64(&p.commands, parser.feed(b)) })
		done <- struct{}{}
	}()
	go func() {
		p.pump(client, server, &p.down, nil)
		done <- struct{}{}
	}()
	<-done
	<-done
	_ = client.Close()
	_ = server.Close()
	p.untrack(client, server)
}

// chunk is bytes read from one side and when.
type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst, each chunk written no earlier than Delay after
// it was read: a reader queues chunks with their arrival time, a writer
// sleeps until each is due (no lock held). At EOF or an error on either
// side, dst is closed for writing (or closed) once the queue is drained.
func (p *DelayProxy) pump(dst, src net.Conn, bytes *int64, observe func([]byte)) {
	q := make(chan chunk, 4096)
	go func() {
		defer close(q)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				at := time.Now()
				atomic.AddInt64(bytes, int64(n))
				if observe != nil {
					observe(buf[:n])
				}
				q <- chunk{buf[:n], at}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for c := range q {
		if failed {
			continue // drain, so the reader never blocks
		}
		if wait := time.Until(c.at.Add(p.Delay)); wait > 0 {
			time.Sleep(wait)
		}
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			_ = src.Close() // the reader ends
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok && !failed {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// respCounter counts the commands of a client's RESP stream: top-level
// arrays (*N\r\n followed by N bulk strings), and inline commands (a line
// that is not an array) at a command boundary. It is fed the stream in
// arbitrary chunks.
type respCounter struct {
	line    []byte // the header line being read (without \r\n)
	elems   int    // elements still to come in the current array
	bulk    int    // payload bytes (with the \r\n) still to skip
	inBulk  bool
	tooLong bool // a line longer than maxRESPLine (kept short, not stored)
}

const maxRESPLine = 64

// feed consumes b and returns the number of commands that started in it.
func (r *respCounter) feed(b []byte) int64 {
	var n int64
	for len(b) > 0 {
		if r.inBulk {
			k := r.bulk
			if k > len(b) {
				k = len(b)
			}
			r.bulk -= k
			b = b[k:]
			if r.bulk == 0 {
				r.inBulk = false
				r.elems--
			}
			continue
		}
		i := 0
		for i < len(b) && b[i] != '\n' {
			i++
		}
		if len(r.line)+i <= maxRESPLine {
			r.line = append(r.line, b[:i]...)
		} else {
			r.tooLong = true
		}
		if i == len(b) { // the line goes on in the next chunk
			return n
		}
		b = b[i+1:]
		line := r.line
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		r.line = r.line[:0]
		if r.tooLong {
			// Only an inline command can be that long at the top level.
			r.tooLong = false
			if r.elems == 0 {
				n++
			}
			continue
		}
		if len(line) == 0 {
			continue
		}
		num := atoiRESP(line[1:])
		if r.elems == 0 { // a command boundary
			n++
			if line[0] == '*' && num > 0 {
				r.elems = num
			}
			continue
		}
		switch line[0] {
		case '$':
			if num < 0 {
				r.elems--
			} else {
				r.inBulk, r.bulk = true, num+2
				if r.bulk == 0 {
					r.inBulk = false
					r.elems--
				}
			}
		case '*': // a nested array: its elements replace it
			r.elems += num - 1
		default:
			r.elems--
		}
	}
	return n
}

// atoiRESP parses a RESP length; anything unparsable is -1.
func atoiRESP(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	neg := b[0] == '-'
	if neg {
		b = b[1:]
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return -1
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		return -n
	}
	return n
}
