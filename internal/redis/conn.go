package redis

// One connection shared by the checks in flight on it, and the calls they
// queue on it (the writes: wire.go; the reads: reader.go).

import (
	"bufio"
	"net"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/clock"
)

const (
	// lateGrace is how long a read that timed out looks again for a reply
	// already received (see lateRead).
	lateGrace = 200 * time.Microsecond
	// lateLooks bounds the looks of a read that timed out, and lateWake
	// is how late past its deadline a look may end and still have looked
	// (see lateRead).
	lateLooks = 3
	lateWake  = 50 * time.Microsecond
	// minWriteBudget is the least a write may block (writeBudget).
	minWriteBudget = 50 * time.Millisecond
	// maxQueue bounds the calls in flight on one connection.
	maxQueue = 4096
	// readerSize is the reply buffer of a connection, and the longest
	// reply line a call may get (MaxLine).
	readerSize = 4096
)

// MaxLine is the longest status line a call's reply may be: a script's
// reply must fit.
const MaxLine = readerSize

// processStart and monoOrigin are clock.Start and clock.Origin as the
// calls read them: under Yaegi a read of another package's variable or
// constant allocates, and every call reads them.
var processStart = clock.Start

const monoOrigin = clock.Origin

// rconn is one connection to Redis, shared by every check in flight on it.
// Safe for concurrent use. The write lock orders calls; mu guards the
// queue. A pooled connection has a reader of its own (readLoop), from
// before its first call to its death; a side connection is read by its
// one user (side.go).
type rconn struct {
	nc net.Conn
	br *bufio.Reader // read only by the reader

	part []byte // a reply line read in part (reader only)

	wmu        sync.Mutex // held while a call is queued and written
	wbuf       []byte     // guarded by wmu
	writeUntil int64      // monotonic ns until which the write deadline set leaves a write budget; 0: set it (guarded by wmu)

	mu        sync.Mutex
	queue     []*call       // written, reply not yet read, in stream order
	dead      error         // not nil once the stream is unusable
	inflight  int64         // len(queue), read atomically by the pool; deadLoad once dead
	mixed     bool          // calls with different timeouts were written on it
	readUntil int64         // the socket's read deadline as the reader knows it, monotonic ns; staleDeadline, 0, -1: see readLoop
	timeout   time.Duration // the timeout of the calls written so far
	used      int64         // monotonic ns when the pool last handed it out (guarded by the pool's mu)
	born      int64         // monotonic ns when it joined the pool
	epoch     int64         // the pool's epoch when it last proved good (guarded by the pool's mu; stale.go)
	id        int64         // its CLIENT ID; 0: unknown (set before it joins the pool)
	run       string        // its server's run_id; "": unknown (set before it joins the pool)
	pool      *Pool         // told of its death by its reader; nil: none (a side connection, tests)
}

// call is one request on a connection and, once done, its reply line (a
// status line: the decision, +PONG, +OK) or its error. Fields are guarded
// by the connection's mu; line and err are read by the caller once done.
// A call's fields are reset one by one by releaseCall: a new field is
// reset there too.
type call struct {
	sent     int64 // monotonic ns (internal/clock) when its write returned; 0 until then
	timeout  int64 // ns: its budget, from sent or from the reply before it
	deadline int64 // monotonic ns; 0 until written
	line     []byte
	err      error
	done     bool
	waiting  bool          // its check sleeps on wake
	wake     chan struct{} // capacity 1: one send per sleep
	d        []int64       // not nil: the check's decision, which the status reply is decoded into instead of line (PoolCheck)
}

func newConn(nc net.Conn) *rconn {
	return &rconn{nc: nc, br: bufio.NewReaderSize(nc, readerSize), wbuf: make([]byte, 0, 256)}
}

// calls recycles calls (and their channels): a check takes one and gives
// it back once done and out of its connection's queue (releaseCall).
var calls sync.Pool

func newCall() *call {
	if cl, ok := calls.Get().(*call); ok {
		return cl
	}
	return &call{wake: make(chan struct{}, 1)}
}

// releaseCall gives cl back for reuse: only a call that was answered (its
// reply read, so out of the queue) and whose check is done with it.
func releaseCall(cl *call) {
	cl.sent = 0 // field by field: under Yaegi, call{} would be a value more to allocate
	cl.timeout = 0
	cl.deadline = 0
	cl.line = cl.line[:0]
	cl.err = nil
	cl.done = false
	cl.waiting = false
	cl.d = nil
	calls.Put(cl)
}

// finish completes cl and wakes its check. Requires cn.mu held.
func finish(cl *call, line []byte, err error) {
	if cl.done {
		return
	}
	if err == nil && cl.d != nil {
		err = decode(line, cl.d, nil)
	} else {
		cl.line = append(cl.line[:0], line...)
	}
	cl.err, cl.done = err, true
	wake(cl)
}

// wake wakes cl's check if it sleeps. Requires cn.mu held.
func wake(cl *call) {
	if cl.waiting {
		cl.waiting = false
		cl.wake <- struct{}{}
	}
}
