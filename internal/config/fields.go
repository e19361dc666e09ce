package config

// One config field parsed and checked: durations (Traefik's form or
// bare seconds), counts, names, header names, failure modes.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// ValidHeaderName reports whether s is an HTTP field name (RFC 9110 token).
func ValidHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return s != ""
}

// ParseDuration accepts a Go duration or bare (possibly fractional) seconds,
// as Traefik's duration fields do.
func ParseDuration(field, s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		switch {
		case f != f: // NaN (ParseFloat reads "NaN" and "Inf" too)
			return 0, fmt.Errorf("%s: %q is not a number of seconds", field, s)
		case f < 0:
			return 0, fmt.Errorf("%s: %q is negative", field, s)
		case f > 1e9: // Inf included
			return 0, fmt.Errorf("%s: %q is out of range (at most 1e9 seconds)", field, s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration (e.g. 1m, 250ms, or bare seconds)", field, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: %q is negative", field, s)
	}
	return d, nil
}

// positiveDuration is ParseDuration that also refuses zero.
func positiveDuration(field, s string) (time.Duration, error) {
	d, err := ParseDuration(field, s)
	if err == nil && d <= 0 {
		err = fmt.Errorf("%s: %q must be greater than zero", field, s)
	}
	return d, err
}

func nonNegative(field string, v int64) error {
	if v < 0 {
		return fmt.Errorf("%s: %d is negative", field, v)
	}
	return nil
}

func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// failureMode parses "open"/"closed"; "" takes def.
func failureMode(field, s string, def bool) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return def, nil
	case "open":
		return false, nil
	case "closed":
		return true, nil
	}
	return false, fmt.Errorf("%s: %q is not open or closed", field, s)
}

// shadowMode parses a rule's shadow ("true"/"false", as strconv reads
// them); "" takes def.
func shadowMode(field, s string, def bool) (bool, error) {
	if s = strings.TrimSpace(s); s == "" {
		return def, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s: %q is not true or false", field, s)
	}
	return v, nil
}

// CheckName refuses characters that cannot appear in a header's quoted
// string or that would make keys ambiguous.
func CheckName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: a name is required", field)
	}
	if len(s) > 64 {
		return fmt.Errorf("%s: %q is longer than 64 characters", field, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '{' || c == '}' {
			return fmt.Errorf("%s: %q may hold only printable ASCII without spaces, quotes, backslashes or braces", field, s)
		}
	}
	return nil
}

// SanitizeName turns a middleware name into a valid class name.
func SanitizeName(s string) string {
	b := []byte(s)
	for i := range b {
		c := b[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '{' || c == '}' {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "default"
	}
	return string(b)
}

// printable reports whether s holds printable ASCII without spaces: an
// address goes into logs, where a line break would forge a line.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// reservedHeaders are the response headers decisionHeader may not name
// (canonical): what frames or routes the message, sets cookies, governs
// caches or authentication, and the headers Tollgate itself sends.
var reservedHeaders = map[string]bool{
	"Content-Length": true, "Content-Type": true, "Content-Encoding": true, "Content-Range": true,
	"Content-Location": true, "Content-Disposition": true, "Content-Security-Policy": true,
	"Transfer-Encoding": true, "Connection": true, "Keep-Alive": true, "Upgrade": true, "Trailer": true, "Te": true,
	"Proxy-Connection": true, "Location": true, "Host": true, "Date": true, "Server": true, "Alt-Svc": true,
	"Set-Cookie": true, "Set-Cookie2": true, "Cookie": true,
	"Cache-Control": true, "Expires": true, "Age": true, "Vary": true, "Etag": true, "Last-Modified": true, "Pragma": true,
	"Www-Authenticate": true, "Authorization": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Strict-Transport-Security": true, "Accept-Ranges": true, "Allow": true,
	"Retry-After": true, "Ratelimit": true, "Ratelimit-Policy": true,
}

// reservedHeader reports whether the canonical header name h has a meaning
// in HTTP or is one Tollgate sends (reservedHeaders, X-Ratelimit-*,
// Access-Control-*).
func reservedHeader(h string) bool {
	return reservedHeaders[h] || strings.HasPrefix(h, "X-Ratelimit-") || strings.HasPrefix(h, "Access-Control-")
}
