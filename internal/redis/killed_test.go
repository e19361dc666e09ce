package redis

// Connections Redis closes while they are in use: CLIENT KILL (what a
// failover, a proxy restart or an operator does), and Redis's own idle
// `timeout`. Each connection's reader sees the FIN when it arrives, so
// the checks after it go to live connections and are decided by Redis;
// only a check written before the kill and unanswered may have run, and
// it is never run twice. Every check counts itself in Redis (INCR), so
// the script's runs are counted against the checks.

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// countScript counts its runs in its key and answers "+1 <runs>".
var countScript = NewScript("return {ok = '1 ' .. redis.call('INCR', KEYS[1])}")

// countedBurst runs n concurrent checks of countScript on c's key "runs":
// how many were answered, and the errors of the rest.
func countedBurst(c *Pool, n int, timeout time.Duration) (int, []error) {
	cmd := NewCommand(countScript, []int{4}, []string{""}, nil, nil)
	var mu sync.Mutex
	var wg sync.WaitGroup
	answered := 0
	var errs []error
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := c.check(cmd, "runs", make([]int64, 2), timeout)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			answered++
		}()
	}
	wg.Wait()
	return answered, errs
}

// runs reads the script's run count from Redis.
func runs(t *testing.T, addr string) int {
	t.Helper()
	v := redistest.Do(t, addr, "GET", "runs")
	if len(v) != 1 || v[0] == "" {
		return 0
	}
	n, err := strconv.Atoi(v[0])
	if err != nil {
		t.Fatalf("GET runs: %q", v)
	}
	return n
}

// killedPool returns a pool on a real redis-server (extra: its
// arguments) whose connections carried a few bursts: several open, used
// just now.
func killedPool(t *testing.T, extra ...string) (*Pool, string) {
	addr := redistest.Start(t, extra...)
	c := NewPool(Options{Addr: addr, Timeout: time.Second, PoolSize: 8, Script: countScript})
	c.Warm()
	waitConns(t, c, 1)
	for i := 0; i < 3; i++ {
		if _, errs := countedBurst(c, 60, time.Second); len(errs) > 0 {
			t.Fatalf("warm-up burst: %v", errs[0])
		}
	}
	return c, addr
}

// After CLIENT KILL TYPE normal, a burst 100 ms later is decided by
// Redis, every check exactly once. Seen before: connections used less
// than proveAfter ago were trusted, each check written to a dead one read
// EOF ("may have run") and failed. A burst at once after the kill (0 ms)
// may still race a connection's reader to the FIN: a check that loses
// fails as "may have run", and no check runs twice.
func TestBurstAfterClientKillIsDecidedByRedis(t *testing.T) {
	for _, delay := range []time.Duration{0, 100 * time.Millisecond} {
		t.Run(fmt.Sprint(delay), func(t *testing.T) {
			c, addr := killedPool(t)
			before := runs(t, addr)
			redistest.Do(t, addr, "CLIENT", "KILL", "TYPE", "normal")
			time.Sleep(delay)
			answered, errs := countedBurst(c, 60, time.Second)
			if len(errs) > 0 && delay > 0 {
				t.Errorf("a burst of 60 %v after CLIENT KILL: %d failed (first: %v), want every check answered", delay, len(errs), errs[0])
			}
			for _, err := range errs {
				if !lostUnder(err) {
					t.Errorf("a check failed with %v: only a call written to a connection Redis had closed may fail", err)
				}
			}
			if got := runs(t, addr) - before; got < answered || got > answered+len(errs) {
				t.Errorf("%d checks answered, %d failed, the script ran %d times: want one run per answered check, at most one per failed one", answered, len(errs), got)
			}
		})
	}
}

// CLIENT KILL in the middle of a burst: a check that fails is one whose
// call was written and unanswered (it may have run); a check never runs
// twice, and every check answered ran once.
func TestClientKillMidBurstNeverRunsACheckTwice(t *testing.T) {
	c, addr := killedPool(t)
	for round := 0; round < 5; round++ {
		before := runs(t, addr)
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(time.Duration(round) * 200 * time.Microsecond)
			redistest.Do(t, addr, "CLIENT", "KILL", "TYPE", "normal")
		}()
		answered, errs := countedBurst(c, 200, time.Second)
		<-done
		got := runs(t, addr) - before
		if got < answered || got > answered+len(errs) {
			t.Errorf("round %d: %d answered, %d failed, the script ran %d times: want between %d and %d (never twice)",
				round, answered, len(errs), got, answered, answered+len(errs))
		}
		for _, err := range errs {
			if !lostUnder(err) {
				t.Errorf("round %d: a check failed with %v: only a call written before the kill may fail", round, err)
				break
			}
		}
	}
}

// Redis's `timeout` closes idle connections (here after 1 s): the next
// burst under light traffic finds them gone, not dead under its checks.
func TestIdleCloseByRedisIsSeenBeforeTheNextCheck(t *testing.T) {
	c, addr := killedPool(t, "--timeout", "1")
	before := runs(t, addr)
	time.Sleep(2500 * time.Millisecond) // Redis checks idle clients about every 100 ms
	redistest.WaitFor(t, func() bool { return c.OpenConns() == 0 }, "every connection closed by Redis seen dead")
	answered, errs := countedBurst(c, 60, time.Second)
	if len(errs) > 0 {
		t.Errorf("a burst of 60 after Redis closed its idle connections: %d failed (first: %v)", len(errs), errs[0])
	}
	if got := runs(t, addr) - before; got != answered {
		t.Errorf("%d checks answered, the script ran %d times", answered, got)
	}
}

// gatedConn holds its reader's reads until open is closed: a reader not
// yet scheduled when Redis's FIN came.
type gatedConn struct {
	net.Conn
	open chan struct{}
}

func (g *gatedConn) Read(p []byte) (int, error) {
	<-g.open
	return g.Conn.Read(p)
}

// closingServer accepts one connection; read says whether it reads a
// call before it closes the connection (without answering).
func closingServer(t *testing.T, read bool) (addr string, closed chan struct{}) {
	t.Helper()
	closed = make(chan struct{})
	addr = listen(t, func(c net.Conn) {
		if read {
			_, _ = redistest.ReadCommand(bufio.NewReader(c))
		}
		c.Close()
		close(closed)
	})
	return addr, closed
}

// A call written to a connection Redis had closed before (its FIN in the
// socket, the reader not scheduled yet) cannot have run: it fails with
// errNotSent, which the pool tries on another connection. A call Redis
// read before it closed the connection may have run: EOF, never tried
// again.
func TestCallAfterTheFINIsToldFromOneRedisRead(t *testing.T) {
	for _, tc := range []struct {
		desc string
		read bool
		want error
	}{
		{"written after Redis closed the connection", false, errNotSent},
		{"read by Redis, then the connection closed", true, io.EOF},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			addr, closed := closingServer(t, tc.read)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			g := &gatedConn{Conn: nc, open: make(chan struct{})}
			cn := newConn(g)
			startReader(cn, nil)
			if !tc.read {
				<-closed
				time.Sleep(10 * time.Millisecond) // the FIN is in
			}
			cl := newCall()
			cmd := command(len(testKey))
			if err := send(cn, nil, cl, nil, cmd, cmd.shaHead, testKey, time.Second, time.Now); err != nil {
				t.Fatal(err)
			}
			<-closed
			close(g.open)
			cn.mu.Lock()
			await(cn, cl)
			cn.mu.Unlock()
			if cl.err != tc.want {
				t.Errorf("the call failed with %v, want %v", cl.err, tc.want)
			}
		})
	}
}
