package redis

// Connections that may have outlived their Redis (stale.go): the first
// burst after an incident is answered by Redis, every check runs once, and
// nothing is added when nothing has happened. Each test failed on the pool
// before stale.go. (Through the plugin, real Traefik and redis-server: the
// e2e fleet's fault drills.)

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// checkConcurrently runs n concurrent checks on c, each with a key of its
// own (prefix and a number), and returns how many failed.
func checkConcurrently(c *Pool, prefix string, n int) int64 {
	cmd := command(len(prefix) + 4)
	var failed int64
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d := make([]int64, 4)
			if err := c.check(cmd, fmt.Sprintf("%s%04d", prefix, i), d, c.opts.Timeout); err != nil {
				atomic.AddInt64(&failed, 1)
			}
		}(i)
	}
	wg.Wait()
	return failed
}

// busyPool runs bursts of n concurrent checks on c until the pool has
// grown to several connections; it returns how many are open.
func busyPool(c *Pool, prefix string, n int) int {
	for i := 0; i < 5 && c.OpenConns() < 4; i++ {
		checkConcurrently(c, prefix+"w", n)
	}
	return c.OpenConns()
}

// allByRedis fails the test unless every check of a burst was answered
// by the server, once: none failed, evals grew by want since evals.
func allByRedis(t *testing.T, what string, f *redistest.Fake, failed, evals, want int64) {
	t.Helper()
	if got := atomic.LoadInt64(&f.Evals) - evals; failed != 0 || got != want {
		t.Fatalf("%s: %d checks run by the server for %d, %d failed; want each run once, none failed", what, got, want, failed)
	}
}

func TestBurstAfterRestartIsDecidedByRedis(t *testing.T) {
	// A busy pool, then the server closes every connection (a restart)
	// while nothing is sent; the burst after finds connections whose FIN
	// is unread. Seen before: checks pipelined behind the first one on a
	// dead connection failed (errOwed), and went to the fallback.
	for _, idle := range []time.Duration{0, proveAfter + 100*time.Millisecond} {
		f := redistest.StartFake(t, "+1 3 0 2000\r\n")
		c := clientOn(t, f, 200*time.Millisecond, 8)
		if n := busyPool(c, "busy", 64); n < 2 {
			t.Fatalf("%d connections open after bursts, want several", n)
		}
		f.Restart()
		if idle == 0 {
			// No time passes, but the restart is known: a check failed.
			time.Sleep(20 * time.Millisecond) // the FINs arrive
			c.suspect()
		} else {
			time.Sleep(idle)
		}
		evals := atomic.LoadInt64(&f.Evals)
		failed := checkConcurrently(c, "after", 60)
		allByRedis(t, "60 concurrent after a restart (idle "+idle.String()+")", f, failed, evals, 60)
	}
}

func TestResetAfterRunChargesOnce(t *testing.T) {
	// The server runs each check, then loses its connection before the
	// reply: the check may have run, so it is not run again (seen before:
	// 1 request, 2 runs; 8 pipelined, 16).
	for _, n := range []int{1, 8} {
		f := redistest.StartFake(t, "+1 3 0 2000\r\n")
		c := clientOn(t, f, 200*time.Millisecond, 4)
		atomic.StoreInt32(&f.Resets, 1)
		checkConcurrently(c, "reset", n)
		// The server runs the first check of a connection, then closes
		// it: the checks behind it on that connection never ran there.
		if got := atomic.LoadInt64(&f.Evals); got < 1 || got > int64(n) {
			t.Fatalf("%d requests whose connection reset after the check ran: %d runs, want 1 to %d", n, got, n)
		}
	}
}

func TestWriteToDeadConnectionIsTriedAgain(t *testing.T) {
	// A check refused by a connection already dead (errNotSent) never
	// reached Redis: it is tried on another connection and decided by
	// Redis.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 200*time.Millisecond, 4)
	cmd := command(4)
	d := make([]int64, 4)
	if err := c.check(cmd, "abcd", d, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	dead := c.conns[0]
	c.mu.Unlock()
	dead.mu.Lock()
	dead.kill(errConnDead)
	dead.mu.Unlock()
	evals := atomic.LoadInt64(&f.Evals)
	if err := c.failedOn(dead, errNotSent, cmd, "abcd", d, 200*time.Millisecond); err != nil {
		t.Fatalf("a check refused by a dead connection: %v, want it decided on another", err)
	}
	if got := atomic.LoadInt64(&f.Evals) - evals; got != 1 {
		t.Fatalf("%d runs, want 1", got)
	}
}

func TestOldDialFailureDoesNotFailTheNextBurst(t *testing.T) {
	// A dial failed during an outage (a fail-closed request's, say), and
	// nothing was sent since. Redis is back: the first burst waits for one
	// dial instead of failing at once (seen before: every check
	// ErrDialFailed).
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	// A check's budget generous enough for 30 checks under Yaegi on a busy
	// machine (the burst's checks are what this test counts), and the
	// shortest dial budget (what it is about).
	c := clientOn(t, f, 200*time.Millisecond, 4)
	c.mu.Lock()
	c.dialTimeout = minDialTimeout
	c.mu.Unlock()
	f.Down(true)
	f.Restart()
	time.Sleep(20 * time.Millisecond)
	failed := false
	for i := 0; i < 3 && !failed; i++ { // its dead connection, then a failed dial
		checkConcurrently(c, "outage", 1)
		c.mu.Lock()
		failed = c.dialFailed
		c.mu.Unlock()
	}
	if !failed {
		t.Fatal("no dial failed during the outage")
	}
	time.Sleep(50 * time.Millisecond) // the dials the failure started fail too
	f.Down(false)
	time.Sleep(c.dialTimeout + 50*time.Millisecond)
	evals := atomic.LoadInt64(&f.Evals)
	lost := checkConcurrently(c, "after", 30)
	allByRedis(t, "30 concurrent after an old failed dial", f, lost, evals, 30)
}

func TestNoPingWhileNothingHappens(t *testing.T) {
	// The hot path proves nothing while its connection answered recently
	// and no failure was seen; a connection idle for proveAfter, or after
	// a failure, answers a PING first.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 200*time.Millisecond, 4)
	cmd := command(4)
	d := make([]int64, 4)
	for i := 0; i < 20; i++ {
		if err := c.check(cmd, "abcd", d, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if n := atomic.LoadInt64(&f.Pings); n != 0 {
		t.Fatalf("%d PINGs for 20 checks back to back, want none", n)
	}
	time.Sleep(proveAfter + 50*time.Millisecond)
	for i := 0; i < 2; i++ {
		if err := c.check(cmd, "abcd", d, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if n := atomic.LoadInt64(&f.Pings); n != 1 {
		t.Fatalf("%d PINGs for 2 checks after %v idle, want 1", n, proveAfter)
	}
	c.suspect()
	if err := c.check(cmd, "abcd", d, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := atomic.LoadInt64(&f.Pings); n != 2 {
		t.Fatalf("%d PINGs after a suspicion, want 2", n)
	}
}
