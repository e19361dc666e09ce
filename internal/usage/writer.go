package usage

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Shape is what one policy owner reads of a response: the header naming
// its cost (canonical; "" none), the body's paths (ParsePath's; nil
// none), the bytes of a JSON body kept (Scanner), whether the header
// reaches the client, and the largest cost a response may name.
// Compiled by internal/config from a ResponseCost.
type Shape struct {
	Header     string
	Paths      [][]string
	MaxScan    int
	KeepHeader bool
	Max        int64
}

// ParseCost reads a cost header's values v: the cost they name, and
// whether they name one well (none: 0, true).
func ParseCost(v []string, max int64) (int64, bool) {
	if len(v) == 0 {
		return 0, true
	}
	if len(v) > 1 || len(v[0]) == 0 || len(v[0]) > 13 {
		return 0, false
	}
	n, err := strconv.ParseInt(v[0], 10, 64)
	if err != nil || n < 0 || n > max || v[0][0] == '+' {
		return 0, false
	}
	return n, true
}

// Writer is the ResponseWriter of a request whose policies read a
// response cost: it takes each shape's cost header out of the response
// (unless KeepHeader), hands every chunk of the body to the client first
// and then to the shapes' Scanners, and flushes the client's writer after
// each write of a stream, as a proxy asks (Yaegi hands compiled code the
// ResponseWriter, and the Hijacker, of an interpreted type, not its
// Flusher). Used by the request's goroutine (and the handler's, which
// calls it) alone.
type Writer struct {
	rw       http.ResponseWriter
	flusher  http.Flusher // rw's, nil when it has none
	shapes   []*Shape
	headers  [][]string // by shape: the header's values; nil: none came
	scans    []*Scanner // by shape: nil when the body is not read
	started  bool       // the response's header was written
	status   int        // the final status written (0: none yet)
	stream   bool       // flush after each write: an event stream, or a body of no known length
	noBody   bool       // a HEAD request's response, or hijacked: no body to read
	hijacked bool       // the connection is the handler's: nothing more is written or flushed through rw
}

// NewWriter wraps rw for shapes (distinct), for a request of method.
func NewWriter(rw http.ResponseWriter, shapes []*Shape, method string) *Writer {
	w := &Writer{rw: rw, shapes: shapes, noBody: method == http.MethodHead}
	w.flusher, _ = rw.(http.Flusher)
	w.headers = make([][]string, len(w.shapes))
	w.scans = make([]*Scanner, len(w.shapes))
	return w
}

// IndexOf is shape's index in shapes, or -1.
func IndexOf(shapes []*Shape, shape *Shape) int {
	for i, s := range shapes {
		if s == shape {
			return i
		}
	}
	return -1
}

// Header implements http.ResponseWriter.
func (w *Writer) Header() http.Header { return w.rw.Header() }

// WriteHeader implements http.ResponseWriter: a final status starts the
// response (start).
func (w *Writer) WriteHeader(code int) {
	if (code >= 200 || code == http.StatusSwitchingProtocols) && !w.started {
		w.status = code
		w.start()
	}
	w.rw.WriteHeader(code)
}

// Write implements http.ResponseWriter: p goes to the client (flushed, a
// stream), then to the scanners.
func (w *Writer) Write(p []byte) (int, error) {
	if !w.started {
		w.start()
	}
	n, err := w.rw.Write(p)
	if w.stream && err == nil && !w.hijacked {
		w.flusher.Flush() // the client first, the scan after
	}
	for _, s := range w.scans {
		if s != nil && n > 0 {
			s.Write(p[:n])
		}
	}
	return n, err
}

// Flush implements http.Flusher.
func (w *Writer) Flush() {
	if w.flusher != nil && !w.hijacked {
		w.flusher.Flush()
	}
}

// Hijack implements http.Hijacker (a WebSocket upgrade): the connection
// is the client's, and no cost is read from it.
func (w *Writer) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := w.rw.(http.Hijacker)
	if !ok {
		return nil, nil, fmt.Errorf("tollgate: %T is not an http.Hijacker", w.rw)
	}
	w.noBody, w.hijacked = true, true
	return h.Hijack()
}

// Unwrap returns the client's ResponseWriter (http.ResponseController).
func (w *Writer) Unwrap() http.ResponseWriter { return w.rw }

// start reads the response's header before it is written: each shape's
// cost header (taken out unless keepHeader), and a scanner for the body
// of each shape with paths.
func (w *Writer) start() {
	w.started = true
	h := w.rw.Header()
	// What the proxy would flush (an event stream at once, a body of no
	// known length as it comes) is flushed after each write; a body of
	// known length is left to the server's buffer, framed as it was.
	ctype := h.Get("Content-Type")
	w.stream = w.flusher != nil && (h.Get("Content-Length") == "" || strings.HasPrefix(strings.ToLower(ctype), "text/event-stream"))
	for i, s := range w.shapes {
		if s.Header != "" {
			w.headers[i] = h[s.Header]
		}
		if s.Paths != nil {
			w.scans[i] = New(s.Paths, s.Max, s.MaxScan, ctype, h.Get("Content-Encoding"))
		}
	}
	for _, s := range w.shapes { // once every shape has read it (a rule's may name the top level's)
		if s.Header != "" && !s.KeepHeader {
			delete(h, s.Header)
		}
	}
}

// costOf is what the response said shape i cost: the cost and Found (it
// did, or had nothing to say: an upgrade, no body), or 0 and why not.
func (w *Writer) costOf(i int) (int64, int) {
	if w.hijacked {
		return 0, Found // an upgrade: the connection is the client's; its 101 is the proxy's own
	}
	shape := w.shapes[i]
	if v := w.headers[i]; v != nil || shape.Paths == nil {
		n, ok := ParseCost(v, shape.Max)
		if !ok {
			return 0, Invalid
		}
		return n, Found
	}
	if w.noBody || w.status == http.StatusNoContent || w.status == http.StatusNotModified {
		return 0, Found // nothing was to be read: the request's cost
	}
	if w.scans[i] == nil {
		return 0, Missing // no body, or none that is read (text/plain)
	}
	return w.scans[i].Result()
}

// Costs returns, once the response has ended (or the client has gone),
// what it said each shape cost: the cost and Found, or 0 and Invalid,
// Missing or Encoded when it named none well. Called once per response: a
// Scanner reads its body once.
func (w *Writer) Costs() ([]int64, []int) {
	if !w.started && !w.hijacked {
		w.start() // a handler that wrote nothing: the server writes its header once it returns
	}
	ns, rs := make([]int64, len(w.shapes)), make([]int, len(w.shapes))
	for i := range w.shapes {
		ns[i], rs[i] = w.costOf(i)
	}
	return ns, rs
}
