package redis

// The write path (wire.go): buffers, write deadlines, and the numbers a
// decision may carry.

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
// again after the locks (send).
func TestStalledCheckKeepsItsConnection(t *testing.T) {
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 5*time.Millisecond, 4) // write budget 50 ms
	first := c.conns[0]
	cmd := command(len(testKey))
	d := make([]int64, 4)
	// send sets the write deadline: now + 100 ms, writeUntil now + 50 ms.
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

// Run with -race: checks and calls from many goroutines share one
// connection's write buffer (under wmu) and its reader's replies.
func TestConcurrentChecksShareOneConnection(t *testing.T) {
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
					if err := c.check(cmd, "abcd", d, 200*time.Millisecond); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}(g)
	}
	wg.Wait()
}

// A command's verify judges the replies whose first number is not 1, on
// every path that decodes (the pool's here, topology alike through
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
