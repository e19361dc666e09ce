package redis

// Plain RESP, for the commands outside the per-request exchange
// (heartbeats, ASKING, the sentinel subscription): writing a command and
// reading the few reply shapes they get. Each reader returns an error reply
// as an error wrapping ErrBadReply, and any malformed input as ErrBadReply:
// never a panic (FuzzTopologyReplies). A line is at most the bufio.Reader's
// buffer; the lengths a reply claims are bounded, and memory is allocated as
// the bytes arrive, not from the claimed length (as in the redigo bounds
// patch), so a hostile server cannot make a read exhaust memory.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
)

// Limits on what a reply may claim; beyond them a read fails with
// ErrBadReply.
const (
	maxBulkLen  = 1 << 20 // bytes in a bulk string
	maxArrayLen = 1 << 16 // elements in an array

	// At most this much is allocated ahead of the data that fills it.
	arrayPrealloc = 16      // elements
	bulkPrealloc  = 4 << 10 // bytes
)

// AppendCommand appends a command (verb and arguments) in RESP.
func AppendCommand(b []byte, verb string, args ...string) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(1+len(args)), 10)
	b = append(b, "\r\n"...)
	b = bulk(b, verb)
	for _, a := range args {
		b = bulk(b, a)
	}
	return b
}

// readLine reads one reply line without its CRLF; an error reply is an
// error.
func readLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		return nil, ErrBadReply // longer than the reader's buffer
	}
	if err != nil {
		return nil, err
	}
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 {
		return nil, ErrBadReply
	}
	if line[0] == '-' {
		return nil, fmt.Errorf("%w: %q", ErrBadReply, line[1:])
	}
	return line, nil
}

// readInt reads an integer reply.
func readInt(br *bufio.Reader) (int64, error) {
	line, err := readLine(br)
	if err != nil {
		return 0, err
	}
	if line[0] != ':' {
		return 0, ErrBadReply
	}
	n, err := strconv.ParseInt(string(line[1:]), 10, 64)
	if err != nil {
		return 0, ErrBadReply
	}
	return n, nil
}

// readTime reads TIME's reply, in µs since the Unix epoch.
func readTime(br *bufio.Reader) (int64, error) {
	line, err := readLine(br)
	if err != nil {
		return 0, err
	}
	if string(line) != "*2" {
		return 0, ErrBadReply
	}
	var v [2]int64
	for i := range v {
		if _, err := readLine(br); err != nil { // $len
			return 0, err
		}
		line, err := readLine(br)
		if err != nil {
			return 0, err
		}
		if v[i], err = strconv.ParseInt(string(line), 10, 64); err != nil || v[i] < 0 {
			return 0, ErrBadReply
		}
	}
	return v[0]*1000000 + v[1], nil
}

// readStrings reads an array of bulk strings and integers (a pub/sub
// message or subscription), as strings.
func readStrings(br *bufio.Reader) ([]string, error) {
	line, err := readLine(br)
	if err != nil {
		return nil, err
	}
	if line[0] != '*' {
		return nil, ErrBadReply
	}
	n, err := parseCount(line[1:], maxArrayLen)
	if err != nil {
		return nil, err
	}
	return readElements(br, n, false)
}

// readBulk reads a bulk string's n bytes and its CRLF, growing its buffer as
// the bytes arrive (at most bulkPrealloc ahead of them).
func readBulk(br *bufio.Reader, n int) ([]byte, error) {
	size := n + 2
	if size > bulkPrealloc {
		size = bulkPrealloc
	}
	b := make([]byte, 0, size)
	for len(b) < n+2 {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		end := cap(b)
		if end > n+2 {
			end = n + 2
		}
		m, err := io.ReadFull(br, b[len(b):end])
		b = b[:len(b)+m]
		if err != nil {
			return nil, err
		}
	}
	if b[n] != '\r' || b[n+1] != '\n' {
		return nil, ErrBadReply
	}
	return b[:n], nil
}

// parseCount parses a RESP length, at most limit.
func parseCount(b []byte, limit int) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 || n > limit {
		return 0, ErrBadReply
	}
	return n, nil
}

// maxReplyBytes bounds the bytes of one reply readValues accepts.
const maxReplyBytes = 4 << 20

// readValues reads one reply as strings: an integer, status or bulk string
// as one, an array of them (not nested) as its elements (a nil one as ""),
// a nil bulk or array as none. An error reply is one string starting with "-", so that
// a pipeline's other replies are still read. At most maxReplyBytes are
// accepted.
func readValues(br *bufio.Reader) ([]string, error) {
	line, err := replyLine(br)
	if err != nil {
		return nil, err
	}
	if line[0] != '*' {
		budget := maxReplyBytes
		v, isNil, err := readScalar(br, line, &budget)
		if err != nil || isNil {
			return nil, err
		}
		return []string{v}, nil
	}
	if string(line) == "*-1" {
		return nil, nil
	}
	n, err := parseCount(line[1:], maxArrayLen)
	if err != nil {
		return nil, err
	}
	return readElements(br, n, true)
}

// readElements reads the n elements of an array whose line was read: bulk
// strings and integers, and when lenient statuses, errors (as "-...") and
// nil bulks (as ""); at most maxReplyBytes in all.
func readElements(br *bufio.Reader, n int, lenient bool) ([]string, error) {
	budget := maxReplyBytes
	size := n
	if size > arrayPrealloc {
		size = arrayPrealloc
	}
	out := make([]string, 0, size)
	for i := 0; i < n; i++ {
		line, err := replyLine(br)
		if err != nil {
			return nil, err
		}
		if budget -= len(line); budget < 0 || !lenient && line[0] != ':' && line[0] != '$' || !lenient && string(line) == "$-1" {
			return nil, ErrBadReply
		}
		v, _, err := readScalar(br, line, &budget)
		if err != nil {
			return nil, err
		}
		out = append(out, v) // a nil element (HMGET's missing field) as ""
	}
	return out, nil
}

// replyLine reads a reply's line, without its CRLF.
func replyLine(br *bufio.Reader) ([]byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil || len(line) < 3 || line[len(line)-2] != '\r' {
		if err == nil || err == bufio.ErrBufferFull {
			err = ErrBadReply
		}
		return nil, err
	}
	return line[:len(line)-2], nil
}

// readScalar reads the rest of a scalar reply whose line is line, taking
// its bytes from budget; an array is refused.
func readScalar(br *bufio.Reader, line []byte, budget *int) (string, bool, error) {
	switch line[0] {
	case '-':
		return string(line), false, nil
	case ':', '+':
		return string(line[1:]), false, nil
	case '$':
		if string(line) == "$-1" {
			return "", true, nil
		}
		size, err := parseCount(line[1:], maxBulkLen)
		if err != nil || size > *budget {
			return "", false, ErrBadReply
		}
		*budget -= size
		b, err := readBulk(br, size)
		if err != nil {
			return "", false, err
		}
		return string(b), false, nil
	}
	return "", false, ErrBadReply
}

// bulk appends a RESP bulk string.
func bulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, "\r\n"...)
	b = append(b, s...)
	return append(b, "\r\n"...)
}
