package tollgate

// The solo path (wire.go) beside the shared one: buffers, deadlines,
// timeouts and the numbers a decision may carry. Each test failed on a
// first version of solo.

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestStalledCheckKeepsItsConnection: solo no longer sets the write
// deadline right before its write; it reuses the one set up to a write
// budget earlier, judged by ns, the clock read in redisCheck before the
// pool's lock. A check stalled for more than a write budget between that
// read and its write (a wait for the pool's lock here; a starved or
// CFS-throttled pod in production) writes past the reused deadline: the
// write fails, the connection dies (errOwed), its idle siblings are closed
// and the check waits for a dial. Before the change (alone), the deadline
// was set after the locks, from the clock, so the same stall cost nothing.
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

// TestNineteenDigitNumbersAreDecoded: decode refuses numbers of more
// than maxDigits (18) digits, but the script sends 19 for a valid config:
// burst >= 1e18 (remaining), or a huge period times cost (ms until full).
// fmt.Sscan and strconv.ParseInt took any int64. Every check of such a
// middleware now fails (fallback, failures counted, breaker).
func TestNineteenDigitNumbersAreDecoded(t *testing.T) {
	const burst = 2000000000000000000
	mutate := func(c *Config) { c.Average, c.Period, c.Burst = 1, "1s", burst }
	// What the script answers, by its Go twin (statement for statement).
	probe := handlerOn(t, "127.0.0.1:1", mutate)
	d := make([]int64, 4)
	takeAll([]limit{probe.top.ps[0].lim}, []float64{0}, 1e12, d)
	line := fmt.Sprintf("+%d %d %d %d\r\n", d[0], d[1], d[2], d[3])
	if err := decode([]byte(line), make([]int64, 4)); err != nil {
		t.Errorf("decode(%q) = %v: a reply the script sends for burst %d is refused", line, err, int64(burst))
	}
	// The same against the real script, when redis-server is at hand.
	addr, ok := startRedisServer(t)
	if !ok {
		return
	}
	h := handlerOn(t, addr, mutate)
	waitConns(t, h.be.client, 1)
	rec := serve(h, t.Name())
	if st := h.be.stats(); st.Fallbacks != 0 || st.Failures != 0 {
		t.Fatalf("real redis, burst %d: stats %+v, RateLimit %q: want the check decided by Redis", int64(burst), st, rec.Header().Get("RateLimit"))
	}
}

// TestShortTimeoutBehindSolo (pre-existing, not a regression: alone
// did the same): solo does not record its timeout in cn.timeout/cn.mixed,
// so a 5 ms check pipelined behind a 500 ms solo check on the same
// connection is not seen as mixed, does not lower the reader's deadline,
// and waits for the solo call's deadline (TestShortTimeoutIsNotHeldByALongerOne
// covers only send behind send).
func TestShortTimeoutBehindSolo(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // reads, never answers
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		for {
			if _, err := c.Read(buf); err != nil {
				return
			}
		}
	}()
	nc, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cn := newConn(nc)
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
	short := newCall()
	start := time.Now()
	if err := cn.send(nil, short, pingCmd, nil, nil, "", 5*time.Millisecond, time.Now); err != nil {
		t.Fatal(err)
	}
	cn.mu.Lock()
	cn.await(short)
	cn.mu.Unlock()
	el := time.Since(start)
	<-soloDone
	if short.err != errTimeout || el > 100*time.Millisecond {
		t.Fatalf("a 5 ms check behind a 500 ms solo one: %v after %v; want errTimeout at about 5 ms", short.err, el)
	}
}

// startRedisServer starts a redis-server on a free loopback port for the
// test; ok is false (the test logs why) when the binary is absent and CI
// is unset.
func startRedisServer(t *testing.T) (addr string, ok bool) {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("redis-server not found")
		}
		t.Log("redis-server not found: the real-script half skipped")
		return "", false
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr = "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if nc, err := net.Dial("tcp", addr); err == nil {
			_, _ = nc.Write(pingCmd)
			line, _ := bufio.NewReader(nc).ReadString('\n')
			nc.Close()
			if strings.HasPrefix(line, "+PONG") {
				return addr, true
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("redis-server did not start")
		}
	}
}

// TestSoloSharesNoBufferWithSend (run with -race): solo builds its
// call in cn.wbuf under mu alone, while send builds and writes it under
// wmu alone. Once a send's call is answered the queue is empty and the
// next solo rewrites cn.wbuf, with no happens-before edge from the send's
// Write (the race detector's read of the written bytes follows the
// syscall; a socket is no synchronisation in the memory model). Before the
// change alone took wmu, which send holds through its Write.
func TestSoloSharesNoBufferWithSend(t *testing.T) {
	f := startFake(t, "+1 3 0 2000\r\n")
	c, err := newRedisClient(redisSettings{addr: f.l.Addr().String(), timeout: 200 * time.Millisecond, poolSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	c.warm()
	waitConns(t, c, 1)
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
