package tollgate

// Talking to Redis. redigo dials (TCP, TLS, AUTH/ACL, CLIENT SETNAME,
// SELECT); the per-request exchange then owns the socket: one prepared
// EVALSHA written with a single Write, one small integer array read through
// bufio. Under Yaegi this is about a third of the cost of redigo's
// Pool + Script.Do (see BENCHMARKS in the README).
//
// No select: every exchange runs under one absolute deadline set on the
// connection, and the pool is a mutex-guarded stack. Connections are dialled
// off the request's clock, by a goroutine that ends within its dial budget and
// puts its connection in the pool (at most poolSize connections, dialling or
// open, exist at once); the check that asked for it waits within its own
// timeout and fails at once if the dial does. So a slow first dial (a cold
// interpreter, a TLS handshake to a distant Redis) is not thrown away when
// the check gives up, and New warms the pool the same way.

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
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Errors a caller may branch on.
var (
	errPoolExhausted = errors.New("tollgate: redis connection pool exhausted")
	errDialing       = errors.New("tollgate: redis connection not ready within the timeout")
	errLate          = errors.New("tollgate: the check reached its connection after its timeout (pod busy)")
	errDialFailed    = errors.New("tollgate: dialing redis failed")
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

// A dial (connect, TLS, AUTH, SELECT) does not run on a request's clock (see
// dialAsync); it has 100 times the check's timeout, within these bounds. A
// Redis that cannot complete one in that time is unavailable: the failure
// counts toward the breaker (onDialError).
const (
	minDialTimeout = 250 * time.Millisecond
	maxDialTimeout = 2 * time.Second
)

// dialTimeoutFor returns the dial budget for a check timeout.
func dialTimeoutFor(timeout time.Duration) time.Duration {
	d := 100 * timeout
	if d < minDialTimeout {
		return minDialTimeout
	}
	if d > maxDialTimeout {
		return maxDialTimeout
	}
	return d
}

// redisClient is a pool of connections to one Redis endpoint.
//
// The zero value is not usable; use newRedisClient. Safe for concurrent use.
// At most poolSize connections are open at once; a check that finds them
// all busy waits for one within its own timeout, then fails with
// errPoolExhausted. Idle connections are reused last-in first-out;
// those idle for idleTimeout are closed (pruneIdle).
type redisClient struct {
	set     redisSettings
	tlsConf *tls.Config      // nil without TLS
	now     func() time.Time // time.Now; injected in tests

	dialTimeout time.Duration
	onDialError func(error) // set once before use; counts a failed dial

	lanes    []*lane // coalescing (coalesce.go); nil: off
	nextLane int64   // round-robin counter over lanes

	mu        sync.Mutex // guards the fields below
	idle      []*rconn
	open      int // connections open or being dialled
	poolSize  int
	dialing   int   // dials in progress
	dialSince int64 // Unix ns since when dialing > 0
}

// setPoolSize changes the cap on open connections (the latest config wins).
func (c *redisClient) setPoolSize(n int) {
	c.mu.Lock()
	c.poolSize = n
	c.mu.Unlock()
}

// rconn is one connection and its buffers; owned by one check at a time.
type rconn struct {
	nc   net.Conn
	br   *bufio.Reader
	buf  []byte
	used int64 // Unix ns of the last use
}

func newRedisClient(set redisSettings) (*redisClient, error) {
	c := &redisClient{set: set, now: time.Now, poolSize: set.poolSize, dialTimeout: dialTimeoutFor(set.timeout)}
	if set.pipeline > 0 {
		c.lanes = newLanes(set.pipeline)
	}
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

// get is the slow path of taking a connection: an idle one not yet expired,
// or a new dial (dialAsync). When poolSize connections are
// busy it waits for one, polling (no channel, no select: see STYLE.md),
// until deadline, then fails with errPoolExhausted.
func (c *redisClient) get(deadline time.Time) (cn *rconn, err error) {
	for {
		cn, err = c.tryGet(deadline)
		if err != errPoolExhausted {
			return cn, err
		}
		if !pause(deadline) {
			return nil, err
		}
	}
}

// pause sleeps one poll interval, or until deadline if that is sooner; it
// reports false when deadline has already passed.
func pause(deadline time.Time) bool {
	wait := time.Until(deadline)
	if wait <= 0 {
		return false
	}
	if wait > poolPoll {
		wait = poolPoll
	}
	time.Sleep(wait)
	return true
}

// tryGet is get without waiting.
func (c *redisClient) tryGet(deadline time.Time) (cn *rconn, err error) {
	now := c.now().UnixNano()
	c.mu.Lock()
	if cn = c.takeIdle(now); cn != nil {
		c.mu.Unlock()
		return cn, nil
	}
	if c.dialing > 0 && now-c.dialSince > int64(c.set.timeout) {
		// A dial has been pending longer than a whole check: Redis is not
		// completing handshakes (frozen, overloaded, unreachable). Waiting
		// would only add the timeout to this request; the dial's own
		// failure, when it comes, is counted against Redis.
		c.mu.Unlock()
		return nil, errDialing
	}
	if c.open >= c.poolSize {
		c.mu.Unlock()
		return nil, errPoolExhausted
	}
	c.open++
	c.startDial(now)
	c.mu.Unlock()
	p := &pendingDial{}
	go c.dialAsync(p)
	return c.awaitDial(p, deadline)
}

// takeIdle pops the most recently used idle connection, closing those idle
// for idleTimeout on the way; nil when none is left. Requires that c.mu is
// held.
func (c *redisClient) takeIdle(now int64) *rconn {
	for len(c.idle) > 0 {
		cn := c.idle[len(c.idle)-1]
		c.idle[len(c.idle)-1] = nil
		c.idle = c.idle[:len(c.idle)-1]
		if now-cn.used < int64(idleTimeout) {
			return cn
		}
		c.open--
		_ = cn.nc.Close()
	}
	return nil
}

// startDial records a dial starting at now; c.mu must be held.
func (c *redisClient) startDial(now int64) {
	if c.dialing == 0 {
		c.dialSince = now
	}
	c.dialing++
}

// pendingDial is one dialAsync's outcome: err is written before done is set.
type pendingDial struct {
	done int32
	err  error
}

// dialAsync dials within the dial budget and pools the connection; on
// failure it gives back the slot taken for it (open), which the caller has
// taken, and reports the error to onDialError.
func (c *redisClient) dialAsync(p *pendingDial) {
	cn, err := c.dialSafe()
	c.mu.Lock()
	c.dialing--
	if err != nil {
		c.open--
	} else {
		cn.used = c.now().UnixNano()
		c.idle = append(c.idle, cn)
	}
	c.mu.Unlock()
	if err != nil {
		c.reportDial(err) // before done: the waiting check sees it counted
		// The check waiting for it gets a sentinel: the dial was counted
		// (and its error logged) by onDialError, the check must not count
		// it again.
		p.err = errDialFailed
	}
	atomic.StoreInt32(&p.done, 1)
}

// dialSafe is dial within the dial budget, with a panic turned into an
// error. This runs on a goroutine of the plugin's own, where nothing of
// Traefik's recovers: a panic there (Yaegi's lazily built call wrappers are
// not safe for concurrent first use; seen once in the tests) would end the
// whole Traefik process instead of one dial.
func (c *redisClient) dialSafe() (cn *rconn, err error) {
	defer func() {
		if r := recover(); r != nil {
			cn, err = nil, fmt.Errorf("dialing redis %s: recovered from a panic: %v", c.set.addr, r)
		}
	}()
	return c.dial(c.now().Add(c.dialTimeout))
}

// reportDial passes a failed dial to onDialError, recovering a panic as
// dialSafe does.
func (c *redisClient) reportDial(err error) {
	defer func() { _ = recover() }()
	if c.onDialError != nil {
		c.onDialError(err)
	}
}

// awaitDial waits until deadline for an idle connection (the one p dials,
// or any other returned meanwhile), failing at once with p's error.
func (c *redisClient) awaitDial(p *pendingDial, deadline time.Time) (*rconn, error) {
	for {
		now := c.now().UnixNano()
		c.mu.Lock()
		cn := c.takeIdle(now)
		c.mu.Unlock()
		if cn != nil {
			return cn, nil
		}
		if atomic.LoadInt32(&p.done) == 1 && p.err != nil {
			return nil, p.err
		}
		if !pause(deadline) {
			return nil, errDialing
		}
	}
}

// warm starts a dial when the pool has no connection, so that the first
// check finds one (New calls it: Traefik builds middlewares before traffic).
func (c *redisClient) warm() {
	c.mu.Lock()
	if c.open > 0 || c.poolSize <= 0 {
		c.mu.Unlock()
		return
	}
	c.open++
	c.startDial(c.now().UnixNano())
	c.mu.Unlock()
	go c.dialAsync(&pendingDial{})
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
	opts := dialOptions(c.tlsConf, deadline, c.set.username, c.set.password, c.set.db, func(nc net.Conn) { raw = nc })
	if _, err := redis.DialContext(ctx, "tcp", c.set.addr, opts...); err != nil {
		return nil, fmt.Errorf("dialing redis %s: %w", c.set.addr, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("dialing redis %s: no connection", c.set.addr)
	}
	return &rconn{nc: raw, br: bufio.NewReaderSize(raw, 512), buf: make([]byte, 0, 256)}, nil
}

// dialOptions are redigo's options for a connection that must be ready by
// deadline: TCP (and TLS with tlsConf) with the deadline set, AUTH (with
// username when set), SELECT db, CLIENT SETNAME tollgate. got receives the
// raw connection.
func dialOptions(tlsConf *tls.Config, deadline time.Time, username, password string, db int64, got func(net.Conn)) []redis.DialOption {
	opts := []redis.DialOption{
		redis.DialContextFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
			var d net.Dialer
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			_ = nc.SetDeadline(deadline)
			if tlsConf != nil {
				conf := tlsConf
				if conf.ServerName == "" {
					// A node named by the topology (Cluster, Sentinel):
					// verify it by its own host.
					conf = conf.Clone()
					conf.ServerName, _, _ = net.SplitHostPort(addr)
				}
				tc := tls.Client(nc, conf)
				if err := tc.HandshakeContext(ctx); err != nil {
					_ = nc.Close()
					return nil, err
				}
				nc = tc
			}
			got(nc)
			return nc, nil
		}),
		redis.DialReadTimeout(time.Until(deadline)),
		redis.DialWriteTimeout(time.Until(deadline)),
		redis.DialClientName("tollgate"),
	}
	if password != "" {
		opts = append(opts, redis.DialPassword(password))
		if username != "" {
			opts = append(opts, redis.DialUsername(username))
		}
	}
	if db != 0 {
		opts = append(opts, redis.DialDatabase(int(db)))
	}
	return opts
}

// command is the prepared EVALSHA (and EVAL) of one set of policies: only the
// client's key changes between requests, so a call is written as
// head, key, mid[0], key, ..., tail.
type command struct {
	shaHead  []byte   // "*N $7 EVALSHA $40 <sha> $len <n>" and the first key's "$len"
	evalHead []byte   // the same with EVAL and the script
	mid      [][]byte // key i's suffix and key i+1's "$len"
	tail     []byte   // the last key's suffix, then interval, burst, cost of every bucket
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
	keyHead := func(p *policy) []byte {
		h := []byte("$")
		h = strconv.AppendInt(h, int64(keyLen+len(p.keySuffix)), 10)
		return append(h, "\r\n"...)
	}
	head := func(verb, body string) []byte {
		b := []byte("*")
		b = strconv.AppendInt(b, int64(3+4*n), 10)
		b = append(b, "\r\n"...)
		b = bulk(b, verb)
		b = bulk(b, body)
		b = bulk(b, strconv.Itoa(n))
		return append(b, keyHead(ps[0])...)
	}
	cmd := &command{shaHead: head("EVALSHA", bucketSHA), evalHead: head("EVAL", bucketScript)}
	for i := 1; i < n; i++ {
		m := append([]byte(ps[i-1].keySuffix+"\r\n"), keyHead(ps[i])...)
		cmd.mid = append(cmd.mid, m)
	}
	cmd.tail = []byte(ps[n-1].keySuffix + "\r\n")
	for _, p := range ps {
		cmd.tail = bulk(cmd.tail, strconv.FormatFloat(p.shard.interval, 'g', -1, 64))
		cmd.tail = bulk(cmd.tail, strconv.FormatFloat(p.shard.burst, 'g', -1, 64))
		cmd.tail = bulk(cmd.tail, strconv.FormatFloat(p.shard.cost, 'g', -1, 64))
	}
	return cmd
}

// appendCall appends the call that starts with head (shaHead or evalHead)
// for the client key.
func (cmd *command) appendCall(b, head []byte, key string) []byte {
	b = append(b, head...)
	b = append(b, key...)
	for _, m := range cmd.mid {
		b = append(b, m...)
		b = append(b, key...)
	}
	return append(b, cmd.tail...)
}

var noscript = []byte("-NOSCRIPT")

// check runs the bucket script for the client key and stores the decision
// in d. It gives up at now + timeout; ns is now in Unix ns, which the
// caller has already computed. The common case (an idle connection,
// one exchange) is all it does itself; the rest is checkSlow.
func (c *redisClient) check(cmd *command, key string, d []int64, now time.Time, ns int64, timeout time.Duration) error {
	if c.lanes != nil {
		return c.checkCoalesced(cmd, key, d, now, ns, timeout)
	}
	return c.checkDirect(cmd, key, d, now, ns, timeout)
}

// checkDirect is check on a connection of its own.
func (c *redisClient) checkDirect(cmd *command, key string, d []int64, now time.Time, ns int64, timeout time.Duration) error {
	var cn *rconn
	c.mu.Lock()
	if n := len(c.idle); n > 0 {
		cn = c.idle[n-1]
		c.idle = c.idle[:n-1]
	}
	c.mu.Unlock()
	if cn == nil || ns-cn.used >= int64(idleTimeout) {
		return c.checkSlow(cn, cmd, key, d, now.Add(timeout))
	}
	deadline := now.Add(timeout)
	if err := exchange(cn, cmd, key, d, deadline, false); err != nil {
		return c.retry(cn, cmd, key, d, deadline, err)
	}
	cn.used = ns
	c.mu.Lock()
	c.idle = append(c.idle, cn)
	if ns-c.idle[0].used >= int64(idleTimeout) {
		c.pruneIdle(ns)
	}
	c.mu.Unlock()
	return nil
}

// pruneIdle closes the connections idle for idleTimeout, which sit at the
// bottom of the stack: after a burst, steady traffic keeps reusing the top
// ones and the rest would stay open for ever. Requires c.mu held.
func (c *redisClient) pruneIdle(ns int64) {
	n := 0
	for n < len(c.idle) && ns-c.idle[n].used >= int64(idleTimeout) {
		_ = c.idle[n].nc.Close()
		n++
	}
	c.open -= n
	c.idle = append(c.idle[:0], c.idle[n:]...)
}

// checkSlow is check without an idle connection at hand: expired (closed
// here) or none. It takes one from get (an idle one, a new dial, or a wait
// for a busy pool), within the same budget.
func (c *redisClient) checkSlow(expired *rconn, cmd *command, key string, d []int64, deadline time.Time) error {
	if expired != nil {
		c.discard(expired)
	}
	cn, err := c.get(deadline)
	if err != nil {
		return err
	}
	if err = exchange(cn, cmd, key, d, deadline, false); err != nil {
		return c.retry(cn, cmd, key, d, deadline, err)
	}
	c.put(cn, c.now())
	return nil
}

// retry handles a failed exchange on a pooled connection. When the server
// had closed it (Redis restarted), its idle siblings are dead too: all are
// closed and the check is tried once more on a fresh dial, within the same
// budget. Any other error is returned.
func (c *redisClient) retry(cn *rconn, cmd *command, key string, d []int64, deadline time.Time, err error) error {
	if err == errLate || errors.Is(err, errRedirect) || errors.Is(err, errReadOnly) {
		// Nothing was sent, or the reply was one error line: the
		// connection is as good as before.
		c.put(cn, c.now())
		return err
	}
	c.discard(cn)
	if !isStale(err) {
		return err
	}
	c.closeIdle()
	return c.exchangeFresh(cmd, key, d, deadline, false)
}

// exchangeFresh runs one exchange (asking: see exchange) on a connection
// from get, which it then pools or, after an error, closes.
func (c *redisClient) exchangeFresh(cmd *command, key string, d []int64, deadline time.Time, asking bool) error {
	cn, err := c.get(deadline)
	if err != nil {
		return err
	}
	if err = exchange(cn, cmd, key, d, deadline, asking); err != nil {
		c.discard(cn)
		return err
	}
	c.put(cn, c.now())
	return nil
}

// put returns a healthy connection to the pool.
func (c *redisClient) put(cn *rconn, now time.Time) {
	cn.used = now.UnixNano()
	c.mu.Lock()
	c.idle = append(c.idle, cn)
	c.mu.Unlock()
}

// isStale reports an error of a connection the server closed: EOF, reset
// or broken pipe (a restarted Redis), as opposed to a timeout or a reply.
// lateGrace is how long a check that missed its deadline still looks for
// a reply already received.
const lateGrace = 200 * time.Microsecond

// lateRead gives a read that timed out one more, short look. Go fails a
// read whose deadline has passed without looking at the socket, so on a
// CPU-starved pod a reply Redis sent well in time would count as Redis being
// slow (and open the breaker, dropping the fleet to local limits under
// load). The deadline is meant for a slow Redis, not a busy scheduler.
func lateRead(cn *rconn, err error) ([]byte, error) {
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() || cn.br.Buffered() > 0 {
		return nil, err
	}
	if err := cn.nc.SetReadDeadline(time.Now().Add(lateGrace)); err != nil {
		return nil, err
	}
	return cn.br.ReadSlice('\n')
}

// lateWrite turns a write that timed out before sending anything into
// errLate: the check reached Redis's socket after its own deadline (a
// CPU-starved pod), which says nothing about Redis.
func lateWrite(n int, err error) error {
	var ne net.Error
	if n == 0 && errors.As(err, &ne) && ne.Timeout() {
		return errLate
	}
	return err
}

func isStale(err error) bool {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "connection reset") || strings.Contains(msg, "broken pipe")
}

// exchange writes the EVALSHA and reads the decision into d. A reply that
// is not the decision's array goes to unexpected (NOSCRIPT, errors). Any
// reply but an array of len(d) non-negative integers with d[0] 0 or 1 (and
// a wait named when 0) is errBadReply; the caller then drops the connection, whose stream may hold
// the rest of the reply. Written for the interpreter: one frame, the byte
// work in compiled calls.
//
// asking sends the call as EVAL after ASKING (Redis Cluster, a slot being
// imported: see checkAsking), in one write.
func exchange(cn *rconn, cmd *command, key string, d []int64, deadline time.Time, asking bool) error {
	if err := cn.nc.SetDeadline(deadline); err != nil {
		return err
	}
	if asking {
		if err := sendAsking(cn, cmd, key); err != nil {
			return err
		}
	} else {
		cn.buf = cmd.appendCall(cn.buf[:0], cmd.shaHead, key)
		if n, err := cn.nc.Write(cn.buf); err != nil {
			return lateWrite(n, err)
		}
	}
	line, err := cn.br.ReadSlice('\n')
	if err != nil {
		line, err = lateRead(cn, err)
	}
	if err == nil && (len(line) < 4 || line[0] != '+') {
		line, err = unexpected(cn, cmd, key, line)
	}
	if err != nil {
		return err
	}
	return decode(line, d)
}

// decode parses a decision's status line ("+1 4 0 1000\r\n", at least 4
// bytes, checked by the caller) into d and checks it.
func decode(line []byte, d []int64) error {
	if len(d) == 4 {
		// One bucket, the common case: one compiled call parses the line.
		if n, _ := fmt.Sscan(string(line[1:len(line)-2]), &d[0], &d[1], &d[2], &d[3]); n != 4 || d[0]|d[1]|d[2]|d[3] < 0 {
			return errBadReply
		}
	} else if err := parseDecision(line[1:len(line)-2], d); err != nil {
		return err
	}
	if d[0] > 1 || (d[0] == 0 && !namesWait(d)) {
		return errBadReply
	}
	return nil
}

// parseDecision parses the space-separated integers of a decision over
// several buckets.
func parseDecision(line []byte, d []int64) error {
	fields := strings.Fields(string(line))
	if len(fields) != len(d) {
		return errBadReply
	}
	for i, f := range fields {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil || v < 0 {
			return errBadReply
		}
		d[i] = v
	}
	return nil
}

// namesWait reports whether a decision names a wait; a refusal that does
// not is a reply no correct script produces.
func namesWait(d []int64) bool {
	for i := 2; i < len(d); i += 3 {
		if d[i] > 0 {
			return true
		}
	}
	return false
}

// unexpected handles a reply to EVALSHA that is not the decision's array:
// after NOSCRIPT (the script cache was flushed by SCRIPT FLUSH, a restart or
// a failover) EVAL runs the script and caches it again, and the array's
// first line is returned; any other reply is an error.
func unexpected(cn *rconn, cmd *command, key string, line []byte) ([]byte, error) {
	if bytes.HasPrefix(line, noscript) {
		cn.buf = cmd.appendCall(cn.buf[:0], cmd.evalHead, key)
		if _, err := cn.nc.Write(cn.buf); err != nil {
			return nil, err
		}
		var err error
		if line, err = cn.br.ReadSlice('\n'); err != nil {
			return nil, err
		}
		if len(line) >= 4 && line[0] == '+' {
			return line, nil
		}
	}
	return nil, replyError(line)
}

// replyError is the error for a reply that is not a decision: a
// redirection (MOVED, ASK), a demoted primary (READONLY), another error
// reply, or a malformed reply.
func replyError(line []byte) error {
	if bytes.HasPrefix(line, moved) || bytes.HasPrefix(line, ask) {
		return fmt.Errorf("%w: %s", errRedirect, bytes.TrimSpace(line[1:]))
	}
	if bytes.HasPrefix(line, readOnly) {
		return fmt.Errorf("%w: %s", errReadOnly, bytes.TrimSpace(line[1:]))
	}
	if len(line) > 0 && line[0] == '-' {
		return fmt.Errorf("%w: %s", errBadReply, bytes.TrimSpace(line[1:]))
	}
	return errBadReply
}

// Error replies that name where the key lives (Cluster) or that the server
// is no longer the primary (after a failover).
var (
	moved    = []byte("-MOVED ")
	ask      = []byte("-ASK ")
	readOnly = []byte("-READONLY")
)
