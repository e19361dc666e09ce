package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Override is a per-key override of a class's top-level rate, set at
// runtime through a serveAdmin middleware (the root's admin.go) and kept
// in Redis until it expires.
type Override struct {
	Average   int64
	Burst     int64
	Period    time.Duration
	ExpiresMS int64 // Unix ms
}

// MaxOverrideTTL bounds an override's life, and is its default.
const MaxOverrideTTL = 30 * 24 * time.Hour

// maxOverrideBody bounds a PUT body.
const maxOverrideBody = 4096

// fieldErr is a bad override's field and error (an error type of our
// own would not survive Yaegi's errors.As).
func fieldErr(field, msg string) (string, error) { return field, errors.New(field + ": " + msg) }

// ParseOverride reads an override's JSON body, such as
// {"average":1000,"burst":50,"period":"1m","ttl":"24h"}, at nowMS (Unix
// ms). average is required; burst defaults to 1 and period to 1s, as in a
// middleware's config; ttl defaults to, and may not exceed,
// MaxOverrideTTL. Durations are Go durations or bare seconds. Any other
// field is an error naming it, field. The limit itself is checked
// against the class's policy by Policy.WithOverride.
func ParseOverride(body []byte, nowMS int64) (Override, string, error) {
	o := Override{Burst: defaultBurst, Period: time.Second}
	var field string
	var err error
	if len(body) > maxOverrideBody {
		field, err = fieldErr("body", fmt.Sprintf("%d bytes, at most %d", len(body), maxOverrideBody))
		return o, field, err
	}
	var fields map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&fields); err != nil || fields == nil {
		field, err = fieldErr("body", "not a JSON object (e.g. {\"average\":1000,\"burst\":50,\"period\":\"1m\",\"ttl\":\"24h\"})")
		return o, field, err
	}
	if dec.More() {
		field, err = fieldErr("body", "more than one JSON value")
		return o, field, err
	}
	ttl := MaxOverrideTTL
	seen := false
	for k, v := range fields {
		var n int64
		var d time.Duration
		var bad error
		switch k {
		case "average", "burst":
			n, bad = overrideInt(v)
		case "period", "ttl":
			d, bad = overrideDuration(v)
		default:
			field, err = fieldErr(strconv.QuoteToASCII(k), "unknown field (average, burst, period, ttl)")
			return o, field, err
		}
		if bad != nil {
			field, err = fieldErr(k, bad.Error())
			return o, field, err
		}
		switch k {
		case "average":
			o.Average = n
			seen = true
		case "burst":
			o.Burst = n
		case "period":
			o.Period = d
		default:
			ttl = d
		}
	}
	if ttl > MaxOverrideTTL {
		field, err = fieldErr("ttl", fmt.Sprintf("%s is longer than 30 days", ttl))
		return o, field, err
	}
	switch {
	case !seen || o.Average <= 0:
		field, err = fieldErr("average", "required, greater than zero")
		return o, field, err
	case o.Burst <= 0:
		field, err = fieldErr("burst", "must be greater than zero")
		return o, field, err
	case o.Period <= 0:
		field, err = fieldErr("period", "must be greater than zero")
		return o, field, err
	case ttl <= 0:
		field, err = fieldErr("ttl", "must be greater than zero")
		return o, field, err
	}
	o.ExpiresMS = nowMS + ttl.Milliseconds()
	return o, "", nil
}

// overrideInt reads a JSON integer (a number, or a string of one, as
// Docker labels would write it).
func overrideInt(v json.RawMessage) (int64, error) {
	s := strings.Trim(strings.TrimSpace(string(v)), `"`)
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%.40q is not a whole number", s)
	}
	return n, nil
}

// overrideDuration reads a JSON string holding a duration, or a number
// of seconds.
func overrideDuration(v json.RawMessage) (time.Duration, error) {
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		s = string(v)
	}
	d, err := ParseDuration("", s)
	if err != nil {
		return 0, errors.New(strings.TrimPrefix(err.Error(), ": "))
	}
	return d, nil
}

// EncodeOverride is o as kept in Redis: "average burst periodNS expiresMS".
func EncodeOverride(o Override) string {
	return strconv.FormatInt(o.Average, 10) + " " + strconv.FormatInt(o.Burst, 10) + " " +
		strconv.FormatInt(int64(o.Period), 10) + " " + strconv.FormatInt(o.ExpiresMS, 10)
}

// DecodeOverride reads an override kept in Redis (EncodeOverride); a value
// that is not one (Redis's replies are not trusted) is an error.
func DecodeOverride(s string) (Override, error) {
	var o Override
	f := strings.Split(s, " ")
	if len(s) > 100 || len(f) != 4 {
		return o, fmt.Errorf("override %.40q: not 4 numbers", s)
	}
	var n [4]int64
	for i, x := range f {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil || v <= 0 {
			return o, fmt.Errorf("override %.40q: not 4 positive numbers", s)
		}
		n[i] = v
	}
	return Override{Average: n[0], Burst: n[1], Period: time.Duration(n[2]), ExpiresMS: n[3]}, nil
}

// WithOverride returns p (a rate) with o's average, burst and period in
// place of its own: its name, key, failure mode, shadow, response cost and
// counters are p's; it leases nothing. An override whose limit could not
// be a middleware's is an error naming the field.
func (p *Policy) WithOverride(o Override) (*Policy, string, error) {
	q, err := CompileLimit("", o.Average, o.Period.String(), o.Burst, int64(p.Lim.Cost))
	if err != nil {
		field := "average"
		if i := strings.IndexByte(err.Error(), ':'); i > 0 {
			field = err.Error()[:i]
		}
		return nil, field, err
	}
	q.Name, q.KeySuffix, q.FailClosed, q.Shadow = p.Name, p.KeySuffix, p.FailClosed, p.Shadow
	q.RespCost, q.Metrics, q.RegionPPM = p.RespCost, p.Metrics, p.RegionPPM
	q.PathPrefix, q.Methods, q.Source = p.PathPrefix, p.Methods, p.Source
	return q, "", nil
}
