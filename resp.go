package tollgate

// Plain RESP, for the commands outside the per-request exchange
// (heartbeats, ASKING, the sentinel subscription): writing a command and
// reading the few reply shapes they get. Each reader returns an error reply
// as an error wrapping errBadReply, and any malformed input as errBadReply:
// never a panic (FuzzTopologyReplies).

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"strconv"
)

// appendCommand appends a command (verb and arguments) in RESP.
func appendCommand(b []byte, verb string, args ...string) []byte {
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
	if err != nil {
		return nil, err
	}
	line = bytes.TrimRight(line, "\r\n")
	if len(line) == 0 {
		return nil, errBadReply
	}
	if line[0] == '-' {
		return nil, fmt.Errorf("%w: %s", errBadReply, line[1:])
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
		return 0, errBadReply
	}
	n, err := strconv.ParseInt(string(line[1:]), 10, 64)
	if err != nil {
		return 0, errBadReply
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
		return 0, errBadReply
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
			return 0, errBadReply
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
		return nil, errBadReply
	}
	n, err := parseCount(line[1:])
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, n)
	for i := 0; i < n; i++ {
		if line, err = readLine(br); err != nil {
			return nil, err
		}
		switch line[0] {
		case ':':
			out = append(out, string(line[1:]))
		case '$':
			size, err := parseCount(line[1:])
			if err != nil {
				return nil, err
			}
			buf := make([]byte, size+2)
			if _, err := io.ReadFull(br, buf); err != nil {
				return nil, err
			}
			out = append(out, string(buf[:size]))
		default:
			return nil, errBadReply
		}
	}
	return out, nil
}

// parseCount parses a RESP length, at most 1 MB.
func parseCount(b []byte) (int, error) {
	n, err := strconv.Atoi(string(b))
	if err != nil || n < 0 || n > 1<<20 {
		return 0, errBadReply
	}
	return n, nil
}
