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
	keys   [][]byte // each path's first key, quoted: what an event must hold to be decoded
	max    int64    // the largest sum a response may name
	kind   int
	window int // the tail's bound, bytes

	tail  []byte // JSON: the body's last window bytes (whole while total <= window)
	total int64  // JSON: bytes seen

	line    []byte // events: the line being read
	data    []byte // events: the current event's data lines, joined by "\n"
	skip    bool   // events: the current line or event is over maxEvent
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
	switch {
	case err != nil:
		return nil
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
		if over := len(s.tail) + len(p) - s.window; over > 0 {
			s.tail = append(s.tail[:0], s.tail[over:]...)
		}
		s.tail = append(s.tail, p...)
	case eventStream:
		for len(p) > 0 {
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				s.addLine(p, false)
				return
			}
			s.addLine(p[:i], true)
			p = p[i+1:]
		}
	}
}

// addLine adds b to the line being read, and reads the line when ended.
func (s *Scanner) addLine(b []byte, ended bool) {
	if !s.skip && len(s.line)+len(b) > maxEvent {
		s.skip, s.line = true, s.line[:0]
	}
	if !s.skip {
		s.line = append(s.line, b...)
	}
	if !ended {
		return
	}
	line := bytes.TrimSuffix(s.line, []byte("\r"))
	skipped := s.skip
	s.line, s.skip = s.line[:0], false
	switch {
	case skipped:
		s.data = append(s.data[:0], 0) // the event is spoilt: not JSON
	case len(line) == 0:
		s.event()
	case bytes.HasPrefix(line, []byte("data:")):
		v := bytes.TrimPrefix(line[5:], []byte(" "))
		if len(s.data)+1+len(v) > maxEvent {
			s.data = append(s.data[:0], 0)
			return
		}
		if len(s.data) > 0 {
			s.data = append(s.data, '\n')
		}
		s.data = append(s.data, v...)
	}
}

// event reads the event whose data was gathered, and starts the next.
func (s *Scanner) event() {
	d := s.data
	s.data = s.data[:0]
	if len(d) == 0 || d[0] != '{' {
		return // [DONE], text, an empty event
	}
	wanted := false
	for _, k := range s.keys {
		wanted = wanted || bytes.Contains(d, k)
	}
	if !wanted {
		return
	}
	var doc interface{}
	dec := json.NewDecoder(bytes.NewReader(d))
	dec.UseNumber()
	if dec.Decode(&doc) != nil {
		return
	}
	for i, p := range s.paths {
		v, ok := lookup(doc, p)
		if !ok {
			continue
		}
		if n, ok := integer(v); ok {
			s.vals[i], s.seen[i] = n, true
		} else {
			s.invalid = true
		}
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
		if len(s.line) > 0 && !s.skip {
			s.addLine(nil, true)
		}
		s.event()
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

// readJSON reads the paths of a JSON body: in the whole body when it
// fitted, else in the tail.
func (s *Scanner) readJSON() {
	if s.total <= int64(s.window) {
		var doc interface{}
		dec := json.NewDecoder(bytes.NewReader(s.tail))
		dec.UseNumber()
		if dec.Decode(&doc) == nil {
			for i, p := range s.paths {
				if v, ok := lookup(doc, p); ok {
					s.put(i, v)
				}
			}
			return
		}
	}
	// The tail only (or a body that is no JSON document as a whole: a
	// JSON value per line): each path's first key, from the end.
	for i, p := range s.paths {
		v, ok := lastValue(s.tail, s.keys[i])
		if !ok {
			continue
		}
		if len(p) > 1 {
			if v, ok = lookup(v, p[1:]); !ok {
				continue
			}
		}
		s.put(i, v)
	}
}

// put records path i's value v.
func (s *Scanner) put(i int, v interface{}) {
	if n, ok := integer(v); ok {
		s.vals[i], s.seen[i] = n, true
	} else {
		s.invalid = true
	}
}

// lastValue decodes the JSON value after the last occurrence of key (a
// quoted object key followed by a colon) in b that is not inside a string
// it can tell (an escaped quote before it).
func lastValue(b, key []byte) (interface{}, bool) {
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
		var v interface{}
		dec := json.NewDecoder(bytes.NewReader(rest[1:]))
		dec.UseNumber()
		if dec.Decode(&v) != nil {
			continue
		}
		return v, true
	}
	return nil, false
}

// lookup walks keys down doc's objects.
func lookup(doc interface{}, keys []string) (interface{}, bool) {
	v := doc
	for _, k := range keys {
		m, ok := v.(map[string]interface{})
		if !ok {
			return nil, false
		}
		if v, ok = m[k]; !ok {
			return nil, false
		}
	}
	return v, true
}

// integer reads v as a count: a JSON integer from 0 to 2^53 (what a JSON
// number holds exactly), nothing else.
func integer(v interface{}) (int64, bool) {
	num, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(num), 10, 64)
	if err != nil || n < 0 || n > 1<<53 {
		return 0, false
	}
	return n, true
}
