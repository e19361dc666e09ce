package tollgate

// The solo path (wire.go) beside the shared one: buffers, deadlines,
// timeouts and the numbers a decision may carry. Each test failed on a
// first version of solo.

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// A check stalled for more than a write budget between redisCheck's clock
// read and its write (a wait for the pool's lock here; a starved or
// CFS-throttled pod in production) must not write past a write deadline
// judged by that stale reading: the write would fail, the connection die
// (errOwed), its idle siblings close and the check wait for a dial. solo
// reads the clock again after the locks.
func TestStalledCheckKeepsItsConnection(t *testing.T) {
	f := startFake(t, "+1 3 0 2000\r\n")
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Redis.Timeout = "5ms" }) // write budget 50 ms
	c := h.be.client
	waitConns(t, c, 1)
	first := c.conns[0]
	if rec := serve(h, t.Name()); rec.Code != 200 { // solo sets the write deadline: now + 100 ms, writeUntil now + 50 ms
		t.Fatalf("first request: %d", rec.Code)
	}
	c.mu.Lock() // the stall: the next check reads its clock, then waits here
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve(h, t.Name())
	}()
	time.Sleep(150 * time.Millisecond)
	c.mu.Unlock()
	<-done
	if err := first.deadErr(); err != nil {
		t.Fatalf("a check that waited 150 ms for the pool's lock killed its connection: dead = %v (its write ran past a write deadline set for an earlier check)", err)
	}
}

// The script sends 19-digit numbers for a valid config (burst >= 1e18:
// remaining, at the fastest rate, 1 token per ns, so that the bucket
// refills within the 100 years allowed); decode takes every int64. (The
// same against a real Redis: e2e TestNineteenDigitNumbersAreDecidedByRedis.)
func TestNineteenDigitNumbersAreDecoded(t *testing.T) {
	const burst = 2000000000000000000
	mutate := func(c *Config) { c.Average, c.Period, c.Burst = 1000000000, "1s", burst }
	// What the script answers, by its Go twin (statement for statement).
	probe := handlerOn(t, "127.0.0.1:1", mutate)
	d := make([]int64, 4)
	takeAll([]limit{probe.top.ps[0].lim}, []float64{0}, 1e12, d)
	line := fmt.Sprintf("+%d %d %d %d\r\n", d[0], d[1], d[2], d[3])
	if err := decode([]byte(line), make([]int64, 4)); err != nil {
		t.Errorf("decode(%q) = %v: a reply the script sends for burst %d is refused", line, err, int64(burst))
	}
}

// A 5 ms check pipelined behind a 500 ms solo check on the same connection
// lowers the reader's deadline (solo records its timeout as send does), so
// it times out at about 5 ms, not at the solo call's deadline.
// (TestShortTimeoutIsNotHeldByALongerOne covers send behind send.)
func TestShortTimeoutBehindSolo(t *testing.T) {
	cn := silentConn(t)
	cmd := newCommand([]*policy{mustPolicy(t)}, 4)
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
	if err != errTimeout || el > 100*time.Millisecond {
		t.Fatalf("a 5 ms check behind a 500 ms solo one: %v after %v; want errTimeout at about 5 ms", err, el)
	}
}

// Run with -race: solo builds its call in a buffer of its own (under mu),
// never in send's (under wmu): once a send's call is answered the queue is
// empty and the next solo writes, with no happens-before edge from the
// send's Write (a socket is no synchronisation in the memory model).
func TestSoloSharesNoBufferWithSend(t *testing.T) {
	f := startFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 200*time.Millisecond, 1)
	cmd := newCommand([]*policy{mustPolicy(t)}, 4)
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
