package redis

// The prepared script call and its reply.

import (
	"strconv"
)

// Command is a prepared EVALSHA (and EVAL) of a script (NewCommand): only
// the caller's key changes between calls, so a call is written as head,
// key, mid[0], key, ..., tail. Read only once made; safe for concurrent
// use.
type Command struct {
	shaHead  []byte                // "*N $7 EVALSHA $40 <sha> $len <n>" and the first key's "$len"
	evalHead []byte                // the same with EVAL and the script
	mid      [][]byte              // key i's suffix and key i+1's "$len"
	tail     []byte                // the last key's suffix, then interval, burst, cost of every bucket
	verify   func(d []int64) error // see NewCommand
}

// NewCommand prepares a call of script with len(suffixes) keys and args:
// key i is the caller's key, keyLens[i] bytes long in every call, then
// suffixes[i]. Only the caller's key changes between calls, so a call is
// written as head, key, mid[0], key, ..., tail. verify, when not nil,
// judges a reply whose first number is not 1 (a rate limiter's refusal):
// the error it returns is the call's, as a reply no call expects is
// (ErrBadReply). The common reply, 1 first, costs it nothing.
func NewCommand(script *Script, keyLens []int, suffixes []string, args []string, verify func(d []int64) error) *Command {
	n := len(suffixes)
	keyHead := func(i int) []byte {
		h := []byte("$")
		h = strconv.AppendInt(h, int64(keyLens[i]+len(suffixes[i])), 10)
		return append(h, "\r\n"...)
	}
	head := func(verb, body string) []byte {
		b := []byte("*")
		b = strconv.AppendInt(b, int64(3+n+len(args)), 10)
		b = append(b, "\r\n"...)
		b = bulk(b, verb)
		b = bulk(b, body)
		b = bulk(b, strconv.Itoa(n))
		return append(b, keyHead(0)...)
	}
	cmd := &Command{shaHead: head("EVALSHA", script.SHA), evalHead: head("EVAL", script.Body), verify: verify}
	for i := 1; i < n; i++ {
		cmd.mid = append(cmd.mid, append([]byte(suffixes[i-1]+"\r\n"), keyHead(i)...))
	}
	cmd.tail = []byte(suffixes[n-1] + "\r\n")
	for _, a := range args {
		cmd.tail = bulk(cmd.tail, a)
	}
	return cmd
}

// appendCall appends cmd's call that starts with head (shaHead or
// evalHead) for the client key.
func appendCall(b []byte, cmd *Command, head []byte, key string) []byte {
	if cmd == nil {
		return b // a prefix alone (send)
	}
	b = append(b, head...)
	b = append(b, key...)
	for _, m := range cmd.mid {
		b = append(b, m...)
		b = append(b, key...)
	}
	return append(b, cmd.tail...)
}

// decode parses a script's status line of numbers ("+1 4 0 1000\r\n", at
// least 3 bytes) into d: exactly len(d) integers from 0 to the largest
// int64, of 1 to maxDigits digits, single spaces between them. What the
// numbers mean is cmd's verify's to check (cmd nil: the caller's). One pass and no call: the
// interpreter's cheapest parse (fmt.Sscan boxes every target; strconv is a
// call per number).
func decode(line []byte, d []int64, cmd *Command) error {
	end := len(line) - 2
	if end < 2 || line[end] != '\r' {
		return ErrBadReply
	}
	k := 0
	start := 1 // where the number being read starts
	var v int64
	for i := 1; i <= end; i++ {
		c := line[i]
		if c == ' ' || i == end {
			if i == start || i-start > maxDigits || v < 0 || k == len(d) || c == ' ' && k == len(d)-1 {
				return ErrBadReply
			}
			d[k] = v
			k++
			v = 0
			start = i + 1
		} else if c -= '0'; c <= 9 {
			v = v*10 + int64(c)
		} else {
			return ErrBadReply
		}
	}
	if k != len(d) {
		return ErrBadReply
	}
	if d[0] != 1 && cmd != nil && cmd.verify != nil {
		return cmd.verify(d)
	}
	return nil
}

// maxDigits bounds a number of a decision: an int64 has 19 digits; 19
// digits overflow at most once, into a negative number, which decode
// refuses.
const maxDigits = 19

// maxDecision is how many numbers of a decision a connection's reader
// decodes inline (21 buckets); a longer one is decode's.
const maxDecision = 64

// Joints returns what a call writes between its keys: key i's suffix
// and key i+1's length. A caller whose keys differ in length from call to
// call writes them whole (Whole).
func (c *Command) Joints() []string {
	j := make([]string, len(c.mid))
	for i, m := range c.mid {
		j[i] = string(m)
	}
	return j
}

// Whole returns c as a call of one key, written whole by the caller:
// every key of c and the Joints between them.
func (c *Command) Whole() *Command {
	one := *c
	one.mid = nil
	return &one
}

// Append appends the call of c for key to b, as EVALSHA or (eval) EVAL:
// for a pipeline written by hand (tests, tools).
func (c *Command) Append(b []byte, key string, eval bool) []byte {
	if eval {
		return appendCall(b, c, c.evalHead, key)
	}
	return appendCall(b, c, c.shaHead, key)
}
