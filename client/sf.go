package client

// A bounded parser of RFC 9651 structured fields: the Lists and
// Dictionaries of the RateLimit headers, their Items and Parameters.
//
// Bounds: a field (its lines joined) longer than maxField bytes, more than
// maxMembers members, maxInner items in an inner list or maxParams
// parameters on one item fails to parse, as does anything RFC 9651 rejects;
// a field that fails to parse is ignored whole, as the RFC says. Every
// loop advances over the input, so the work is linear in its length, and
// nothing indexes past its end: hostile input costs at most maxField bytes
// of reading and never panics.

import (
	"encoding/base64"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

const (
	maxField   = 4096 // bytes of one field, its lines joined
	maxMembers = 32   // members of a List or a Dictionary
	maxInner   = 32   // items of one inner list
	maxParams  = 16   // parameters of one item or inner list
)

// errSyntax is every parse failure: the field is ignored.
var errSyntax = errors.New("tollgate client: malformed structured field")

// kind is the type of a bare item.
type kind uint8

const (
	kindInteger kind = iota + 1
	kindDecimal
	kindString
	kindToken
	kindBytes
	kindBoolean
	kindDate
	kindDisplay
)

// value is a bare item: num holds an Integer, a Date or a Boolean (0, 1),
// dec a Decimal, str a String, a Token, a Display String or the decoded
// bytes of a Byte Sequence.
type value struct {
	kind kind
	num  int64
	dec  float64
	str  string
}

type param struct {
	key string
	val value
}

// member is a List's or a Dictionary's member: an Item (val) or, when
// inner is not nil, an inner list; key is its Dictionary key.
type member struct {
	key    string
	val    value
	inner  []member // an inner list's items (no key, no inner list)
	params []param
}

// isInner reports whether m is an inner list.
func (m *member) isInner() bool { return m.inner != nil }

// param returns the value of m's parameter key, and whether it has one.
func (m *member) param(key string) (value, bool) {
	for _, p := range m.params {
		if p.key == key {
			return p.val, true
		}
	}
	return value{}, false
}

// joinField joins a field's lines as RFC 9651 combines them (with a
// comma); ok is false when the result would pass maxField.
func joinField(lines []string) (string, bool) {
	if len(lines) == 1 {
		return lines[0], len(lines[0]) <= maxField
	}
	n := 0
	for _, l := range lines {
		n += len(l) + 1
		if n > maxField+1 {
			return "", false
		}
	}
	return strings.Join(lines, ","), true
}

// parseList parses s as a List.
func parseList(s string) ([]member, error) {
	p := &sfParser{s: s}
	return p.members(false)
}

// parseDictionary parses s as a Dictionary (a key given twice keeps its
// first place and its last value).
func parseDictionary(s string) ([]member, error) {
	p := &sfParser{s: s}
	return p.members(true)
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) eof() bool { return p.i >= len(p.s) }

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// members parses a whole List (dict false) or Dictionary (RFC 9651 4.2.1
// and 4.2.2).
func (p *sfParser) members(dict bool) ([]member, error) {
	if len(p.s) > maxField {
		return nil, errSyntax
	}
	p.skipSP()
	var out []member
	for !p.eof() {
		var m member
		var err error
		if dict {
			if m.key, err = p.key(); err != nil {
				return nil, err
			}
			if p.peek() == '=' {
				p.i++
				err = p.itemOrInner(&m)
			} else {
				m.val = value{kind: kindBoolean, num: 1}
				m.params, err = p.parameters()
			}
		} else {
			err = p.itemOrInner(&m)
		}
		if err != nil {
			return nil, err
		}
		if dict {
			out = setMember(out, m)
		} else {
			out = append(out, m)
		}
		if len(out) > maxMembers {
			return nil, errSyntax
		}
		p.skipOWS()
		if p.eof() {
			break
		}
		if p.s[p.i] != ',' {
			return nil, errSyntax
		}
		p.i++
		p.skipOWS()
		if p.eof() {
			return nil, errSyntax // a trailing comma
		}
	}
	p.skipSP()
	if !p.eof() {
		return nil, errSyntax
	}
	return out, nil
}

// setMember sets m in a Dictionary's members: a key already there keeps
// its place and takes m's value.
func setMember(ms []member, m member) []member {
	for i := range ms {
		if ms[i].key == m.key {
			ms[i] = m
			return ms
		}
	}
	return append(ms, m)
}

// itemOrInner parses an Item or an inner list, and its parameters, into m.
func (p *sfParser) itemOrInner(m *member) error {
	var err error
	if p.peek() == '(' {
		p.i++
		m.inner = []member{}
		for {
			p.skipSP()
			if p.eof() {
				return errSyntax
			}
			if p.s[p.i] == ')' {
				p.i++
				break
			}
			var it member
			if it.val, err = p.bareItem(); err != nil {
				return err
			}
			if it.params, err = p.parameters(); err != nil {
				return err
			}
			m.inner = append(m.inner, it)
			if len(m.inner) > maxInner {
				return errSyntax
			}
			if c := p.peek(); c != ' ' && c != ')' {
				return errSyntax
			}
		}
	} else if m.val, err = p.bareItem(); err != nil {
		return err
	}
	m.params, err = p.parameters()
	return err
}

// parameters parses ;key[=value] pairs (a key given twice keeps its first
// place and its last value).
func (p *sfParser) parameters() ([]param, error) {
	var ps []param
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		v := value{kind: kindBoolean, num: 1}
		if p.peek() == '=' {
			p.i++
			if v, err = p.bareItem(); err != nil {
				return nil, err
			}
		}
		found := false
		for i := range ps {
			if ps[i].key == k {
				ps[i].val, found = v, true
			}
		}
		if !found {
			if len(ps) == maxParams {
				return nil, errSyntax
			}
			ps = append(ps, param{k, v})
		}
	}
	return ps, nil
}

// key parses a key: lcalpha or "*", then lcalpha, digits, "_-.*".
func (p *sfParser) key() (string, error) {
	start := p.i
	if c := p.peek(); !(c >= 'a' && c <= 'z' || c == '*') {
		return "", errSyntax
	}
	p.i++
	for !p.eof() {
		c := p.s[p.i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.' || c == '*') {
			break
		}
		p.i++
	}
	return p.s[start:p.i], nil
}

// bareItem parses a bare item of any type.
func (p *sfParser) bareItem() (value, error) {
	c := p.peek()
	switch {
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == '"':
		s, err := p.str()
		return value{kind: kindString, str: s}, err
	case c == '*' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		return p.token(), nil
	case c == ':':
		return p.bytes()
	case c == '?':
		return p.boolean()
	case c == '@':
		p.i++
		v, err := p.number()
		if err != nil || v.kind != kindInteger {
			return value{}, errSyntax
		}
		v.kind = kindDate
		return v, nil
	case c == '%':
		return p.display()
	}
	return value{}, errSyntax
}

// number parses an Integer (at most 15 digits) or a Decimal (at most 12
// digits, a dot, 1 to 3 digits).
func (p *sfParser) number() (value, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digits, dot := 0, -1
	for !p.eof() {
		c := p.s[p.i]
		if c == '.' && dot < 0 {
			if digits == 0 || digits > 12 {
				return value{}, errSyntax
			}
			dot = digits
			p.i++
			continue
		}
		if c < '0' || c > '9' {
			break
		}
		digits++
		if dot < 0 && digits > 15 || dot >= 0 && digits-dot > 3 {
			return value{}, errSyntax
		}
		p.i++
	}
	if digits == 0 || dot == digits {
		return value{}, errSyntax
	}
	text := p.s[start:p.i]
	if dot < 0 {
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return value{}, errSyntax
		}
		return value{kind: kindInteger, num: n}, nil
	}
	f, err := strconv.ParseFloat(text, 64)
	if err != nil {
		return value{}, errSyntax
	}
	return value{kind: kindDecimal, dec: f}, nil
}

// str parses a String: printable ASCII, with \" and \\ the only escapes.
func (p *sfParser) str() (string, error) {
	p.i++ // the opening quote
	var b []byte
	start := p.i
	for !p.eof() {
		c := p.s[p.i]
		switch {
		case c == '\\':
			if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' && p.s[p.i+1] != '\\' {
				return "", errSyntax
			}
			b = append(b, p.s[start:p.i]...)
			b = append(b, p.s[p.i+1])
			p.i += 2
			start = p.i
		case c == '"':
			s := p.s[start:p.i]
			p.i++
			if b != nil {
				return string(append(b, s...)), nil
			}
			return s, nil
		case c < 0x20 || c > 0x7e:
			return "", errSyntax
		default:
			p.i++
		}
	}
	return "", errSyntax // no closing quote
}

// token parses a Token (its first character already checked).
func (p *sfParser) token() value {
	start := p.i
	p.i++
	for !p.eof() && (isTchar(p.s[p.i]) || p.s[p.i] == ':' || p.s[p.i] == '/') {
		p.i++
	}
	return value{kind: kindToken, str: p.s[start:p.i]}
}

// isTchar reports whether c is an RFC 9110 tchar.
func isTchar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// bytes parses a Byte Sequence (:base64:), padding optional.
func (p *sfParser) bytes() (value, error) {
	p.i++
	end := strings.IndexByte(p.s[p.i:], ':')
	if end < 0 {
		return value{}, errSyntax
	}
	enc := p.s[p.i : p.i+end]
	p.i += end + 1
	for i := 0; i < len(enc); i++ {
		c := enc[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=') {
			return value{}, errSyntax
		}
	}
	b, err := base64.RawStdEncoding.DecodeString(strings.TrimRight(enc, "="))
	if err != nil {
		return value{}, errSyntax
	}
	return value{kind: kindBytes, str: string(b)}, nil
}

// boolean parses ?0 or ?1.
func (p *sfParser) boolean() (value, error) {
	if p.i+1 >= len(p.s) || p.s[p.i+1] != '0' && p.s[p.i+1] != '1' {
		return value{}, errSyntax
	}
	v := value{kind: kindBoolean, num: int64(p.s[p.i+1] - '0')}
	p.i += 2
	return v, nil
}

// display parses a Display String: %"..." with %xx (lowercase hex) for
// what is not printable ASCII, valid UTF-8 once decoded.
func (p *sfParser) display() (value, error) {
	if p.i+1 >= len(p.s) || p.s[p.i+1] != '"' {
		return value{}, errSyntax
	}
	p.i += 2
	var b []byte
	for !p.eof() {
		c := p.s[p.i]
		switch {
		case c == '%':
			if p.i+2 >= len(p.s) {
				return value{}, errSyntax
			}
			hi, lo := lowerHex(p.s[p.i+1]), lowerHex(p.s[p.i+2])
			if hi < 0 || lo < 0 {
				return value{}, errSyntax
			}
			b = append(b, byte(hi<<4|lo))
			p.i += 3
		case c == '"':
			p.i++
			if !utf8.Valid(b) {
				return value{}, errSyntax
			}
			return value{kind: kindDisplay, str: string(b)}, nil
		case c < 0x20 || c > 0x7e:
			return value{}, errSyntax
		default:
			b = append(b, c)
			p.i++
		}
	}
	return value{}, errSyntax
}

// lowerHex is the value of a lowercase hex digit, or -1.
func lowerHex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'a' && c <= 'f':
		return int(c-'a') + 10
	}
	return -1
}
