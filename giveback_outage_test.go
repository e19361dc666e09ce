package tollgate

import (
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// cutProxy forwards loopback connections to a redis-server, and can cut
// them all off for a while (a partition, a restart that keeps its data):
// open connections closed, new ones closed at once.
type cutProxy struct {
	l      net.Listener
	to     string
	mu     sync.Mutex
	conns  []net.Conn
	cutEnd time.Time
}

func newCutProxy(t *testing.T, to string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, to: to}
	t.Cleanup(func() {
		l.Close()
		p.cut(0)
	})
	go p.serve()
	return p
}

func (p *cutProxy) addr() string { return p.l.Addr().String() }

func (p *cutProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		if time.Now().Before(p.cutEnd) {
			p.mu.Unlock()
			c.Close()
			continue
		}
		up, err := net.Dial("tcp", p.to)
		if err != nil {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(up, c); up.Close() }()
		go func() { _, _ = io.Copy(c, up); c.Close() }()
	}
}

// cut closes every connection and refuses new ones for d.
func (p *cutProxy) cut(d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cutEnd = time.Now().Add(d)
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// A give-back Redis could not take during an outage (a 2 s cut, Redis
// keeping its data) is tried again until it is taken: no slot is held
// once Redis is back. Seen before: tried inline and once more from the
// queue, then dropped; the cap's 3 slots held for its maxDuration (10m),
// the route refused by Redis.
func TestGiveBacksOutliveAnOutage(t *testing.T) {
	addr := redistest.Start(t)
	p := newCutProxy(t, addr)
	g := newGate()
	h := capHandler(t, p.addr(), g, config.Concurrency{Max: 3, Key: "class", MaxDuration: "10m"}, func(c *config.Config) { c.Redis.Timeout = "50ms" })
	zkey := bucket.KeyPrefix + "c:" + h.conf.Class + "}}c"
	recs, done := burst(h, g, 3, func(i int) string { return fmt.Sprint("c", i) })
	waitArrived(t, g, 3)
	if n := slots(t, addr, zkey); n != "3" {
		t.Fatalf("%s slots held, want 3", n)
	}
	p.cut(2 * time.Second)
	close(g.open) // the requests end during the outage
	done.Wait()
	for i, r := range recs {
		if r.Code != 200 {
			t.Errorf("request %d: %d", i, r.Code)
		}
	}
	time.Sleep(2 * time.Second) // the outage's end
	deadline := time.Now().Add(5 * time.Second)
	for slots(t, addr, zkey) != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("%s slots held 5 s after Redis came back, want 0", slots(t, addr, zkey))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := atomic.LoadInt64(&h.conf.TopQuotas[0].Metrics.HeldLost); n != 0 {
		t.Errorf("%d give-backs counted lost, want 0 (each taken once Redis was back)", n)
	}
}
