package redis

// Bounds of the connection lifecycle (stale.go), each found by an
// independent review and failing before its fix: connections being proven
// count against poolSize, a check relearns a topology no more often than
// minRefresh, the sentinel log quotes an address once, and CLIENT ID
// refused or garbled leaves a dial whole (its ID unknown).

import (
	"bufio"
	"bytes"
	"log"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// slowPingServer answers like redistest.Fake but delays PONG by pingDelay; it
// counts accepted connections.
type slowPingServer struct {
	l         net.Listener
	accepted  int64
	ids       int64
	pingDelay time.Duration
	evals     int64
	idReply   string // if set, CLIENT ID answers this
}

// addr is the server's address.
func (s *slowPingServer) addr() string { return s.l.Addr().String() }

func startSlowPing(t *testing.T, d time.Duration) *slowPingServer {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &slowPingServer{l: l, pingDelay: d}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			atomic.AddInt64(&s.accepted, 1)
			go s.conn(c)
		}
	}()
	return s
}

func (s *slowPingServer) conn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		args, err := redistest.ReadCommand(br)
		if err != nil {
			return
		}
		reply := "+OK\r\n"
		switch strings.ToUpper(args[0]) {
		case "CLIENT":
			if strings.EqualFold(args[1], "ID") {
				reply = ":" + strconv.FormatInt(atomic.AddInt64(&s.ids, 1), 10) + "\r\n"
				if s.idReply != "" {
					reply = s.idReply
				}
			}
		case "SCRIPT":
			reply = "$40\r\n" + testScript.SHA + "\r\n"
		case "PING":
			time.Sleep(s.pingDelay)
			reply = "+PONG\r\n"
		case "EVALSHA", "EVAL":
			atomic.AddInt64(&s.evals, 1)
			reply = "+1 3 0 2000\r\n"
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// At poolSize 1, a proof in progress takes the only connection out of the
// list: a concurrent check finds the pool empty and dials a second one.
func TestPoolSizeOneStaysOneWhileProving(t *testing.T) {
	s := startSlowPing(t, 100*time.Millisecond)
	c := NewPool(Options{Addr: s.addr(), Timeout: 500 * time.Millisecond, PoolSize: 1, Script: testScript})
	c.Warm()
	waitConns(t, c, 1)
	cmd := command(4)
	c.suspect()
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if i > 0 {
				time.Sleep(20 * time.Millisecond) // while the first check's PING is out
			}
			d := make([]int64, 4)
			if err := c.check(cmd, "abcd", d, 500*time.Millisecond); err != nil {
				t.Errorf("check: %v", err)
			}
		}(i)
	}
	wg.Wait()
	time.Sleep(100 * time.Millisecond)
	if n, a := c.OpenConns(), atomic.LoadInt64(&s.accepted); n > 1 || a > 1 {
		t.Fatalf("poolSize 1: %d connections open, %d dialled; want 1", n, a)
	}
}

// A cluster node refuses connections (dead, no failover yet): every check
// routed to it runs a synchronous topology refresh, ignoring minRefresh.
func TestRelearnRespectsMinRefresh(t *testing.T) {
	dl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := dl.Addr().String()
	dl.Close()
	_, port, _ := net.SplitHostPort(dead)
	slots := "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:" + port + "\r\n"
	seed := redistest.StartFakeWith(t, "", map[string]string{"CLUSTER": slots})
	rc := topoClient(Cluster, seed.Addr())
	ownAllSlots(rc, dead)
	atomic.StoreInt64(&rc.topo.lastRefresh, clock.Mono())
	cmd := command(14)
	d := make([]int64, 4)
	before := atomic.LoadInt64(&seed.Names)
	start := time.Now()
	for i := 0; i < 20; i++ {
		_ = rc.topologyCheck(cmd, testKey, d, 50*time.Millisecond)
	}
	el := time.Since(start)
	refreshes := atomic.LoadInt64(&seed.Names) - before
	if want := int64(el/minRefresh) + 2; refreshes > want {
		t.Fatalf("20 checks on a refusing node in %v: %d topology queries to the seed, want at most %d (minRefresh %v)", el, refreshes, want, minRefresh)
	}
}

// A switch between two primaries names the old one quoted once.
func TestSentinelSwitchLogQuotesOnce(t *testing.T) {
	b := topoClient(Sentinel, "127.0.0.1:1")
	var buf bytes.Buffer
	log.SetOutput(&buf)
	b.setPrimary("127.0.0.1:6380")
	b.setPrimary("127.0.0.1:6381")
	log.SetOutput(os.Stderr)
	want := `is now "127.0.0.1:6381" (was "127.0.0.1:6380")`
	if !strings.Contains(buf.String(), want) {
		t.Fatalf("log %q, want %q", buf.String(), want)
	}
}

// Bursts after events (each making every connection suspect): the pool
// must stay within poolSize.
func TestPoolStaysWithinPoolSizeAfterSuspicions(t *testing.T) {
	burstsWithinPoolSize(t, 30, func(c *Pool) { c.suspect() })
}

// The same with idle spells (proveAfter) instead of events.
func TestPoolStaysWithinPoolSizeAfterIdleSpells(t *testing.T) {
	burstsWithinPoolSize(t, 8, func(_ *Pool) { time.Sleep(proveAfter + 50*time.Millisecond) })
}

// burstsWithinPoolSize runs rounds bursts of 64 concurrent checks on a
// pool of 4, each after before, and fails the test if more than 4
// connections are ever open or dialled.
func burstsWithinPoolSize(t *testing.T, rounds int, before func(c *Pool)) {
	t.Helper()
	s := startSlowPing(t, 5*time.Millisecond)
	c := NewPool(Options{Addr: s.addr(), Timeout: 500 * time.Millisecond, PoolSize: 4, Script: testScript})
	c.Warm()
	waitConns(t, c, 1)
	cmd := command(4)
	most := 0
	for round := 0; round < rounds; round++ {
		before(c)
		var wg sync.WaitGroup
		for i := 0; i < 64; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := make([]int64, 4)
				_ = c.check(cmd, "abcd", d, 500*time.Millisecond)
			}()
		}
		wg.Wait()
		time.Sleep(20 * time.Millisecond)
		if n := c.OpenConns(); n > most {
			most = n
		}
	}
	if a := atomic.LoadInt64(&s.accepted); most > 4 || a > 4 {
		t.Fatalf("poolSize 4: up to %d connections open, %d dialled in %d bursts; want at most 4", most, a, rounds)
	}
}

func TestClientIDRefusedOrGarbage(t *testing.T) {
	for _, r := range []string{"-NOPERM User x has no permissions to run the 'client|id' command\r\n", "$3\r\nabc\r\n", ":-4\r\n", "*0\r\n", "-LOADING Redis is loading\r\n"} {
		s := startSlowPing(t, 0)
		s.idReply = r
		c := NewPool(Options{Addr: s.addr(), Timeout: 500 * time.Millisecond, PoolSize: 1, Script: testScript})
		cn, err := c.dial(time.Now().Add(time.Second), true)
		if err != nil {
			t.Errorf("CLIENT ID answered %q: dial failed: %v", r, err)
			continue
		}
		if cn.id != 0 {
			t.Errorf("CLIENT ID answered %q: id %d, want 0", r, cn.id)
		}
		cn.mu.Lock()
		cn.kill(errConnDead)
		cn.mu.Unlock()
	}
}

// A node the topology forgets while one of its connections is out for a
// PING: the connection, proven, does not rejoin the forgotten pool (no one
// would close it).
func TestForgottenNodeTakesNoProvenConnection(t *testing.T) {
	s := startSlowPing(t, 100*time.Millisecond)
	c := NewPool(Options{Addr: s.addr(), Timeout: 500 * time.Millisecond, PoolSize: 2, Script: testScript})
	c.Warm()
	waitConns(t, c, 1)
	c.suspect()
	done := make(chan error, 1)
	go func() {
		d := make([]int64, 4)
		done <- c.check(command(4), "abcd", d, 500*time.Millisecond)
	}()
	time.Sleep(30 * time.Millisecond) // the PING is out
	c.forget()
	<-done
	time.Sleep(50 * time.Millisecond)
	if n := c.OpenConns(); n != 0 {
		t.Fatalf("%d connections open on a forgotten node, want 0", n)
	}
}

// A lost connection's check is tried again only on another Redis process:
// told by run_id, or without it by a lower CLIENT ID; unknown is not
// restarted. runID takes only a well-formed run_id.
func TestRestartedTellsAnotherProcess(t *testing.T) {
	a := strings.Repeat("a", 40)
	b := strings.Repeat("b", 40)
	for _, tc := range []struct {
		desc       string
		lost, next *rconn
		want       bool
	}{
		{"same run_id, lower id", &rconn{run: a, id: 9}, &rconn{run: a, id: 2}, false},
		{"another run_id, higher id", &rconn{run: a, id: 2}, &rconn{run: b, id: 9}, true},
		{"no run_id, lower id", &rconn{id: 9}, &rconn{id: 2}, true},
		{"no run_id, higher id", &rconn{id: 2}, &rconn{id: 9}, false},
		{"nothing known", &rconn{}, &rconn{}, false},
		{"one run_id unknown, id unknown", &rconn{run: a}, &rconn{id: 3}, false},
	} {
		if got := restarted(tc.lost, tc.next); got != tc.want {
			t.Errorf("%s: restarted = %v, want %v", tc.desc, got, tc.want)
		}
	}
	for in, want := range map[string]string{
		"# Server\r\nredis_version:7.0.15\r\nrun_id:" + a + "\r\ntcp_port:6379\r\n": a,
		"# Server\r\nrun_id:" + strings.Repeat("Z", 40) + "\r\n":                    "",
		"# Server\r\nrun_id:abc\r\n":                                                "",
		"run_id:" + a:                                                               "",
	} {
		if got := runID(in); got != want {
			t.Errorf("runID(%q) = %q, want %q", in, got, want)
		}
	}
}
