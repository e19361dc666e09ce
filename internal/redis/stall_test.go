package redis

// A pod starved of CPU (a busy node, Traefik at a low priority): its
// goroutines are descheduled at any point, for milliseconds. A reply
// Redis sent within the budget is the check's, however late the pod reads
// it.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// stallingConn is a connection read by a pod descheduled at the worst
// moments: reads from and from+1 (counted from 1) time out with the reply
// in the socket. The first returns once the reply is in and the deadline
// set for it has passed (its reader came after its deadline); the second
// a millisecond past its own deadline (its reader was descheduled between
// setting the deadline and reading: Go then fails the read without
// looking at the socket). Later reads get what was held back.
type stallingConn struct {
	net.Conn
	from int

	mu       sync.Mutex
	reads    int
	deadline time.Time
	held     []byte
}

// stall replaces the i-th connection of c, idle, by a fresh one to the
// same server whose reads from and from+1 stall: wrapped before its reader
// starts, it takes the old one's place (proven at the pool's epoch, used
// now) and the old one is closed.
func stall(t *testing.T, c *Pool, i, from int) *stallingConn {
	t.Helper()
	cn, err := c.dialSafe(true)
	if err != nil {
		t.Fatal(err)
	}
	sc := &stallingConn{Conn: cn.nc, from: from}
	cn.nc = sc
	cn.br = bufio.NewReaderSize(sc, readerSize)
	startReader(cn, c)
	c.mu.Lock()
	old := c.conns[i]
	cn.epoch, cn.used, cn.born = old.epoch, old.used, old.born
	c.conns[i] = cn
	c.mu.Unlock()
	old.closeIfIdle()
	return sc
}

func (s *stallingConn) SetReadDeadline(t time.Time) error {
	s.mu.Lock()
	s.deadline = t
	s.mu.Unlock()
	return s.Conn.SetReadDeadline(t)
}

func (s *stallingConn) Read(p []byte) (int, error) {
	s.mu.Lock()
	s.reads++
	n, deadline := s.reads, s.deadline
	s.mu.Unlock()
	switch {
	case n == s.from:
		buf := make([]byte, readerSize)
		_ = s.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := s.Conn.Read(buf)
		if err != nil {
			return 0, err
		}
		s.mu.Lock()
		s.held = append(s.held, buf[:got]...)
		deadline = s.deadline // set for the call meanwhile, if it waited with none
		s.mu.Unlock()
		if time.Until(deadline) > 5*time.Second {
			deadline = time.Now() // the reader's idle watch (no call's yet): late at once
		}
		time.Sleep(time.Until(deadline) + time.Millisecond)
		return 0, os.ErrDeadlineExceeded
	case n == s.from+1:
		if time.Until(deadline) > 5*time.Second {
			deadline = time.Now() // the reader's idle watch: late at once
		}
		time.Sleep(time.Until(deadline) + time.Millisecond)
		return 0, os.ErrDeadlineExceeded
	}
	s.mu.Lock()
	if len(s.held) > 0 {
		got := copy(p, s.held)
		s.held = s.held[got:]
		s.mu.Unlock()
		return got, nil
	}
	s.mu.Unlock() // a connection's reader waits here while nothing is owed
	return s.Conn.Read(p)
}

// stalled reports whether both stalled reads happened.
func (s *stallingConn) stalled() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads > s.from
}

func TestReplyInTimeIsTakenWhenTheLateLookIsStalled(t *testing.T) {
	// The check's reader comes after its deadline (the reply arrived
	// meanwhile), then is descheduled right after it sets the late look's
	// deadline. Seen before: the check failed (ErrTimeout), its reply in
	// the socket, and with it every call past its deadline on the
	// connection; three such failures open the breaker.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	const timeout = 100 * time.Millisecond
	c := clientOn(t, f, timeout, 1)
	sc := stall(t, c, 0, 1)
	d := make([]int64, 4)
	if err := c.check(command(len(testKey)), testKey, d, timeout); err != nil || d[0] != 1 {
		t.Fatalf("a check answered in time, read late by a pod descheduled twice: %v %v; want the decision", err, d)
	}
	if !sc.stalled() {
		t.Fatal("the test did not stall the reads it meant to")
	}
}

func TestStalledProofOfAnOwingConnectionLeavesThePoolUsable(t *testing.T) {
	// An idle connection owes the reply of a call that timed out long ago
	// (the reply came later; nobody read it). The next check proves it,
	// and its reader is stalled twice: the owed reply and the PONG are in
	// the socket. Seen before: the read timed out, the owed call's old
	// deadline made the connection stale, the pool silent, and every check
	// after it failed at once (ErrDialFailed, failingFast) for a dial
	// budget: one late look failed the burst.
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	const timeout = 100 * time.Millisecond
	c := clientOn(t, f, timeout, 1)
	cn := c.conns[0]
	owed := newCall()
	if err := send(cn, nil, owed, pingCmd, nil, nil, "", timeout, time.Now); err != nil {
		t.Fatal(err)
	}
	cn.mu.Lock()
	finish(owed, nil, ErrTimeout)
	owed.deadline -= int64(time.Second)
	cn.mu.Unlock()
	c.mu.Lock()
	cn.used -= int64(proveAfter) // idle: it proves itself first
	c.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // the owed reply arrives
	sc := stall(t, c, 0, 1)
	cmd := command(len(testKey))
	var failed []string
	for i := 0; i < 5; i++ {
		if err := c.check(cmd, testKey, make([]int64, 4), timeout); err != nil {
			failed = append(failed, fmt.Sprintf("check %d: %v", i, err))
		}
	}
	if len(failed) > 0 {
		t.Fatalf("5 checks after a stalled proof of a connection owing an old reply: %s; want each decided", strings.Join(failed, "; "))
	}
	if !sc.stalled() {
		t.Fatal("the test did not stall the reads it meant to")
	}
}
