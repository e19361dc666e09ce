package tollgate

import (
	"testing"
	"time"
)

// poolCheck marks the connection it picked as used before the pool prunes
// (tend): an idle connection picked for a solo check, unused for
// idleTimeout, would otherwise be closed under the check, which would then
// fail over (errConnDead, connLost): its idle siblings closed, a wait for a
// fresh dial.
func TestPickedConnectionIsNotPrunedUnderItsCheck(t *testing.T) {
	f := startFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 200*time.Millisecond, 4)
	c.mu.Lock()
	c.startDial()
	c.mu.Unlock()
	waitConns(t, c, 2)
	c.mu.Lock()
	busy, idle := c.conns[0], c.conns[1]
	c.mu.Unlock()
	// busy carries a call in flight (its reply unread), so the first idle
	// connection the scan finds is idle, the second one.
	if err := busy.send(nil, newCall(), pingCmd, nil, nil, "", time.Second, time.Now); err != nil {
		t.Fatal(err)
	}
	ns := monotonic()
	c.mu.Lock()
	idle.used = ns - 2*int64(idleTimeout) // unused for two minutes
	c.lastPrune = 0                       // a prune is due
	c.mu.Unlock()
	cmd := newCommand([]*policy{mustPolicy(t)}, 4)
	if err := poolCheck(c, cmd, "abcd", make([]int64, 4), 200*time.Millisecond, ns); err != nil {
		t.Fatalf("check: %v", err)
	}
	if err := idle.deadErr(); err != nil {
		t.Fatalf("the idle connection picked for the check was closed under it: dead = %v", err)
	}
}
