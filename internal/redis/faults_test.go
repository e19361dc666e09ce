package redis

// The pool's faults: idle connections pruned, a reply read late, a Redis
// that freezes, a write that fails over TLS, a dial that panics.

import (
	"crypto/tls"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

func TestIdleConnectionsArePruned(t *testing.T) {
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 500*time.Millisecond, 4) // the warm-up connection
	for i := 0; i < 2; i++ {
		cn, err := c.dialSafe(true)
		if err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		c.conns = append(c.conns, cn)
		c.mu.Unlock()
	}
	// All three unused since 0; a minute later only the first stays.
	var now int64
	c.mono = func() int64 { return now }
	for _, cn := range c.conns {
		atomic.StoreInt64(&cn.used, 0)
	}
	now = int64(idleTimeout) + c.lastPrune + 1
	d := make([]int64, 4)
	if err := c.check(command(len(testKey)), testKey, d, time.Second); err != nil {
		t.Fatal(err)
	}
	if n := c.OpenConns(); n != 1 {
		t.Fatalf("after a check a minute later: %d open, want the 2 idle ones closed", n)
	}
}

func TestLateReplyIsTaken(t *testing.T) {
	// A reply that arrived before the deadline but is read after it (the
	// goroutine was not scheduled in time) is used, not counted as a
	// timeout.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 500*time.Millisecond, 4)
	cn, err := c.dialSafe(true) // no reader: the test reads
	if err != nil {
		t.Fatal(err)
	}
	defer cn.nc.Close()
	cmd := command(len(testKey))
	if _, err := cn.nc.Write(appendCall(nil, cmd, cmd.shaHead, testKey)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	_ = cn.nc.SetReadDeadline(time.Now().Add(-time.Second))
	line, err := cn.readLine()
	if err != nil || string(line) != "+1 3 0 2000\r\n" {
		t.Fatalf("read past the deadline of a reply received in time: %q, %v; want the reply", line, err)
	}
	// With nothing received, the late look times out quickly.
	start := time.Now()
	_ = cn.nc.SetReadDeadline(time.Now().Add(-time.Second))
	if _, err = cn.readLine(); err == nil || !isTimeout(err) || time.Since(start) > 100*time.Millisecond {
		t.Fatalf("late read with no reply: %v after %v", err, time.Since(start))
	}
}

func TestFrozenRedisTimesOutAndDropsTheConnection(t *testing.T) {
	// A server that stops answering: checks fail at their deadline
	// (ErrTimeout); a connection that owes replies staleAfter past their
	// deadline is closed.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 20*time.Millisecond, 4)
	cmd := command(len(testKey))
	check := func() error { return c.check(cmd, testKey, make([]int64, 4), 20*time.Millisecond) }
	f.Freeze()
	// Measured on 2 cores shared with other test runs (6 compiled, 4
	// interpreted runs): 21.5 to 23.3 ms. The bound leaves 60 ms for one
	// check's scheduling on a loaded machine (the e2e suite saw single
	// interpreted requests delayed by up to 53 ms). Caught: a check given
	// the renewal's cap, 10 timeouts (200 ms), from its write (the old
	// bound, 200 ms, let it pass by a hair), and one giving up early.
	start := time.Now()
	err := check()
	if el := time.Since(start); el < 20*time.Millisecond || el > 80*time.Millisecond || err != ErrTimeout {
		t.Fatalf("frozen: %v after %v; want ErrTimeout after about 20 ms (20 to 80 ms)", err, el)
	}
	time.Sleep(staleAfter + 20*time.Millisecond)
	if err := check(); err == nil || c.OpenConns() != 0 {
		t.Fatalf("%v, %d open: want a failure and the stale connection closed", err, c.OpenConns())
	}
	// No connection, the last one went silent: the next check does not
	// wait for a dial (a frozen Redis would hold it for the dial budget).
	start = time.Now()
	_ = check()
	if el := time.Since(start); el > 100*time.Millisecond {
		t.Fatalf("a check with no connection after a silent one waited %v", el)
	}
}

func TestFailedWriteDropsTheConnection(t *testing.T) {
	// Over TLS a write error is permanent (crypto/tls): a check whose
	// write failed (here its deadline had passed: a starved pod) must not
	// leave the connection pooled, or every later check on it would fail.
	// The check itself is tried again on a new connection: Redis never saw
	// it.
	f := redistest.StartFakeTLS(t, "+1 3 0 2000\r\n")
	c := NewPool(Options{Addr: f.Addr(), Timeout: 500 * time.Millisecond, PoolSize: 4, Script: testScript,
		TLS: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12}})
	c.Warm()
	waitConns(t, c, 1)
	first := c.conns[0]
	cmd := command(len(testKey))
	var failed int
	check := func() {
		if err := c.check(cmd, testKey, make([]int64, 4), 500*time.Millisecond); err != nil {
			failed++
		}
	}
	// The clock lags for the write deadline of the next check only.
	var reads int32
	c.now = func() time.Time {
		if atomic.AddInt32(&reads, 1) == 1 {
			return time.Now().Add(-time.Hour)
		}
		return time.Now()
	}
	check()
	if first.deadErr() != errOwed {
		t.Fatalf("the connection whose write failed: dead = %v, want it closed", first.deadErr())
	}
	for i := 0; i < 20; i++ {
		check()
	}
	if evals := atomic.LoadInt64(&f.Evals); failed != 0 || evals != 21 {
		t.Fatalf("%d failed, %d evals: want the check whose write failed and the 20 after it answered by Redis", failed, evals)
	}
}

func TestDialPanicIsContained(t *testing.T) {
	// Dials run on the plugin's own goroutines, where a panic would end
	// Traefik: it becomes a failed dial instead.
	c := &Pool{opts: Options{Addr: "127.0.0.1:1"}, now: func() time.Time { panic("boom") }}
	if cn, err := c.dialSafe(true); cn != nil || err == nil || !strings.Contains(err.Error(), "recovered from a panic: boom") {
		t.Fatalf("dialSafe with a panicking clock: %v, %v", cn, err)
	}
	c.onDialError = func(_ error) { panic("boom") }
	c.reportDial(ErrBadReply) // must return
}
