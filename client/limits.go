package client

// Reading what a response says of the server's buckets, in each form
// Tollgate can send (its headers option; the root package's headers.go
// writes them):
//
//	ietf     RateLimit-Policy: "api";q=100;w=60, "login";q=5;w=60
//	         RateLimit: "api";r=17;t=0, "login";r=4;t=0
//	draft07  RateLimit-Policy: 5;w=60;burst=5
//	         RateLimit: limit=5, remaining=4, reset=12
//	legacy   X-RateLimit-Limit: 5, X-RateLimit-Remaining: 4, X-RateLimit-Reset: 12
//	both     ietf and legacy together (the ietf form is read)
//
// and, on a refusal, Retry-After (seconds or an HTTP date).

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

const (
	maxName  = 256                       // bytes of a policy's name and partition key; longer ones are skipped
	maxSpan  = 10 * 365 * 24 * time.Hour // every time read is cut here: a wait that long is no wait a caller makes
	maxCount = 1 << 40                   // tokens: r, q, burst are cut here
	epoch    = 1000000000                // an X-RateLimit-Reset at least this large is a Unix time (2001 on)
	maxRA    = 64                        // bytes of a Retry-After value
	partSep  = "\x00"                    // joins the parts of a policy's key
	formIETF = "ietf"                    // a key's first part: the form it was read in
)

// A limit is what one response says of one policy's bucket.
type limit struct {
	name      string        // the policy: its form, name and partition key (or, unnamed, its figures)
	remaining int64         // r: whole tokens left (after this request; before it when refused)
	reset     time.Duration // t: until the tokens left are renewed (a whole number of seconds, rounded up)
	interval  time.Duration // the time one token takes to come back (w/q); 0: not said
	burst     int64         // the tokens the bucket holds when full, when said (draft07); 0: not said
	toFull    bool          // reset is the time until the bucket is full (draft07 with a burst: a token bucket)
}

// readLimits appends to dst the limits h states: the IETF RateLimit list
// when there is one, else the draft 07 dictionary, else the X-RateLimit-*
// trio. now is the wall clock, for an X-RateLimit-Reset given as a Unix
// time. A field that does not parse is ignored, and so is an item that
// lacks r or has a negative or non-integer figure.
func readLimits(h http.Header, now time.Time, dst []limit) []limit {
	if lines := h.Values("RateLimit"); len(lines) > 0 {
		if s, ok := joinField(lines); ok {
			if items, err := parseList(s); err == nil && anyNamed(items) {
				return ietfLimits(items, h.Values("RateLimit-Policy"), dst)
			}
			if dict, err := parseDictionary(s); err == nil {
				if l, ok := draft07Limit(dict, h.Values("RateLimit-Policy")); ok {
					return append(dst, l)
				}
			}
		}
	}
	if l, ok := legacyLimit(h, now); ok {
		return append(dst, l)
	}
	return dst
}

// anyNamed reports whether a List names a policy: the IETF form.
func anyNamed(items []member) bool {
	for i := range items {
		if named(&items[i]) {
			return true
		}
	}
	return false
}

// named reports whether m is an item naming a policy (a String; a Token
// is taken too).
func named(m *member) bool {
	return !m.isInner() && (m.val.kind == kindString || m.val.kind == kindToken)
}

// ietfLimits reads the IETF form: each RateLimit item, with the
// RateLimit-Policy item of its name (and partition key) for q, w and qu.
// A policy whose quota unit is not requests (Tollgate's concurrency caps
// say qu="concurrent-requests") is not a rate of requests: skipped.
func ietfLimits(items []member, policyLines []string, dst []limit) []limit {
	var policies []member
	if s, ok := joinField(policyLines); ok && len(policyLines) > 0 {
		policies, _ = parseList(s) // a malformed policy field: the limits are read without it
	}
	for i := range items {
		it := &items[i]
		if !named(it) {
			continue
		}
		r, okR := count(it, "r")
		t, okT := count(it, "t")
		if !okR || !okT && hasParam(it, "t") {
			continue
		}
		pk, okPK := partitionKey(it)
		if !okPK || len(it.val.str)+len(pk) > maxName {
			continue
		}
		l := limit{name: formIETF + partSep + it.val.str + partSep + pk, remaining: r, reset: seconds(t)}
		if p := policyOf(policies, it.val.str, pk); p != nil {
			if qu, ok := p.param("qu"); ok && (qu.kind != kindString && qu.kind != kindToken || qu.str != "requests") {
				continue
			}
			q, okQ := count(p, "q")
			w, okW := count(p, "w")
			if okQ && okW && q > 0 && w > 0 {
				l.interval = ratio(w, q)
			}
		}
		if l.interval == 0 {
			l.interval = spread(l.remaining, l.reset)
		}
		dst = append(dst, l)
	}
	return dst
}

// policyOf returns the policy item named name with partition key pk (or
// none), or nil.
func policyOf(policies []member, name, pk string) *member {
	for i := range policies {
		p := &policies[i]
		if !named(p) || p.val.str != name {
			continue
		}
		if ppk, ok := partitionKey(p); ok && (ppk == "" || ppk == pk) {
			return p
		}
	}
	return nil
}

// partitionKey returns m's pk parameter (a Byte Sequence; "" when there
// is none); ok is false when pk is there but not a Byte Sequence.
func partitionKey(m *member) (string, bool) {
	v, ok := m.param("pk")
	if !ok {
		return "", true
	}
	return v.str, v.kind == kindBytes
}

// count returns m's parameter key when it is a non-negative Integer (cut
// at maxCount).
func count(m *member, key string) (int64, bool) {
	v, ok := m.param(key)
	if !ok || v.kind != kindInteger || v.num < 0 {
		return 0, false
	}
	if v.num > maxCount {
		return maxCount, true
	}
	return v.num, true
}

func hasParam(m *member, key string) bool {
	_, ok := m.param(key)
	return ok
}

// draft07Limit reads the draft 07 form: RateLimit a Dictionary (limit,
// remaining, reset), RateLimit-Policy a List of limits with w and burst
// parameters; the policy read is the one whose limit is RateLimit's (else
// the first). Tollgate's reset there is the time until the bucket is full.
func draft07Limit(dict []member, policyLines []string) (limit, bool) {
	get := func(key string) (int64, bool, bool) { // value, ok, present
		for i := range dict {
			if m := &dict[i]; m.key == key {
				if m.isInner() || m.val.kind != kindInteger || m.val.num < 0 {
					return 0, false, true
				}
				if m.val.num > maxCount {
					return maxCount, true, true
				}
				return m.val.num, true, true
			}
		}
		return 0, false, false
	}
	lim, okL, _ := get("limit")
	r, okR, _ := get("remaining")
	t, okT, hasT := get("reset")
	if !okL || !okR || !okT && hasT {
		return limit{}, false
	}
	l := limit{remaining: r, reset: seconds(t)}
	var w, burst int64
	if s, ok := joinField(policyLines); ok && len(policyLines) > 0 {
		if policies, err := parseList(s); err == nil {
			var p *member
			for i := range policies {
				if q := &policies[i]; !q.isInner() && q.val.kind == kindInteger && (p == nil || q.val.num == lim && p.val.num != lim) {
					p = q
				}
			}
			if p != nil {
				w, _ = count(p, "w")
				burst, _ = count(p, "burst")
			}
		}
	}
	l.name = "draft07" + partSep + strconv.FormatInt(lim, 10) + partSep + strconv.FormatInt(w, 10)
	if w > 0 && lim > 0 {
		l.interval = ratio(w, lim)
	}
	if burst > 0 {
		l.burst, l.toFull = burst, true
	}
	if l.interval == 0 {
		l.interval = spread(l.remaining, l.reset)
	}
	return l, true
}

// legacyLimit reads X-RateLimit-Limit, -Remaining and -Reset (seconds
// from now, or a Unix time when at least epoch). Without a window, the
// tokens left are all the transport counts on until the reset.
func legacyLimit(h http.Header, now time.Time) (limit, bool) {
	r, ok := plainCount(h.Get("X-RateLimit-Remaining"))
	if !ok {
		return limit{}, false
	}
	lim, okL := plainCount(h.Get("X-RateLimit-Limit"))
	t, okT := plainCount(h.Get("X-RateLimit-Reset"))
	if !okT && h.Get("X-RateLimit-Reset") != "" {
		return limit{}, false
	}
	if t >= epoch {
		if t -= now.Unix(); t < 0 {
			t = 0
		}
	}
	name := "legacy" + partSep
	if okL {
		name += strconv.FormatInt(lim, 10)
	}
	l := limit{name: name, remaining: r, reset: seconds(t)}
	l.interval = spread(l.remaining, l.reset)
	return l, true
}

// plainCount parses a header's non-negative decimal integer (at most 15
// digits, spaces around it allowed), cut at maxCount.
func plainCount(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 15 {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, false
	}
	if n > maxCount {
		n = maxCount
	}
	return n, true
}

// retryAfter reads Retry-After: delay-seconds or an HTTP date, the date
// taken from the response's Date when it has one (the server's clock on
// both sides), else from now. ok is false when there is none or it does
// not parse; a date in the past is a wait of 0.
func retryAfter(h http.Header, now time.Time) (time.Duration, bool) {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" || len(v) > maxRA {
		return 0, false
	}
	if n, ok := plainCount(v); ok {
		return seconds(n), true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	if d := h.Get("Date"); d != "" && len(d) <= maxRA {
		if sent, err := http.ParseTime(d); err == nil {
			now = sent
		}
	}
	wait := at.Sub(now)
	if wait < 0 {
		wait = 0
	}
	if wait > maxSpan {
		wait = maxSpan
	}
	return wait, true
}

// seconds converts whole seconds to a Duration, cut at maxSpan.
func seconds(n int64) time.Duration {
	if n > int64(maxSpan/time.Second) {
		return maxSpan
	}
	return time.Duration(n) * time.Second
}

// ratio is w seconds over q tokens, the time per token, cut at maxSpan;
// 0 when less than a nanosecond (no pacing at that rate).
func ratio(w, q int64) time.Duration {
	f := float64(w) / float64(q) * float64(time.Second)
	if f >= float64(maxSpan) {
		return maxSpan
	}
	return time.Duration(f)
}

// spread is the interval of a policy whose rate is not said: the r
// tokens left spread evenly until the reset (the whole reset when none is
// left); 0 (unpaced) when there is no reset.
func spread(r int64, reset time.Duration) time.Duration {
	if reset <= 0 {
		return 0
	}
	if r < 1 {
		return reset
	}
	return reset / time.Duration(r)
}
