package redis

// The solo path (wire.go) beside the shared one: buffers, deadlines,
// timeouts and the numbers a decision may carry. Each test failed on a
// first version of solo.

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// A check stalled for more than a write budget between its clock read and
// its write (a wait for the pool's lock here; a starved or CFS-throttled
// pod in production) must not write past a write deadline judged by that
// stale reading: the write would fail, the connection die (errOwed), its
// idle siblings close and the check wait for a dial. solo reads the clock
// again after the locks.
func TestStalledCheckKeepsItsConnection(t *testing.T) {
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 5*time.Millisecond, 4) // write budget 50 ms
	first := c.conns[0]
	cmd := command(len(testKey))
	d := make([]int64, 4)
	// solo sets the write deadline: now + 100 ms, writeUntil now + 50 ms.
	if err := PoolCheck(c, cmd, testKey, d, 5*time.Millisecond, c.mono()); err != nil {
		t.Fatalf("first check: %v", err)
	}
	c.mu.Lock() // the stall: the next check reads its clock, then waits here
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = PoolCheck(c, cmd, testKey, make([]int64, 4), 5*time.Millisecond, c.mono())
	}()
	time.Sleep(150 * time.Millisecond)
	c.mu.Unlock()
	<-done
	if err := first.deadErr(); err != nil {
		t.Fatalf("a check that waited 150 ms for the pool's lock killed its connection: dead = %v (its write ran past a write deadline set for an earlier check)", err)
	}
}

// A script may send 19-digit numbers (a burst of 2e18, at one token per
// ns); decode takes every int64. (The plugin's test with its bucket's own
// numbers: TestNineteenDigitDecisionsAreTaken.)
func TestNineteenDigitNumbersAreDecoded(t *testing.T) {
	line := "+1 2000000000000000000 0 9223372036854775807\r\n"
	d := make([]int64, 4)
	if err := decode([]byte(line), d, &Command{}); err != nil || d[1] != 2000000000000000000 || d[3] != 9223372036854775807 {
		t.Errorf("decode(%q) = %v, %v: 19-digit numbers refused", line, d, err)
	}
	if err := decode([]byte("+1 9223372036854775808 0 1\r\n"), d, &Command{}); err == nil {
		t.Error("a number past int64 decoded")
	}
}

// A 5 ms check pipelined behind a 500 ms solo check on the same connection
// lowers the reader's deadline (solo records its timeout as send does), so
// it times out at about 5 ms, not at the solo call's deadline.
// (TestShortTimeoutIsNotHeldByALongerOne covers send behind send.)
func TestShortTimeoutBehindSolo(t *testing.T) {
	cn := silentConn(t)
	cmd := command(4)
	soloDone := make(chan struct{})
	go func() {
		defer close(soloDone)
		_, _ = solo(cn, cmd, "abcd", make([]int64, 4), 500*time.Millisecond, time.Now)
	}()
	for {
		cn.mu.Lock()
		r := cn.reading && len(cn.queue) == 1 && cn.queue[0].deadline != 0
		cn.mu.Unlock()
		if r {
			break
		}
		time.Sleep(time.Millisecond)
	}
	el, err := awaitShort(t, cn)
	<-soloDone
	if err != ErrTimeout || el > 100*time.Millisecond {
		t.Fatalf("a 5 ms check behind a 500 ms solo one: %v after %v; want ErrTimeout at about 5 ms", err, el)
	}
}

// Run with -race: solo builds its call in a buffer of its own (under mu),
// never in send's (under wmu): once a send's call is answered the queue is
// empty and the next solo writes, with no happens-before edge from the
// send's Write (a socket is no synchronisation in the memory model).
func TestSoloSharesNoBufferWithSend(t *testing.T) {
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 200*time.Millisecond, 1)
	cmd := command(4)
	var wg sync.WaitGroup
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			d := make([]int64, 4)
			for i := 0; i < 1000; i++ {
				if (g+i)%4 == 0 {
					_, _ = c.call(cmd, "abcd", 200*time.Millisecond) // send, the shared way
				} else {
					_ = c.check(cmd, "abcd", d, 200*time.Millisecond) // solo when the connection is idle
				}
			}
		}(g)
	}
	wg.Wait()
}

// A command's verify judges the replies whose first number is not 1, on
// every path that decodes (solo here, shared and topology alike through
// decode), and its error is the call's; a reply with 1 first is not shown
// to it.
func TestVerifyJudgesRefusalsOnly(t *testing.T) {
	var seen int
	bad := errors.New("no wait named")
	cmd := NewCommand(testScript, []int{4}, []string{":p"}, []string{"6", "5", "1"}, func(_ []int64) error {
		seen++
		return bad
	})
	for _, tc := range []struct {
		reply string
		want  error
		seen  int
	}{
		{"+1 3 0 2000\r\n", nil, 0},
		{"+0 0 0 2000\r\n", bad, 1},
	} {
		f := redistest.StartFake(t, tc.reply)
		c := clientOn(t, f, 200*time.Millisecond, 1)
		seen = 0
		if err := c.check(cmd, "abcd", make([]int64, 4), 200*time.Millisecond); err != tc.want || seen != tc.seen {
			t.Errorf("reply %q: %v, verify called %d times; want %v, %d", tc.reply, err, seen, tc.want, tc.seen)
		}
	}
}
