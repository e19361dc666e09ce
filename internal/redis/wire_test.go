package redis

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

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// resetAfter serves PING and SCRIPT LOAD (answered with sha), answering in
// batches, and resets each connection (RST) life after its handshake: a
// Redis killed, a proxy resetting, CLIENT KILL, in the middle of
// pipelined bursts.
func resetAfter(t *testing.T, sha string, life time.Duration) string {
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
					args, err := redistest.ReadCommand(br)
					if err != nil {
						return
					}
					switch strings.ToUpper(args[0]) {
					case "SCRIPT":
						out = append(out, fmt.Sprintf("$40\r\n%s\r\n", sha)...)
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
	timeout := 50 * time.Millisecond
	c := NewPool(Options{Addr: resetAfter(t, testScript.SHA, 3*time.Millisecond), Timeout: timeout, PoolSize: 4, Script: testScript})
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
					if _, err := c.roundTrip(nil, pingCmd, nil, nil, "", timeout, 0); err != nil {
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

func TestShortTimeoutIsNotHeldByALongerOne(t *testing.T) {
	// Two middlewares with other timeouts share a connection to a Redis
	// that reads and never answers: the 5 ms check gives up at 5 ms, not at
	// the 500 ms check's deadline written before it.
	cn := silentConn(t)
	long := newCall()
	if err := send(cn, nil, long, pingCmd, nil, nil, "", 500*time.Millisecond, time.Now); err != nil {
		t.Fatal(err)
	}
	go func() {
		cn.mu.Lock()
		await(cn, long)
		cn.mu.Unlock()
	}()
	time.Sleep(5 * time.Millisecond)
	if el, err := awaitShort(t, cn); err != ErrTimeout || el > 100*time.Millisecond {
		t.Fatalf("a 5 ms check behind a 500 ms one: %v after %v; want ErrTimeout at about 5 ms", err, el)
	}
}

// decodeOracle is decode's contract, by strings.Split and strconv: a
// status line of exactly n numbers, each 1 to maxDigits digits within an
// int64, single spaces between them.
func decodeOracle(line string, n int) ([]int64, bool) {
	if len(line) < 4 || line[0] != '+' || !strings.HasSuffix(line, "\r\n") {
		return nil, false
	}
	f := strings.Split(line[1:len(line)-2], " ")
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
	return d, true
}

// TestDecodeAgreesWithFields checks the hand-written parse against
// strings.Split and strconv on lines near the valid ones: digits, spaces,
// signs, long numbers, missing or extra numbers.
func TestDecodeAgreesWithFields(t *testing.T) {
	numbers := []string{"0", "1", "2", "9", "10", "123456789", "999999999999999999", "1000000000000000000",
		"9223372036854775807", "9223372036854775808", "9999999999999999999", "10000000000000000000", ""}
	noise := []string{" ", "-", "+", "x", "\r", "\n", "1"}
	r := rand.New(rand.NewSource(1))
	valid, invalid := 0, 0
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
		want, ok := decodeOracle(line, n)
		d := make([]int64, n)
		err := decode([]byte(line), d, &Command{})
		if ok != (err == nil) || ok && fmt.Sprint(d) != fmt.Sprint(want) {
			t.Fatalf("decode(%q) into %d: %v %v, want ok=%v %v", line, n, d, err, ok, want)
		}
		if err != nil && err != ErrBadReply {
			t.Fatalf("decode(%q): %v, want ErrBadReply", line, err)
		}
		if ok {
			valid++
		} else {
			invalid++
		}
	}
	if valid < 1000 || invalid < 1000 {
		t.Fatalf("%d valid and %d invalid lines of 200000: the test says little", valid, invalid)
	}
}
