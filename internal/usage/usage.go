// Package usage reads what a response says it cost from its body, as the
// body streams to the client: the numbers at a few dotted paths of a JSON
// body (OpenAI's usage.total_tokens, Anthropic's usage.input_tokens and
// usage.output_tokens), or of the JSON events of a text/event-stream.
//
// A Scanner sees each chunk after it was written to the client: nothing is
// held back. A JSON body is kept in a bounded tail (the last max bytes:
// the usage object usually ends the body) and read once it has ended: the
// whole body when it fitted, else the last occurrence of each path's first
// key in the tail. An event stream is read event by event; per path, the
// last value seen counts, so that a stream that reports its usage in its
// last events (OpenAI's include_usage, Anthropic's message_delta) is
// charged what it said last. The parsing is the standard library's
// (bytes.Index, encoding/json on a bounded window): no byte loop runs in
// interpreted code.
//
// A Scanner is used by one response's goroutine; it is not safe for
// concurrent use.
package usage

import (
	"bytes"
	"encoding/json"
	"mime"
	"strconv"
	"strings"
)

// Results of a scan (Scanner.Result).
const (
	Found   = 0 // at least one path held a number: the sum
	Missing = 1 // no path held anything (or the body was no JSON)
	Invalid = 2 // a path held something else than an integer from 0 up, or the sum passed max
	Encoded = 3 // the body is compressed (Content-Encoding): not read
)

// Body kinds.
const (
	none = iota
	jsonBody
	eventStream
)

// maxEvent bounds one event of a stream (its data lines together); a
// longer event is skipped, and so is a longer line.
const maxEvent = 1 << 20

// MaxPathDepth and MaxPaths bound what a configuration may ask for.
const (
	MaxPaths     = 8
	MaxPathDepth = 8
)

// Scanner reads one response body (see the package doc).
type Scanner struct {
	paths  [][]string
	keys   [][]byte // each path's first key, quoted: what a window or an event must hold to be read
	max    int64    // the largest sum a response may name
	kind   int
	window int // the tail's bound, bytes

	tail  []byte // JSON: the body's last bytes (at most 2 x window, compacted to window)
	total int64  // JSON: bytes seen

	buf     []byte // events: what follows the last event read (at most maxEvent)
	begun   bool   // events: the stream's first bytes were seen (a byte order mark is dropped from them)
	skip    bool   // events: the event being read passed maxEvent: dropped to its end
	vals    []int64
	seen    []bool
	invalid bool
	encoded bool
}

// ParsePath splits a dotted path ("usage.total_tokens") into its keys, or
// returns "" and an error text naming what is wrong.
func ParsePath(p string) ([]string, string) {
	if p == "" || len(p) > 256 {
		return nil, "must be 1 to 256 characters"
	}
	keys := strings.Split(p, ".")
	if len(keys) > MaxPathDepth {
		return nil, "has more than " + strconv.Itoa(MaxPathDepth) + " keys"
	}
	for _, k := range keys {
		if k == "" {
			return nil, "has an empty key"
		}
		for i := 0; i < len(k); i++ {
			c := k[i]
			if c <= ' ' || c > '~' || c == '"' || c == '\\' {
				return nil, "may hold printable characters only, no quotes or backslashes"
			}
		}
	}
	return keys, ""
}

// New returns a Scanner of the body a response of header values
// contentType and contentEncoding has, for paths (ParsePath's), keeping at
// most window bytes of a JSON body; sums over max are invalid. It returns
// nil when the body is neither JSON nor an event stream (nothing to
// read), and a Scanner whose Result is Encoded when it is compressed.
func New(paths [][]string, max int64, window int, contentType, contentEncoding string) *Scanner {
	s := &Scanner{paths: paths, max: max, window: window, vals: make([]int64, len(paths)), seen: make([]bool, len(paths))}
	if e := strings.TrimSpace(contentEncoding); e != "" && !strings.EqualFold(e, "identity") {
		s.encoded = true // kind none: nothing is read
		return s
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil { // a bad parameter: the type before it
		mt = strings.ToLower(strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0]))
	}
	switch {
	case mt == "application/json" || strings.HasSuffix(mt, "+json"):
		s.kind = jsonBody
	case mt == "text/event-stream":
		s.kind = eventStream
	default:
		return nil
	}
	for _, p := range paths {
		s.keys = append(s.keys, []byte(strconv.Quote(p[0])))
	}
	return s
}

// Write reads p, the next bytes of the body as written to the client.
func (s *Scanner) Write(p []byte) {
	switch s.kind {
	case jsonBody:
		s.total += int64(len(p))
		if len(p) >= s.window {
			s.tail = append(s.tail[:0], p[len(p)-s.window:]...)
			return
		}
		if len(s.tail)+len(p) > 2*s.window { // compacted once per window's worth: amortized
			keep := s.window - len(p)
			s.tail = append(s.tail[:0], s.tail[len(s.tail)-keep:]...)
		}
		s.tail = append(s.tail, p...)
	case eventStream:
		s.buf = append(s.buf, p...)
		s.events(false)
	}
}

// Events: an event ends at a blank line ("\n\n", "\n\r\n"); lines end in
// "\n" or "\r\n".
var (
	lf     = []byte("\n\n")
	crlf   = []byte("\n\r\n")
	blanks = "\r\n"
	bom    = []byte("\xef\xbb\xbf")
)

// events reads the events buf ends, and keeps what follows them; ended:
// the body has ended, and what is left is an event too.
func (s *Scanner) events(ended bool) {
	if !s.begun { // the stream's first bytes: a byte order mark is not data
		s.begun = true
		s.buf = bytes.TrimPrefix(s.buf, bom)
	}
	b := s.buf
	for len(b) > 0 {
		i, n := bytes.Index(b, lf), 2
		if j := bytes.Index(b, crlf); j >= 0 && (i < 0 || j < i) {
			i, n = j, 3
		}
		if i < 0 {
			if ended {
				s.event(b)
				b = b[:0]
			}
			break
		}
		if s.skip {
			s.skip = false // the end of the event too long to read
		} else {
			s.event(b[:i])
		}
		b = bytes.TrimLeft(b[i+n:], blanks) // a run of blank lines at once
	}
	if len(b) > maxEvent {
		s.skip, b = true, b[:0] // too long to read: dropped to its end
	}
	s.buf = append(s.buf[:0], b...)
}

// event reads one event (its lines, without the blank line that ends it):
// its data lines joined by "\n", when it holds one of the paths' keys.
func (s *Scanner) event(e []byte) {
	wanted := false
	for _, k := range s.keys {
		wanted = wanted || bytes.Contains(e, k)
	}
	if !wanted {
		return // text, [DONE], an event without usage: no line looked at
	}
	var data []byte
	for len(e) > 0 {
		line := e
		if i := bytes.IndexByte(e, '\n'); i >= 0 {
			line, e = e[:i], e[i+1:]
		} else {
			e = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if bytes.HasPrefix(line, []byte("data:")) {
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, line[5:]...)
		}
	}
	data = bytes.TrimLeft(data, " \t")
	if len(data) > 0 && data[0] == '{' {
		s.readPaths(data)
	}
}

// Result returns what the body said, once it has ended (or the client has
// gone): the sum of the paths found and Found, or 0 and Missing, Invalid
// or Encoded.
func (s *Scanner) Result() (int64, int) {
	if s.encoded {
		return 0, Encoded
	}
	switch s.kind {
	case jsonBody:
		s.readJSON()
	case eventStream:
		if !s.skip {
			s.events(true)
		}
	}
	if s.invalid {
		return 0, Invalid
	}
	var sum int64
	found := false
	for i := range s.paths {
		if s.seen[i] {
			found = true
			sum += s.vals[i]
			if sum > s.max || sum < 0 {
				return 0, Invalid
			}
		}
	}
	if !found {
		return 0, Missing
	}
	return sum, Found
}

// readJSON reads the paths of a JSON body: along each path in the whole
// body when it fitted (each level decoded as raw values: no tree of the
// body is built), else, or when that found nothing (a JSON value per
// line), the last occurrence of each path's first key in the tail.
func (s *Scanner) readJSON() {
	if s.total <= int64(s.window) && s.readPaths(s.tail) {
		return
	}
	for i, p := range s.paths {
		raw, ok := lastValue(s.tail, s.keys[i])
		if ok && len(p) > 1 {
			raw, ok = lookupRaw(raw, p[1:])
		}
		if ok {
			s.put(i, raw)
		}
	}
}

// readPaths records the paths found in the JSON object doc (its top level
// decoded once for every path, each path's deeper levels as it goes down,
// as raw values) and reports whether it found any.
func (s *Scanner) readPaths(doc []byte) bool {
	var top map[string]json.RawMessage
	if json.Unmarshal(doc, &top) != nil {
		return false
	}
	found := false
	for i, p := range s.paths {
		raw, ok := top[p[0]]
		if ok && len(p) > 1 {
			raw, ok = lookupRaw(raw, p[1:])
		}
		if ok {
			found = true
			s.put(i, raw)
		}
	}
	return found
}

// put records path i's value raw (a JSON value), replacing an earlier one
// (an event stream's last value counts).
func (s *Scanner) put(i int, raw []byte) {
	n, ok := integer(raw)
	if !ok {
		s.invalid = true
		return
	}
	s.vals[i], s.seen[i] = n, true
}

// lastValue returns the JSON value after the last occurrence of key (a
// quoted object key followed by a colon) in b that is not inside a string
// it can tell (an escaped quote before it).
func lastValue(b, key []byte) ([]byte, bool) {
	end := len(b)
	for tries := 0; tries < 64; tries++ {
		i := bytes.LastIndex(b[:end], key)
		if i < 0 {
			return nil, false
		}
		end = i
		if i > 0 && b[i-1] == '\\' {
			continue
		}
		rest := bytes.TrimLeft(b[i+len(key):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		var v json.RawMessage
		if json.NewDecoder(bytes.NewReader(rest[1:])).Decode(&v) != nil {
			continue
		}
		return v, true
	}
	return nil, false
}

// lookupRaw walks keys down the objects of the JSON document b, one level
// decoded at a time (its members kept raw), and returns the value found.
func lookupRaw(b []byte, keys []string) ([]byte, bool) {
	for _, k := range keys {
		var m map[string]json.RawMessage
		if json.Unmarshal(b, &m) != nil {
			return nil, false
		}
		v, ok := m[k]
		if !ok {
			return nil, false
		}
		b = v
	}
	return b, true
}

// integer reads raw as a count: a JSON integer from 0 to 2^53 (what a
// JSON number holds exactly), nothing else (no string, fraction or
// exponent).
func integer(raw []byte) (int64, bool) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || (t[0] != '-' && (t[0] < '0' || t[0] > '9')) {
		return 0, false
	}
	n, err := strconv.ParseInt(string(t), 10, 64)
	if err != nil || n < 0 || n > 1<<53 {
		return 0, false
	}
	return n, true
}
