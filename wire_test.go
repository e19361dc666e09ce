package tollgate

import (
	"bufio"
	"fmt"
	"math/rand"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// resetAfter serves PING and SCRIPT LOAD, answering in batches, and resets
// each connection (RST) life after its handshake: a Redis killed, a proxy
// resetting, CLIENT KILL, in the middle of pipelined bursts.
func resetAfter(t *testing.T, life time.Duration) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func(c net.Conn) {
				defer c.Close()
				br := bufio.NewReader(c)
				var start time.Time
				var out []byte
				for {
					args, err := readCommand(br)
					if err != nil {
						return
					}
					switch strings.ToUpper(args[0]) {
					case "SCRIPT":
						out = append(out, fmt.Sprintf("$40\r\n%s\r\n", bucketSHA)...)
						start = time.Now()
					case "PING":
						out = append(out, "+PONG\r\n"...)
					default:
						out = append(out, "+OK\r\n"...)
					}
					if br.Buffered() == 0 || len(out) > 2000 {
						_, _ = c.Write(out)
						out = out[:0]
					}
					if !start.IsZero() && time.Since(start) > life {
						_ = c.(*net.TCPConn).SetLinger(0)
						return
					}
				}
			}(c)
		}
	}()
	return l.Addr().String()
}

func TestResetsMidBurstNeverHangACheck(t *testing.T) {
	// Connections reset 3 ms into their life under 128 concurrent checks on
	// a pool of 4: every check returns (an answer or an error), no panic,
	// and the pool keeps answering.
	set := redisSettings{addr: resetAfter(t, 3*time.Millisecond), timeout: 50 * time.Millisecond, poolSize: 4}
	c, err := newRedisClient(set)
	if err != nil {
		t.Fatal(err)
	}
	var panics, answered, failed, running int64
	stop := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	for i := 0; i < 128; i++ {
		wg.Add(1)
		atomic.AddInt64(&running, 1)
		go func() {
			defer wg.Done()
			defer atomic.AddInt64(&running, -1)
			for time.Now().Before(stop) {
				func() {
					defer func() {
						if recover() != nil {
							atomic.AddInt64(&panics, 1)
						}
					}()
					if _, err := c.roundTrip(nil, pingCmd, nil, nil, "", set.timeout, 0); err != nil {
						atomic.AddInt64(&failed, 1)
					} else {
						atomic.AddInt64(&answered, 1)
					}
				}()
			}
		}()
	}
	for deadline := stop.Add(5 * time.Second); atomic.LoadInt64(&running) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d checks still running 5 s after the load stopped (answered %d, failed %d, panics %d)",
				atomic.LoadInt64(&running), atomic.LoadInt64(&answered), atomic.LoadInt64(&failed), atomic.LoadInt64(&panics))
		}
	}
	wg.Wait()
	if panics != 0 || answered == 0 {
		t.Fatalf("answered %d, failed %d, panics %d: want answers and no panic", answered, failed, panics)
	}
}

// clientOn returns a pool of poolSize connections to f, with checks of
// timeout, once its first connection is open.
func clientOn(t *testing.T, f *fakeRedis, timeout time.Duration, poolSize int) *redisClient {
	t.Helper()
	c, err := newRedisClient(redisSettings{addr: f.l.Addr().String(), timeout: timeout, poolSize: poolSize})
	if err != nil {
		t.Fatal(err)
	}
	c.warm()
	waitConns(t, c, 1)
	return c
}

// awaitShort sends a call of 5 ms on cn and waits for it: how long it took,
// and its error.
func awaitShort(t *testing.T, cn *rconn) (time.Duration, error) {
	t.Helper()
	short := newCall()
	start := time.Now()
	if err := cn.send(nil, short, pingCmd, nil, nil, "", 5*time.Millisecond, time.Now); err != nil {
		t.Fatal(err)
	}
	cn.mu.Lock()
	cn.await(short)
	cn.mu.Unlock()
	return time.Since(start), short.err
}

// silentConn is a connection to a server that reads and never answers.
func silentConn(t *testing.T) *rconn {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
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
	t.Cleanup(func() { nc.Close() })
	return newConn(nc)
}

func TestShortTimeoutIsNotHeldByALongerOne(t *testing.T) {
	// Two middlewares with other timeouts share a connection to a Redis
	// that reads and never answers: the 5 ms check gives up at 5 ms, not at
	// the 500 ms check's deadline written before it.
	cn := silentConn(t)
	long := newCall()
	if err := cn.send(nil, long, pingCmd, nil, nil, "", 500*time.Millisecond, time.Now); err != nil {
		t.Fatal(err)
	}
	go func() {
		cn.mu.Lock()
		cn.await(long)
		cn.mu.Unlock()
	}()
	time.Sleep(5 * time.Millisecond)
	if el, err := awaitShort(t, cn); err != errTimeout || el > 100*time.Millisecond {
		t.Fatalf("a 5 ms check behind a 500 ms one: %v after %v; want errTimeout at about 5 ms", err, el)
	}
}

func TestLostConnectionDoesNotWaitForTheHeartbeat(t *testing.T) {
	// A heartbeat against a slow Redis holds its connection for up to a
	// dial budget; a check that finds its connection lost must not wait
	// for it.
	f := startFake(t, "+1 3 0 2000\r\n")
	c := clientOn(t, f, 5*time.Millisecond, 4)
	c.sideMu.Lock() // as c.heartbeat holds it
	defer c.sideMu.Unlock()
	f.down(true) // the server drops its connections
	start := time.Now()
	cmd := newCommand([]*policy{mustPolicy(t)}, 4)
	_ = c.check(cmd, "abcd", make([]int64, decisionLen(1)), 5*time.Millisecond)
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Fatalf("a check on a lost connection waited %v for the heartbeat's lock", el)
	}
	if atomic.LoadInt32(&c.sideStale) != 1 {
		t.Fatal("the heartbeat's connection was not marked for closing")
	}
}

// TestDecodeAgreesWithFields checks the hand-written parse against
// strings.Fields and strconv on lines near the valid ones: digits, spaces,
// signs, long numbers, missing or extra numbers.
func TestDecodeAgreesWithFields(t *testing.T) {
	oracle := func(line string, n int) ([]int64, bool) {
		if len(line) < 4 || line[0] != '+' || !strings.HasSuffix(line, "\r\n") {
			return nil, false
		}
		body := line[1 : len(line)-2]
		f := strings.Split(body, " ")
		if len(f) != n {
			return nil, false
		}
		d := make([]int64, n)
		for i, s := range f {
			if s == "" || len(s) > maxDigits || strings.Trim(s, "0123456789") != "" {
				return nil, false
			}
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return nil, false
			}
			d[i] = v
		}
		return d, checkDecision(d) == nil
	}
	numbers := []string{"0", "1", "2", "9", "10", "123456789", "999999999999999999", "1000000000000000000",
		"9223372036854775807", "9223372036854775808", "9999999999999999999", "10000000000000000000", ""}
	noise := []string{" ", "-", "+", "x", "\r", "\n", "1"}
	r := rand.New(rand.NewSource(1))
	valid := 0
	for i := 0; i < 200000; i++ {
		n := 1 + 3*(1+r.Intn(2))
		var b strings.Builder
		b.WriteString("+")
		for j := n - 1 + r.Intn(3); j >= 0; j-- {
			b.WriteString(numbers[r.Intn(len(numbers))])
			if r.Intn(8) == 0 {
				b.WriteString(noise[r.Intn(len(noise))])
			}
			if j > 0 {
				b.WriteString(" ")
			}
		}
		b.WriteString("\r\n")
		line := b.String()
		want, ok := oracle(line, n)
		d := make([]int64, n)
		err := decode([]byte(line), d)
		if ok != (err == nil) || ok && fmt.Sprint(d) != fmt.Sprint(want) {
			t.Fatalf("decode(%q) into %d: %v %v, want ok=%v %v", line, n, d, err, ok, want)
		}
		if ok {
			valid++
		}
	}
	if valid < 1000 {
		t.Fatalf("only %d valid lines of 200000: the test says little", valid)
	}
}
