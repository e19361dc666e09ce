package redis

// The reader's rarer ways out (readLoop): a panic while it holds the
// connection's lock, a late look racing a check's write, a connection
// dropped from its pool while it owes replies to no one. Each failed
// on a first version of the reader.

import (
	"bufio"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// panicConn panics in SetReadDeadline once armed: any panic in readLoop
// while it holds cn.mu (a Yaegi call wrapper's, say).
type panicConn struct {
	net.Conn
	armed int32
}

func (p *panicConn) SetReadDeadline(t time.Time) error {
	if time.Until(t) > 10*time.Second && atomic.CompareAndSwapInt32(&p.armed, 1, 2) { // the reader's idle watch
		panic("boom")
	}
	return p.Conn.SetReadDeadline(t)
}

// pongServer answers every command with +PONG, after delay but the first.
func pongServer(t *testing.T, delay time.Duration) string {
	t.Helper()
	return listen(t, func(c net.Conn) {
		defer c.Close()
		br := bufio.NewReader(c)
		for n := 0; ; n++ {
			if _, err := redistest.ReadCommand(br); err != nil {
				return
			}
			if n > 0 {
				time.Sleep(delay)
			}
			if _, err := c.Write([]byte("+PONG\r\n")); err != nil {
				return
			}
		}
	})
}

// A panic in the reader while it holds the lock kills the connection:
// the calls on it fail, none hangs. Seen before: the recovery took the
// lock it held, and every call on the connection waited for ever.
func TestReaderPanicFailsTheConnectionsCalls(t *testing.T) {
	nc, err := net.Dial("tcp", pongServer(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	pc := &panicConn{Conn: nc}
	cn := newConn(pc)
	startReader(cn, nil)
	if _, err := awaitShort(t, cn); err != nil {
		t.Fatalf("first call: %v", err)
	}
	atomic.StoreInt32(&pc.armed, 1) // the reader's next idle watch panics, its lock held
	redistest.WaitFor(t, func() bool { return atomic.LoadInt32(&pc.armed) == 2 }, "the reader's panic")
	done := make(chan error, 1)
	go func() {
		cl := newCall()
		done <- cn.exchange(nil, cl, pingCmd, nil, nil, "", 50*time.Millisecond, time.Now)
	}()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Fatal("a call never returned after the reader panicked")
	}
	if cn.deadErr() == nil {
		t.Error("the connection lives on after its reader panicked")
	}
}

// countConn counts the reads of its reader.
type countConn struct {
	net.Conn
	reads int64
}

func (c *countConn) Read(b []byte) (int, error) {
	atomic.AddInt64(&c.reads, 1)
	return c.Conn.Read(b)
}

// A call that waits for a slow reply costs its reader one read, whatever
// late looks came before it. Seen before: a late look's deadline (set
// after a check had set its own) stayed on the socket, and the reader
// timed out at once, over and over, until the reply.
func TestAWaitingCallCostsItsReaderNoSpin(t *testing.T) {
	nc, err := net.Dial("tcp", pongServer(t, 150*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	cc := &countConn{Conn: nc}
	cn := newConn(cc)
	startReader(cn, nil)
	if _, err := awaitShort(t, cn); err != nil { // answered at once; its 5 ms deadline left to fire
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond)
	before := atomic.LoadInt64(&cc.reads)
	cl := newCall()
	if err := cn.exchange(nil, cl, pingCmd, nil, nil, "", time.Second, time.Now); err != nil {
		t.Fatalf("a call answered in 150 ms: %v", err)
	}
	if n := atomic.LoadInt64(&cc.reads) - before; n > 6 {
		t.Errorf("%d reads while one call waited 150 ms for its reply, want a few", n)
	}
}

// A connection that owes replies to no one (its checks timed out on a
// frozen Redis) ends with its reader once its pool drops it, within an
// idle watch. Seen before: CloseIdle skipped it, and its reader waited
// on the socket for ever.
func TestDroppedConnectionOwingRepliesEnds(t *testing.T) {
	f := redistest.StartFake(t, "+1 3 0 2000\r\n")
	const timeout = 30 * time.Millisecond
	c := NewPool(Options{Addr: f.Addr(), Timeout: timeout, PoolSize: 1, Script: testScript})
	c.watch = 200 * time.Millisecond // before its readers start
	c.Warm()
	waitConns(t, c, 1)
	c.mu.Lock()
	cn := c.conns[0]
	c.mu.Unlock()
	f.Freeze()
	if err := c.check(command(len(testKey)), testKey, make([]int64, 4), timeout); err == nil {
		t.Fatal("a check on a frozen Redis answered")
	}
	c.forget() // the topology moved on: CloseIdle skips it, owing a reply
	redistest.WaitFor(t, func() bool { return cn.deadErr() != nil }, "the dropped connection closed")
}
