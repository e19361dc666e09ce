package tollgate

// Connections that may have outlived their Redis (stale.go): the first
// burst after an incident is decided by Redis, every check runs once, and
// nothing is added when nothing has happened. Each test failed on the pool
// before stale.go. (Through real Traefik and redis-server: the e2e fleet's
// fault drills.)

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// busyPool serves n concurrent requests on h, each held by a check that
// takes a while at the server, so the pool grows to several connections;
// it returns how many are open.
func busyPool(t *testing.T, h *Tollgate, n int) int {
	t.Helper()
	for i := 0; i < 5 && h.be.client.openConns() < 4; i++ {
		serveConcurrently(h, t.Name()+"-warm", n)
	}
	return h.be.client.openConns()
}

// checkAllByRedis fails the test unless every check since stats before
// was answered by Redis, once: evals grew by want, nothing fell back or
// failed.
func checkAllByRedis(t *testing.T, what string, h *Tollgate, f *fakeRedis, before backendStats, evals int64, want int64) {
	t.Helper()
	st := h.be.stats()
	if got := atomic.LoadInt64(&f.evals) - evals; st.Fallbacks != before.Fallbacks || st.Failures != before.Failures || got != want {
		reasons := ""
		for i := range h.be.metrics.errors {
			if n := atomic.LoadInt64(&h.be.metrics.errors[i]); n > 0 {
				reasons += fmt.Sprintf(" %s=%d", reasonNames[i], n)
			}
		}
		t.Fatalf("%s: %d checks run by the server for %d requests, %d fell back, %d failed (errors:%s); want each run once, none fallen back or failed",
			what, got, want, st.Fallbacks-before.Fallbacks, st.Failures-before.Failures, reasons)
	}
}

func TestBurstAfterRestartIsDecidedByRedis(t *testing.T) {
	// A busy pool, then the server closes every connection (a restart)
	// while nothing is sent; the burst after finds connections whose FIN
	// is unread. Seen before: checks pipelined behind the first one on a
	// dead connection failed (errOwed), and went to the fallback.
	for _, idle := range []time.Duration{0, proveAfter + 100*time.Millisecond} {
		f := startFake(t, "+1 3 0 2000\r\n")
		h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.Timeout = "200ms"; c.Redis.PoolSize = 8 })
		waitConns(t, h.be.client, 1)
		if n := busyPool(t, h, 64); n < 2 {
			t.Fatalf("%d connections open after bursts, want several", n)
		}
		f.restart()
		if idle == 0 {
			// No time passes, but the restart is known: a check failed.
			time.Sleep(20 * time.Millisecond) // the FINs arrive
			h.be.client.suspect()
		} else {
			time.Sleep(idle)
		}
		before, evals := h.be.stats(), atomic.LoadInt64(&f.evals)
		serveConcurrently(h, t.Name(), 60)
		checkAllByRedis(t, "60 concurrent after a restart (idle "+idle.String()+")", h, f, before, evals, 60)
	}
}

func TestResetAfterRunChargesOnce(t *testing.T) {
	// The server runs each check, then loses its connection before the
	// reply: the check may have run, so it is not run again (seen before:
	// 1 request, 2 runs; 8 pipelined, 16).
	for _, n := range []int{1, 8} {
		f := startFake(t, "+1 3 0 2000\r\n")
		h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.Timeout = "200ms" })
		waitConns(t, h.be.client, 1)
		atomic.StoreInt32(&f.resets, 1)
		var wg sync.WaitGroup
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				serve(h, t.Name())
			}()
		}
		wg.Wait()
		// The server runs the first check of a connection, then closes
		// it: the checks behind it on that connection never ran there.
		if got := atomic.LoadInt64(&f.evals); got < 1 || got > int64(n) {
			t.Fatalf("%d requests whose connection reset after the check ran: %d runs, want 1 to %d", n, got, n)
		}
	}
}

func TestWriteToDeadConnectionIsTriedAgain(t *testing.T) {
	// A check refused by a connection already dead (errNotSent) never
	// reached Redis: it is tried on another connection and decided by
	// Redis.
	f := startFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 200*time.Millisecond, 4)
	cmd := newCommand([]*policy{mustPolicy(t)}, 4)
	d := make([]int64, decisionLen(1))
	if err := c.check(cmd, "abcd", d, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	dead := c.conns[0]
	c.mu.Unlock()
	dead.mu.Lock()
	dead.kill(errConnDead)
	dead.mu.Unlock()
	evals := atomic.LoadInt64(&f.evals)
	if err := c.failedOn(dead, errNotSent, cmd, "abcd", d, 200*time.Millisecond); err != nil {
		t.Fatalf("a check refused by a dead connection: %v, want it decided on another", err)
	}
	if got := atomic.LoadInt64(&f.evals) - evals; got != 1 {
		t.Fatalf("%d runs, want 1", got)
	}
}

func TestOldDialFailureDoesNotFailTheNextBurst(t *testing.T) {
	// A dial failed during an outage (a fail-closed request's, say), and
	// nothing was sent since. Redis is back: the first burst waits for one
	// dial instead of failing at once (seen before: every check
	// errDialFailed, the breaker open, all 30 by the fallback).
	f := startFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.Timeout = "2ms"; c.Redis.BreakerThreshold = 100 }) // dial budget 250 ms; the breaker stays closed
	c := h.be.client
	waitConns(t, c, 1)
	f.down(true)
	f.restart()
	time.Sleep(20 * time.Millisecond)
	failed := false
	for i := 0; i < 3 && !failed; i++ { // its dead connection, then a failed dial
		serve(h, t.Name()+"-outage")
		c.mu.Lock()
		failed = c.dialFailed
		c.mu.Unlock()
	}
	if !failed {
		t.Fatal("no dial failed during the outage")
	}
	time.Sleep(50 * time.Millisecond) // the dials the failure started fail too
	f.down(false)
	time.Sleep(c.dialTimeout + 50*time.Millisecond)
	before, evals := h.be.stats(), atomic.LoadInt64(&f.evals)
	serveConcurrently(h, t.Name(), 30)
	checkAllByRedis(t, "30 concurrent after an old failed dial", h, f, before, evals, 30)
}

func TestNoPingWhileNothingHappens(t *testing.T) {
	// The hot path proves nothing while its connection answered recently
	// and no failure was seen; a connection idle for proveAfter, or after
	// a failure, answers a PING first.
	f := startFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 200*time.Millisecond, 4)
	cmd := newCommand([]*policy{mustPolicy(t)}, 4)
	d := make([]int64, decisionLen(1))
	for i := 0; i < 20; i++ {
		if err := c.check(cmd, "abcd", d, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if n := atomic.LoadInt64(&f.pings); n != 0 {
		t.Fatalf("%d PINGs for 20 checks back to back, want none", n)
	}
	time.Sleep(proveAfter + 50*time.Millisecond)
	for i := 0; i < 2; i++ {
		if err := c.check(cmd, "abcd", d, 200*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if n := atomic.LoadInt64(&f.pings); n != 1 {
		t.Fatalf("%d PINGs for 2 checks after %v idle, want 1", n, proveAfter)
	}
	c.suspect()
	if err := c.check(cmd, "abcd", d, 200*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if n := atomic.LoadInt64(&f.pings); n != 2 {
		t.Fatalf("%d PINGs after a suspicion, want 2", n)
	}
}
