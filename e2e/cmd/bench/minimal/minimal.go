// Package minimal is the smallest rate limiter that makes one Redis round
// trip per request, a reference for the bench: Traefik loads it as a second
// local plugin, interpreted by Yaegi as Tollgate is, so that what Tollgate
// costs above it is what its features cost (the fallback, breaker, deny
// cache, rules, decision fields, metrics). Its request path is costprobe's
// minimal: a SHA-256 key, a mutex-guarded stack of connections, one
// prepared EVALSHA, a one-line status check, two headers by map assignment,
// next.
//
// It enforces: a token bucket per X-API-Key value in Redis (Redis TIME
// clock), Average tokens per Period, at most Burst. A refusal costs a round
// trip like an admission (as Traefik's redis limiter). A Redis error
// refuses (429) and drops the connection; there is no fallback.
//
// With Empty it is instead the empty middleware, the floor of any
// interpreted plugin: it calls next, or with Refuse answers 429, and does
// nothing else (no key, no Redis, no headers).
package minimal

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Config is the limit and the Redis to keep it in.
type Config struct {
	// Average is the number of tokens refilled per Period; must be > 0.
	Average int64 `json:"average,omitempty"`
	// Period is the refill period of Average. Default "1s".
	Period string `json:"period,omitempty"`
	// Burst is the bucket capacity, in tokens; must be > 0.
	Burst int64 `json:"burst,omitempty"`
	// Redis is the host:port of a Redis server. Default 127.0.0.1:6379.
	Redis string `json:"redis,omitempty"`
	// Empty makes New return the empty middleware; the fields above are
	// then unused.
	Empty bool `json:"empty,omitempty"`
	// Refuse makes the empty middleware answer 429 instead of calling next.
	Refuse bool `json:"refuse,omitempty"`
}

// CreateConfig returns the defaults.
func CreateConfig() *Config {
	return &Config{Average: 100, Period: "1s", Burst: 100, Redis: "127.0.0.1:6379"}
}

// script takes one token from the bucket KEYS[1] and replies 1 (admitted)
// or 0 (refused). ARGV: refill rate in tokens per millisecond, burst,
// the key's time to live in milliseconds. The bucket is a string, "v t":
// its tokens and the Redis TIME (ms) of its last take.
const script = `local rate, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local now = redis.call('TIME')
now = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local v, last = burst, now
local s = redis.call('GET', KEYS[1])
if s then
  local a, b = string.match(s, '^(%S+) (%S+)$')
  v, last = tonumber(a) or burst, tonumber(b) or now
end
if now < last then last = now end
v = math.min(burst, v + (now - last) * rate)
if v < 1 then return 0 end
redis.call('SET', KEYS[1], tostring(v - 1) .. ' ' .. tostring(now), 'PX', ARGV[3])
return 1
`

// keyPrefix starts every key, as Tollgate's: keys are "tg{" + 10 characters
// + "}", 14 bytes.
const keyPrefix = "tg{"

// Minimal is the middleware. Its connections are a stack guarded by mu,
// dialed when it is empty (no bound: as many as requests in flight); a
// connection that errs is closed, not returned.
type Minimal struct {
	mu         sync.Mutex
	conns      []*conn
	addr       string
	head, tail []byte   // the EVALSHA command around the key
	load       []byte   // SCRIPT LOAD
	policy     []string // both headers' value (their cost, not their content)
	next       http.Handler
}

type conn struct {
	nc  net.Conn
	br  *bufio.Reader
	buf []byte
}

// passThrough is the empty middleware that admits: it calls next.
type passThrough struct{ next http.Handler }

func (p *passThrough) ServeHTTP(rw http.ResponseWriter, req *http.Request) { p.next.ServeHTTP(rw, req) }

// refuseAll is the empty middleware that refuses: 429, no body.
type refuseAll struct{}

func (r *refuseAll) ServeHTTP(rw http.ResponseWriter, _ *http.Request) {
	rw.WriteHeader(http.StatusTooManyRequests)
}

// New compiles the command; it does not dial. With cfg.Empty it returns
// the empty middleware.
func New(_ context.Context, next http.Handler, cfg *Config, _ string) (http.Handler, error) {
	if cfg.Empty && cfg.Refuse {
		return &refuseAll{}, nil
	}
	if cfg.Empty {
		return &passThrough{next: next}, nil
	}
	period, err := time.ParseDuration(cfg.Period)
	if err != nil || period <= 0 {
		return nil, fmt.Errorf("minimal: period %q: must be a positive duration", cfg.Period)
	}
	if cfg.Average <= 0 || cfg.Burst <= 0 {
		return nil, fmt.Errorf("minimal: average %d, burst %d: must be positive", cfg.Average, cfg.Burst)
	}
	rate := float64(cfg.Average) / (float64(period) / float64(time.Millisecond))
	ttl := int64(float64(cfg.Burst)/rate) + 1000
	sum := sha1.Sum([]byte(script))
	head := "*7\r\n$7\r\nEVALSHA\r\n$40\r\n" + hex.EncodeToString(sum[:]) + "\r\n$1\r\n1\r\n$" +
		strconv.Itoa(len(keyPrefix)+11) + "\r\n"
	tail := "\r\n" + bulk(strconv.FormatFloat(rate, 'g', -1, 64)) + bulk(strconv.FormatInt(cfg.Burst, 10)) +
		bulk(strconv.FormatInt(ttl, 10))
	return &Minimal{
		addr:   cfg.Redis,
		head:   []byte(head),
		tail:   []byte(tail),
		load:   []byte("*3\r\n$6\r\nSCRIPT\r\n$4\r\nLOAD\r\n" + bulk(script)),
		policy: []string{fmt.Sprintf("\"default\";q=%d;w=%d", cfg.Average, int64(period/time.Second))},
		next:   next,
	}, nil
}

// bulk is s as a RESP bulk string.
func bulk(s string) string { return "$" + strconv.Itoa(len(s)) + "\r\n" + s + "\r\n" }

var errReply = errors.New("minimal: unexpected reply")

var noScript = []byte("-NOSCRIPT")

func (m *Minimal) ServeHTTP(rw http.ResponseWriter, req *http.Request) {
	id := ""
	if v := req.Header["X-Api-Key"]; len(v) > 0 {
		id = v[0]
	}
	sum := sha256.Sum256([]byte(id))
	key := keyPrefix + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}"
	var c *conn
	m.mu.Lock()
	if n := len(m.conns); n > 0 {
		c = m.conns[n-1]
		m.conns = m.conns[:n-1]
	}
	m.mu.Unlock()
	var err error
	if c == nil {
		c, err = m.dial()
	}
	var line []byte
	if err == nil {
		c.buf = append(append(append(c.buf[:0], m.head...), key...), m.tail...)
		_ = c.nc.SetDeadline(time.Now().Add(time.Second))
		if _, err = c.nc.Write(c.buf); err == nil {
			line, err = c.br.ReadSlice('\n')
		}
		if err == nil && bytes.HasPrefix(line, noScript) {
			line, err = m.reload(c)
		}
		if err != nil {
			_ = c.nc.Close()
		} else {
			m.mu.Lock()
			m.conns = append(m.conns, c)
			m.mu.Unlock()
		}
	}
	if err != nil || len(line) < 2 || line[1] != '1' {
		rw.WriteHeader(http.StatusTooManyRequests)
		return
	}
	h := rw.Header()
	h["Ratelimit-Policy"] = m.policy
	h["Ratelimit"] = m.policy
	m.next.ServeHTTP(rw, req)
}

// dial opens a connection, named "minimal" (CLIENT SETNAME) so that the
// bench tells its connections from the others.
func (m *Minimal) dial() (*conn, error) {
	nc, err := net.DialTimeout("tcp", m.addr, time.Second)
	if err != nil {
		return nil, err
	}
	c := &conn{nc: nc, br: bufio.NewReader(nc)}
	_ = nc.SetDeadline(time.Now().Add(time.Second))
	if _, err = nc.Write([]byte("*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$7\r\nminimal\r\n")); err == nil {
		var line []byte
		if line, err = c.br.ReadSlice('\n'); err == nil && line[0] != '+' {
			err = errReply
		}
	}
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	return c, nil
}

// reload loads the script (its first use, or after SCRIPT FLUSH), sends
// c.buf again and returns the reply's first line.
func (m *Minimal) reload(c *conn) ([]byte, error) {
	if _, err := c.nc.Write(m.load); err != nil {
		return nil, err
	}
	for i := 0; i < 2; i++ { // $40, then the SHA-1
		line, err := c.br.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		if i == 0 && line[0] != '$' {
			return nil, errReply
		}
	}
	if _, err := c.nc.Write(c.buf); err != nil {
		return nil, err
	}
	return c.br.ReadSlice('\n')
}
