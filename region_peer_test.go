package tollgate

// The exchange's own resources: its lease and its reads of the peers.

import (
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Two exchangers of one region in one process (its Redis written once as
// 127.0.0.1 and once as localhost: two backends, two exchangers) contend
// for the lease like two pods: one leads. (With the process's identity as
// the holder, both held it for good.)
func TestRegionTwoExchangersOneLease(t *testing.T) {
	own, peer := startLiveRedis(t), startLiveRedis(t)
	class := uniqueName("region")
	mk := func(addr string) *exchanger {
		return exchangerOf(handlerOn(t, addr, func(c *Config) {
			c.Class = class
			c.Redis.Username = ""
			// The loops sleep to the hour: the test leads itself.
			c.Region = &RegionConfig{Name: "a", Interval: "1h", Peers: []PeerConfig{{Name: "b", Endpoints: []string{peer}}}}
		}))
	}
	x := mk(own)
	y := mk("localhost:" + own[strings.LastIndex(own, ":")+1:])
	if x == y {
		t.Fatal("one exchanger for both spellings of the Redis")
	}
	for round := 0; round < 2; round++ { // taken, then renewed
		lx, ly := x.lead(x.settings()), y.lead(y.settings())
		if lx == ly {
			t.Errorf("round %d: first exchanger leads %v, second %v; want exactly one", round, lx, ly)
		}
	}
}

// silentPeer is a peer that accepts connections and reads what it is sent,
// never answering; closed at the test's end.
func silentPeer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
			go func() {
				b := make([]byte, 512)
				for {
					if _, err := c.Read(b); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	})
	return l.Addr().String()
}

// A peer that never answers, with an interval (200 ms) shorter than its
// read's budget (its timeout, 1 s): at most one read of it is in flight;
// an exchange that finds one outstanding counts the peer unread rather
// than starting another. (Each exchange started one, queued behind the
// last on the peer's connection: the goroutines piled up, 4 a second.)
func TestRegionSilentPeerOneReadInFlight(t *testing.T) {
	peer := silentPeer(t)
	a := handlerOn(t, startLiveRedis(t), func(c *Config) {
		c.Class = uniqueName("region")
		c.Redis.Username = ""
		c.Region = &RegionConfig{Name: "a", Interval: "200ms", Peers: []PeerConfig{{Name: "b", Endpoints: []string{peer}, Timeout: "1s"}}}
	})
	x := exchangerOf(a)
	time.Sleep(time.Second) // the loop runs, its first read is out
	before := runtime.NumGoroutine()
	time.Sleep(3 * time.Second) // 15 intervals
	after := runtime.NumGoroutine()
	t.Logf("goroutines %d, then %d after 15 intervals", before, after)
	if after-before > 3 {
		t.Errorf("a silent peer: %d goroutines, %d after 15 more intervals of 200 ms (a read of 1 s each): the reads pile up", before, after)
	}
	if n := atomic.LoadInt64(&x.exchangesOK); n < 5 {
		t.Errorf("%d exchanges in 4 s of a 200 ms interval with a peer that never answers, want at least 5", n)
	}
}
