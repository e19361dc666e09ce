package main

import (
	"errors"
	"flag"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Environment variables the global flags default to.
const (
	envURL      = "TOLLGATE_ADMIN_URL"
	envUser     = "TOLLGATE_ADMIN_USER"
	envPassword = "TOLLGATE_ADMIN_PASSWORD"
)

// globals are the flags every command takes, before or after its name.
// Registered in two flag sets (the tool's and the command's), each flag
// keeps the value of the last one that set it.
type globals struct {
	url      string        // the admin endpoint's URL; -url, else $TOLLGATE_ADMIN_URL
	user     string        // basic auth's user; -user, else $TOLLGATE_ADMIN_USER; empty: no basic auth
	password string        // basic auth's password; -password, else $TOLLGATE_ADMIN_PASSWORD
	headers  headerFlags   // -H, in order
	output   string        // "table" or "json"
	timeout  time.Duration // the whole exchange, reading the reply included
}

// register adds the global flags to fs, each defaulting to its value in
// g: its zero value in the tool's flag set, what that set parsed in the
// command's.
func (g *globals) register(fs *flag.FlagSet) {
	if g.output == "" {
		g.output = "table"
	}
	if g.timeout == 0 {
		g.timeout = 10 * time.Second
	}
	// The defaults the environment gives are applied after parsing
	// (fromEnv), so that help never prints the password.
	fs.StringVar(&g.url, "url", g.url, "the admin endpoint's `URL` (default $"+envURL+"; required)")
	fs.StringVar(&g.user, "user", g.user, "the basic auth `user` (default $"+envUser+")")
	fs.StringVar(&g.password, "password", g.password, "the basic auth `password` (default $"+envPassword+", which keeps it out of ps)")
	fs.Var(&g.headers, "H", "an extra request `header`, 'Name: value' (repeatable)")
	fs.StringVar(&g.output, "o", g.output, "the output `format`: table or json")
	fs.DurationVar(&g.timeout, "timeout", g.timeout, "how long the whole exchange may take")
}

// fromEnv gives the flags not set (set holds the names of those set)
// their value from the environment.
func (g *globals) fromEnv(set map[string]bool, getenv func(string) string) {
	if !set["url"] {
		g.url = getenv(envURL)
	}
	if !set["user"] {
		g.user = getenv(envUser)
	}
	if !set["password"] {
		g.password = getenv(envPassword)
	}
}

// check reports the usage errors of the global flags but for -url's,
// which endpoint reports.
func (g *globals) check() error {
	if g.output != "table" && g.output != "json" {
		return fmt.Errorf("-o %s: want table or json", quote(g.output, 20))
	}
	if g.timeout <= 0 {
		return errors.New("-timeout must be above 0")
	}
	if g.password != "" && g.user == "" {
		return errors.New("a password without a user (-user or $" + envUser + ")")
	}
	return nil
}

// headerFlags is the -H flag: each value a raw 'Name: value', checked by
// parseHeaders.
type headerFlags []string

func (h *headerFlags) String() string { return "" }

func (h *headerFlags) Set(v string) error {
	*h = append(*h, v)
	return nil
}

// parseHeaders returns the -H headers (canonical names, values in order)
// and the Host header's value, which Go sends from the request's Host. A
// bad header is named by its position and name, never its value (it may
// be a credential).
func parseHeaders(raw []string) (h http.Header, host string, err error) {
	h = http.Header{}
	for i, s := range raw {
		colon := strings.IndexByte(s, ':')
		if colon < 0 {
			return nil, "", fmt.Errorf("-H number %d: want 'Name: value'", i+1)
		}
		name := strings.TrimSpace(s[:colon])
		value := strings.Trim(s[colon+1:], " \t")
		if !isToken(name) {
			return nil, "", fmt.Errorf("-H number %d: %s is not a header name", i+1, quote(name, 40))
		}
		for j := 0; j < len(value); j++ {
			if c := value[j]; c < ' ' && c != '\t' || c == 0x7f {
				return nil, "", fmt.Errorf("-H %s: the value holds a control character", name)
			}
		}
		name = http.CanonicalHeaderKey(name)
		if name == "Host" {
			host = value
			continue
		}
		h[name] = append(h[name], value)
	}
	return h, host, nil
}

// isToken reports whether s is an RFC 9110 token, what a header name is.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
