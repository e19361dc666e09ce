package e2e

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// holdGate is a TCP proxy on a loopback port in front of a Redis. While
// held it reads what its clients send and forwards none of it, counting
// the scripts (EVALSHA, EVAL) each connection sent meanwhile; Release
// forwards what it held, in order, and what follows. Replies pass freely.
// So a test sees exactly how many checks a pod has in flight, and on which
// connections, whatever the scheduling: none can be answered while held.
type holdGate struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	cond    *sync.Cond // signalled when held or a connection's pending bytes change
	held    bool
	scripts []int // per connection, in accept order: scripts sent while held
	conns   []net.Conn
}

// startHoldGate listens on a port the kernel picks (no race) in front of
// target; the test's end closes it.
func startHoldGate(t *testing.T, target string) *holdGate {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &holdGate{ln: ln, target: target}
	g.cond = sync.NewCond(&g.mu)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.handle(c)
		}
	}()
	t.Cleanup(g.close)
	return g
}

// Addr is the gate's host:port.
func (g *holdGate) Addr() string { return g.ln.Addr().String() }

// Hold stops forwarding what clients send.
func (g *holdGate) Hold() {
	g.mu.Lock()
	g.held = true
	g.mu.Unlock()
}

// Release forwards what was held and what follows.
func (g *holdGate) Release() {
	g.mu.Lock()
	g.held = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// waitHeld waits until the clients have sent want scripts while held, or
// within has passed, and returns the scripts each connection sent.
func (g *holdGate) waitHeld(want int, within time.Duration) []int {
	deadline := time.Now().Add(within)
	for {
		g.mu.Lock()
		per := append([]int(nil), g.scripts...)
		g.mu.Unlock()
		total := 0
		for _, n := range per {
			total += n
		}
		if total >= want || time.Now().After(deadline) {
			return per
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (g *holdGate) close() {
	_ = g.ln.Close()
	g.mu.Lock()
	for _, c := range g.conns {
		_ = c.Close()
	}
	g.held = false
	g.cond.Broadcast()
	g.mu.Unlock()
}

// handle proxies one connection: a reader that keeps reading (and
// counting) while held, a writer that forwards only when not held.
func (g *holdGate) handle(client net.Conn) {
	server, err := net.DialTimeout("tcp", g.target, 2*time.Second)
	if err != nil {
		_ = client.Close()
		return
	}
	g.mu.Lock()
	id := len(g.scripts)
	g.scripts = append(g.scripts, 0)
	g.conns = append(g.conns, client, server)
	g.mu.Unlock()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := server.Read(buf)
			if n > 0 {
				if _, werr := client.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		_ = client.Close()
	}()
	var pending []byte
	done := false
	go func() {
		g.mu.Lock()
		for {
			for (g.held || len(pending) == 0) && !done {
				g.cond.Wait()
			}
			if len(pending) == 0 {
				g.mu.Unlock()
				_ = server.Close()
				return
			}
			b := pending
			pending = nil
			g.mu.Unlock()
			_, err := server.Write(b)
			g.mu.Lock()
			if err != nil {
				done, pending = true, nil
			}
		}
	}()
	var sc scriptCounter
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		g.mu.Lock()
		if n > 0 {
			pending = append(pending, buf[:n]...)
			if k := sc.feed(buf[:n]); g.held {
				g.scripts[id] += k
			}
		}
		if err != nil {
			done = true
		}
		g.cond.Broadcast()
		g.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// scriptCounter counts the EVALSHA and EVAL commands of a client's RESP
// stream (arrays of bulk strings), fed in chunks.
type scriptCounter struct{ acc []byte }

func (s *scriptCounter) feed(b []byte) int {
	s.acc = append(s.acc, b...)
	n := 0
	for {
		name, size := nextCommand(s.acc)
		if size == 0 {
			return n
		}
		s.acc = append(s.acc[:0], s.acc[size:]...)
		if name == "EVALSHA" || name == "EVAL" {
			n++
		}
	}
}

// nextCommand parses the command at the start of b and returns its name
// (upper case) and length; 0 when b does not hold a whole one. A line that
// is not an array (an inline command) is skipped, nameless.
func nextCommand(b []byte) (string, int) {
	line := func(at int) (string, int) {
		i := bytes.Index(b[at:], []byte("\r\n"))
		if i < 0 {
			return "", -1
		}
		return string(b[at : at+i]), at + i + 2
	}
	head, at := line(0)
	if at < 0 {
		return "", 0
	}
	if head == "" || head[0] != '*' {
		return "", at
	}
	n, _ := strconv.Atoi(head[1:])
	name := ""
	for i := 0; i < n; i++ {
		h, next := line(at)
		if next < 0 || h == "" {
			return "", 0
		}
		l, _ := strconv.Atoi(h[1:])
		if next+l+2 > len(b) {
			return "", 0
		}
		if i == 0 {
			name = strings.ToUpper(string(b[next : next+l]))
		}
		at = next + l + 2
	}
	return name, at
}
