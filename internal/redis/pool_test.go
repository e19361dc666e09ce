package redis

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// The connection a check picks is marked used before the pool prunes
// (tend): an idle connection picked for a check, unused for idleTimeout,
// would otherwise be closed under the check, which would then fail over
// (errConnDead, connLost): its idle siblings closed, a wait for a fresh
// dial. (Unused that long, it is suspect: the check proves it with a PING
// first, stale.go, and the prune must not close it meanwhile.)
func TestPickedConnectionIsNotPrunedUnderItsCheck(t *testing.T) {
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 200*time.Millisecond, 4)
	c.mu.Lock()
	c.startDial()
	c.mu.Unlock()
	waitConns(t, c, 2)
	c.mu.Lock()
	busy, idle := c.conns[0], c.conns[1]
	c.mu.Unlock()
	// busy carries a call in flight (held so while the check runs: its
	// reader waits for busy's lock), so the first idle connection the
	// scan finds is idle, the second one.
	busy.mu.Lock()
	atomic.StoreInt64(&busy.inflight, 1)
	defer func() {
		atomic.StoreInt64(&busy.inflight, 0)
		busy.mu.Unlock()
	}()
	ns := clock.Mono()
	c.mu.Lock()
	idle.used = ns - 2*int64(idleTimeout) // unused for two minutes
	c.lastPrune = 0                       // a prune is due
	c.mu.Unlock()
	evals := atomic.LoadInt64(&f.Evals)
	if err := PoolCheck(c, command(4), "abcd", make([]int64, 4), 200*time.Millisecond, ns); err != nil {
		t.Fatalf("check: %v", err)
	}
	if err := idle.deadErr(); err != nil {
		t.Fatalf("the idle connection picked for the check was closed under it: dead = %v", err)
	}
	if n := atomic.LoadInt64(&f.Evals) - evals; n != 1 {
		t.Fatalf("%d script calls, want the check's", n)
	}
	c.mu.Lock()
	first := c.conns[0]
	c.mu.Unlock()
	if first != idle {
		t.Fatal("the connection proven for the check is not the pool's first (the one steady traffic keeps)")
	}
}

func TestLostConnectionDoesNotWaitForTheHeartbeat(t *testing.T) {
	// A heartbeat against a slow Redis holds the side connection for up to
	// a dial budget; a check that finds its connection lost must not wait
	// for it.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 5*time.Millisecond, 4)
	c.sideMu.Lock() // as onSide holds it
	defer c.sideMu.Unlock()
	f.Down(true) // the server drops its connections
	var err error
	var finished int32
	go func() {
		err = c.check(command(4), "abcd", make([]int64, 4), 5*time.Millisecond)
		atomic.StoreInt32(&finished, 1)
	}()
	for deadline := time.Now().Add(500 * time.Millisecond); atomic.LoadInt32(&finished) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a check on a lost connection waited for the heartbeat's lock") // (released as the test returns)
		}
	}
	if err == nil {
		t.Fatal("a check on a lost connection: no error")
	}
	if atomic.LoadInt32(&c.sideStale) != 1 {
		t.Fatal("the heartbeat's connection was not marked for closing")
	}
}

// A released call is a fresh one but for its channel and line buffer: a
// reused call that kept a deadline, a reply or an error would end the next
// check that takes it.
func TestReleasedCallIsFresh(t *testing.T) {
	wake := make(chan struct{}, 1)
	line := make([]byte, 1, 16)
	cl := &call{sent: 1, timeout: 2, deadline: 3, line: line, err: ErrTimeout, done: true, waiting: true, wake: wake, d: make([]int64, 4)}
	releaseCall(cl)
	if cl.sent != 0 || cl.timeout != 0 || cl.deadline != 0 || len(cl.line) != 0 || cl.err != nil || cl.done || cl.waiting || cl.d != nil {
		t.Fatalf("released call: %+v; want it reset", cl)
	}
	if cl.wake != wake || cap(cl.line) != 16 {
		t.Fatal("released call: its channel or line buffer was not kept")
	}
}
