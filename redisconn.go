package tollgate

// Talking to Redis. redigo dials (TCP, TLS, AUTH/ACL, CLIENT SETNAME,
// SELECT); the per-request exchange then owns the socket: one prepared
// EVALSHA written with a single Write, one small integer array read through
// bufio. Under Yaegi this is about a third of the cost of redigo's
// Pool + Script.Do (see BENCHMARKS in the README).
//
// No goroutines and no select: every exchange runs under one absolute
// deadline set on the connection, and the pool is a mutex-guarded stack.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Errors a caller may branch on.
var (
	errPoolExhausted = errors.New("tollgate: redis connection pool exhausted")
	errBreakerOpen   = errors.New("tollgate: redis circuit breaker open")
	errBadReply      = errors.New("tollgate: unexpected reply from redis")
)

// bucketSHA is the SHA1 that EVALSHA names bucketScript by.
var bucketSHA = func() string {
	sum := sha1.Sum([]byte(bucketScript))
	return hex.EncodeToString(sum[:])
}()

// idleTimeout closes pooled connections unused for this long.
const idleTimeout = time.Minute

// redisClient is a pool of connections to one Redis endpoint.
//
// The zero value is not usable; use newRedisClient. Safe for concurrent use.
// At most set.poolSize connections are open at once; a check that finds them
// all busy waits for one within its own timeout, then fails with
// errPoolExhausted. Idle connections are reused last-in first-out
// and closed after idleTimeout.
type redisClient struct {
	set     redisSettings
	tlsConf *tls.Config      // nil without TLS
	now     func() time.Time // time.Now; injected in tests

	mu   sync.Mutex // guards idle and open
	idle []*rconn
	open int
}

// rconn is one connection and its buffers; owned by one check at a time.
type rconn struct {
	nc   net.Conn
	br   *bufio.Reader
	buf  []byte
	used time.Time
}

func newRedisClient(set redisSettings) (*redisClient, error) {
	c := &redisClient{set: set, now: time.Now}
	if set.useTLS {
		conf, err := tlsConfig(set)
		if err != nil {
			return nil, err
		}
		c.tlsConf = conf
	}
	return c, nil
}

func tlsConfig(set redisSettings) (*tls.Config, error) {
	conf := &tls.Config{InsecureSkipVerify: set.tls.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if host, _, err := net.SplitHostPort(set.addr); err == nil {
		conf.ServerName = host
	}
	if set.tls.CA != "" {
		pem, err := os.ReadFile(set.tls.CA)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.ca: reading %q: %w", set.tls.CA, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis.tls.ca: %q holds no PEM certificate", set.tls.CA)
		}
		conf.RootCAs = pool
	}
	if set.tls.Cert != "" {
		cert, err := tls.LoadX509KeyPair(set.tls.Cert, set.tls.Key)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.cert/key: loading %q and %q: %w", set.tls.Cert, set.tls.Key, err)
		}
		conf.Certificates = []tls.Certificate{cert}
	}
	return conf, nil
}

// poolPoll is how often a check waiting for a busy pool looks again.
const poolPoll = 100 * time.Microsecond

// get returns an idle connection or dials one; fresh reports a new dial.
// When poolSize connections are busy it waits for one, polling (no channel,
// no select: see STYLE.md), until deadline, then fails with
// errPoolExhausted.
func (c *redisClient) get(now, deadline time.Time) (cn *rconn, fresh bool, err error) {
	for {
		cn, fresh, err = c.tryGet(now, deadline)
		if err != errPoolExhausted {
			return cn, fresh, err
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			return nil, false, err
		}
		if wait > poolPoll {
			wait = poolPoll
		}
		time.Sleep(wait)
	}
}

// tryGet is get without waiting.
func (c *redisClient) tryGet(now, deadline time.Time) (cn *rconn, fresh bool, err error) {
	c.mu.Lock()
	for len(c.idle) > 0 {
		cn = c.idle[len(c.idle)-1]
		c.idle[len(c.idle)-1] = nil
		c.idle = c.idle[:len(c.idle)-1]
		if now.Sub(cn.used) < idleTimeout {
			c.mu.Unlock()
			return cn, false, nil
		}
		c.open--
		_ = cn.nc.Close()
		cn = nil
	}
	if c.open >= c.set.poolSize {
		c.mu.Unlock()
		return nil, false, errPoolExhausted
	}
	c.open++
	c.mu.Unlock()
	cn, err = c.dial(deadline)
	if err != nil {
		c.mu.Lock()
		c.open--
		c.mu.Unlock()
		return nil, false, err
	}
	return cn, true, nil
}

// put returns a healthy connection to the pool.
func (c *redisClient) put(cn *rconn, now time.Time) {
	cn.used = now
	c.mu.Lock()
	c.idle = append(c.idle, cn)
	c.mu.Unlock()
}

// discard closes a connection that failed.
func (c *redisClient) discard(cn *rconn) {
	_ = cn.nc.Close()
	c.mu.Lock()
	c.open--
	c.mu.Unlock()
}

// closeIdle closes every idle connection: after a reused connection turns
// out dead (Redis restarted), its siblings are dead too.
func (c *redisClient) closeIdle() {
	c.mu.Lock()
	idle := c.idle
	c.idle = nil
	c.open -= len(idle)
	c.mu.Unlock()
	for _, cn := range idle {
		_ = cn.nc.Close()
	}
}

// dial connects, authenticates and selects the database, all before
// deadline, through redigo; then keeps the raw connection for checks.
func (c *redisClient) dial(deadline time.Time) (*rconn, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var raw net.Conn
	tlsConf := c.tlsConf
	opts := []redis.DialOption{
		redis.DialContextFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			_ = nc.SetDeadline(deadline)
			if tlsConf != nil {
				tc := tls.Client(nc, tlsConf)
				if err := tc.HandshakeContext(ctx); err != nil {
					_ = nc.Close()
					return nil, err
				}
				nc = tc
			}
			raw = nc
			return nc, nil
		}),
		redis.DialReadTimeout(time.Until(deadline)),
		redis.DialWriteTimeout(time.Until(deadline)),
		redis.DialClientName("tollgate"),
	}
	if c.set.password != "" {
		opts = append(opts, redis.DialPassword(c.set.password))
		if c.set.username != "" {
			opts = append(opts, redis.DialUsername(c.set.username))
		}
	}
	if c.set.db != 0 {
		opts = append(opts, redis.DialDatabase(int(c.set.db)))
	}
	if _, err := redis.DialContext(ctx, "tcp", c.set.addr, opts...); err != nil {
		return nil, fmt.Errorf("dialing redis %s: %w", c.set.addr, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("dialing redis %s: no connection", c.set.addr)
	}
	return &rconn{nc: raw, br: bufio.NewReaderSize(raw, 512), buf: make([]byte, 0, 256)}, nil
}

// command is the prepared EVALSHA (and EVAL) of one set of policies: only the
// client's key changes between requests.
type command struct {
	n        int      // number of buckets (keys)
	evalsha  []byte   // "*N $7 EVALSHA $40 <sha> $len <n>"
	eval     []byte   // the same with EVAL and the script
	keyHeads [][]byte // "$<len>\r\n" of each key
	keyTails [][]byte // "<suffix>\r\n" of each key
	args     []byte   // interval, burst, cost of every bucket
}

// bulk appends a RESP bulk string.
func bulk(b []byte, s string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(s)), 10)
	b = append(b, "\r\n"...)
	b = append(b, s...)
	return append(b, "\r\n"...)
}

// newCommand prepares the script call for policies ps, whose keys are a
// client key (fixed length keyLen) plus each policy's keySuffix.
func newCommand(ps []*policy, keyLen int) *command {
	n := len(ps)
	head := func(verb, body string) []byte {
		b := []byte("*")
		b = strconv.AppendInt(b, int64(3+4*n), 10)
		b = append(b, "\r\n"...)
		b = bulk(b, verb)
		b = bulk(b, body)
		return bulk(b, strconv.Itoa(n))
	}
	cmd := &command{n: n, evalsha: head("EVALSHA", bucketSHA), eval: head("EVAL", bucketScript)}
	for _, p := range ps {
		h := []byte("$")
		h = strconv.AppendInt(h, int64(keyLen+len(p.keySuffix)), 10)
		cmd.keyHeads = append(cmd.keyHeads, append(h, "\r\n"...))
		cmd.keyTails = append(cmd.keyTails, []byte(p.keySuffix+"\r\n"))
		cmd.args = bulk(cmd.args, strconv.FormatFloat(p.lim.interval, 'g', -1, 64))
		cmd.args = bulk(cmd.args, strconv.FormatFloat(p.lim.burst, 'g', -1, 64))
		cmd.args = bulk(cmd.args, strconv.FormatFloat(p.lim.cost, 'g', -1, 64))
	}
	return cmd
}

// appendCall appends the call of head (evalsha or eval) for the client key.
func (cmd *command) appendCall(b, head []byte, key string) []byte {
	b = append(b, head...)
	for i := 0; i < cmd.n; i++ {
		b = append(b, cmd.keyHeads[i]...)
		b = append(b, key...)
		b = append(b, cmd.keyTails[i]...)
	}
	return append(b, cmd.args...)
}

var noscript = []byte("-NOSCRIPT")

// check runs the bucket script for the client key and stores its reply,
// 1+3n integers, in out. It gives up at the client's timeout. A connection
// taken from the pool that turns out dead (Redis restarted) is replaced by
// one fresh dial within the same budget, after closing its idle siblings.
func (c *redisClient) check(cmd *command, key string, out []int64) error {
	now := c.now()
	deadline := now.Add(c.set.timeout)
	cn, fresh, err := c.get(now, deadline)
	if err != nil {
		return err
	}
	err = c.exchange(cn, cmd, key, out, deadline)
	if err != nil && !fresh && isStale(err) {
		c.discard(cn)
		c.closeIdle()
		if cn, _, err = c.get(now, deadline); err != nil {
			return err
		}
		err = c.exchange(cn, cmd, key, out, deadline)
	}
	if err != nil {
		c.discard(cn)
		return err
	}
	c.put(cn, now)
	return nil
}

// isStale reports an error of a connection the server closed: EOF, reset
// or broken pipe (a restarted Redis), as opposed to a timeout or a reply.
func isStale(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}

// exchange writes the EVALSHA (EVAL after NOSCRIPT) and reads the reply.
// An error reply other than NOSCRIPT leaves the connection usable but is
// reported as errBadReply-wrapped data (its text).
func (c *redisClient) exchange(cn *rconn, cmd *command, key string, out []int64, deadline time.Time) error {
	if err := cn.nc.SetDeadline(deadline); err != nil {
		return err
	}
	cn.buf = cmd.appendCall(cn.buf[:0], cmd.evalsha, key)
	if _, err := cn.nc.Write(cn.buf); err != nil {
		return err
	}
	line, err := cn.br.ReadSlice('\n')
	if err != nil {
		return err
	}
	if bytes.HasPrefix(line, noscript) {
		// The script cache was flushed (SCRIPT FLUSH, restart, failover):
		// EVAL runs the script and caches it again.
		cn.buf = cmd.appendCall(cn.buf[:0], cmd.eval, key)
		if _, err := cn.nc.Write(cn.buf); err != nil {
			return err
		}
		if line, err = cn.br.ReadSlice('\n'); err != nil {
			return err
		}
	}
	return readInts(cn.br, line, out)
}

// readInts parses an array reply of len(out) integers whose first line is
// line, into out. Any other shape is errBadReply; the rest of a mis-shaped
// reply is not drained, so the caller must drop the connection.
func readInts(br *bufio.Reader, line []byte, out []int64) error {
	if len(line) < 3 || line[0] != '*' {
		if len(line) > 0 && line[0] == '-' {
			return fmt.Errorf("%w: %s", errBadReply, bytes.TrimSpace(line[1:]))
		}
		return errBadReply
	}
	if n, err := strconv.Atoi(string(line[1 : len(line)-2])); err != nil || n != len(out) {
		return errBadReply
	}
	for i := range out {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) < 4 || line[0] != ':' {
			return errBadReply
		}
		v, err := strconv.ParseInt(string(line[1:len(line)-2]), 10, 64)
		if err != nil {
			return errBadReply
		}
		out[i] = v
	}
	return nil
}
