package redis

// A connection to Redis: dial, TLS, and the handshake (AUTH or ACL,
// CLIENT SETNAME, SELECT), all through redigo within one dial budget; then
// the raw connection is the client's own, shared by the checks (wire.go)
// in a pool (pool.go). Under Yaegi the client's own exchange costs about a
// third of redigo's Pool + Script.Do (see BENCHMARKS.md).

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	redigo "github.com/gomodule/redigo/redis"
)

// dial connects, authenticates and selects the database, all before
// deadline, through redigo; then keeps the raw connection for checks.
func (c *Pool) dial(deadline time.Time, loadScript bool) (*rconn, error) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	var raw net.Conn
	opts := dialOptions(c.opts.TLS, deadline, c.opts.Username, c.opts.Password, c.opts.DB, handshakeBytes, func(nc net.Conn) { raw = nc })
	conn, err := redigo.DialContext(ctx, "tcp", c.opts.Addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dialing redis %q: %w", c.opts.Addr, err)
	}
	if raw == nil {
		return nil, fmt.Errorf("dialing redis %q: no connection", c.opts.Addr)
	}
	// Load the script with the handshake, off the request's clock: a
	// burst's first checks on a fresh (or restarted) Redis would otherwise
	// all be answered NOSCRIPT and all send the script's body again. A user
	// without +script|load falls back to that (EVAL on NOSCRIPT).
	if !loadScript || c.opts.Script == nil {
		return newConn(raw), nil
	}
	sha, err := redigo.String(conn.Do("SCRIPT", "LOAD", c.opts.Script.Body))
	if err != nil && !strings.HasPrefix(err.Error(), "NOPERM") {
		_ = raw.Close()
		return nil, fmt.Errorf("dialing redis %q: loading the script: %w", c.opts.Addr, err)
	}
	if err == nil && sha != c.opts.Script.SHA {
		_ = raw.Close()
		return nil, fmt.Errorf("dialing redis %q: loading the script: %w: SHA %q", c.opts.Addr, ErrBadReply, sha)
	}
	// The connection's CLIENT ID, which grows with every connection a
	// Redis process accepts and starts again at a restart (stale.go: a
	// lower ID on a later connection means a restarted Redis). Unknown
	// (0) without +client|id.
	reply, err := conn.Do("CLIENT", "ID")
	if err != nil && !isErrorReply(err) {
		_ = raw.Close()
		return nil, fmt.Errorf("dialing redis %q: reading the client id: %w", c.opts.Addr, err)
	}
	cn := newConn(raw)
	if id, err := redigo.Int64(reply, err); err == nil && id > 0 {
		cn.id = id
	}
	// The server process's run_id (INFO server), which a restart
	// changes: unknown ("") without +info, and then CLIENT ID tells.
	reply, err = conn.Do("INFO", "server")
	if err != nil && !isErrorReply(err) {
		_ = raw.Close()
		return nil, fmt.Errorf("dialing redis %q: reading the server's run id: %w", c.opts.Addr, err)
	}
	if info, err := redigo.String(reply, err); err == nil {
		cn.run = runID(info)
	}
	return cn, nil
}

// runID returns the run_id field of an INFO reply: 40 hexadecimal
// characters, or "" when there is none such.
func runID(info string) string {
	i := strings.Index(info, "\nrun_id:")
	if i < 0 || len(info) < i+8+40 {
		return ""
	}
	id := info[i+8 : i+8+40]
	for j := 0; j < len(id); j++ {
		if c := id[j]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return ""
		}
	}
	return id
}

// isErrorReply reports an error redigo made of an error reply (NOPERM,
// ERR unknown command, a proxy's own text), as opposed to the
// connection's: a network error, EOF, or redigo's protocol error. (No
// type assertion on errors: see STYLE.)
func isErrorReply(err error) bool {
	var ne net.Error
	return !errors.As(err, &ne) && err != io.EOF && err != io.ErrUnexpectedEOF && err != errReplyTooLong &&
		!strings.HasPrefix(err.Error(), "redigo: ")
}

// Bounds on what redigo may read on one connection, in all: redigo bounds
// each length it reads but not a reply's total, and holds 10-14 times the
// bytes of nested empty arrays it parses. A node's reply is untrusted.
const (
	handshakeBytes = 16 << 10  // AUTH, CLIENT SETNAME, SELECT, SCRIPT LOAD: a few lines
	adminBytes     = 128 << 10 // a topology query: CLUSTER SLOTS of hundreds of nodes
)

// errReplyTooLong is a node that sent more than redigo may read.
var errReplyTooLong = errors.New("tollgate: redis sent more than a handshake or topology reply may hold")

// budgetConn is a connection as redigo reads it: at most left bytes more.
type budgetConn struct {
	net.Conn
	left int
}

func (bc *budgetConn) Read(p []byte) (int, error) {
	if bc.left <= 0 {
		return 0, errReplyTooLong
	}
	if len(p) > bc.left {
		p = p[:bc.left]
	}
	n, err := bc.Conn.Read(p)
	bc.left -= n
	return n, err
}

// dialOptions are redigo's options for a connection that must be ready by
// deadline: TCP (and TLS with tlsConf) with the deadline set, AUTH (with
// username when set), SELECT db, CLIENT SETNAME tollgate; redigo reads at
// most budget bytes of it. got receives the raw connection.
func dialOptions(tlsConf *tls.Config, deadline time.Time, username, password string, db int64, budget int, got func(net.Conn)) []redigo.DialOption {
	opts := []redigo.DialOption{
		redigo.DialContextFunc(func(ctx context.Context, network, addr string) (net.Conn, error) {
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
			return &budgetConn{Conn: nc, left: budget}, nil
		}),
		redigo.DialReadTimeout(time.Until(deadline)),
		redigo.DialWriteTimeout(time.Until(deadline)),
		redigo.DialClientName("tollgate"),
	}
	if password != "" {
		opts = append(opts, redigo.DialPassword(password))
		if username != "" {
			opts = append(opts, redigo.DialUsername(username))
		}
	}
	if db != 0 {
		opts = append(opts, redigo.DialDatabase(int(db)))
	}
	return opts
}

// startDial dials one connection on a goroutine of its own. Requires c.mu
// held.
func (c *Pool) startDial() {
	c.dialing++
	go c.dialAsync()
}

// warm starts a dial when the pool has no connection, so that the first
// check finds one (New calls it: Traefik builds middlewares before traffic).
func (c *Pool) Warm() {
	c.mu.Lock()
	if len(c.conns) == 0 && c.dialing == 0 && c.poolSize > 0 {
		c.startDial()
	}
	c.mu.Unlock()
}

// dialAsync dials within the dial budget and adds the connection to the
// pool, or reports the failure to onDialError; either way it wakes the
// checks waiting for a connection.
func (c *Pool) dialAsync() {
	cn, err := c.dialSafe(true)
	c.mu.Lock()
	c.dialing--
	c.dialEnds++
	if err == nil && c.forgotten {
		cn.mu.Lock()
		cn.kill(errConnDead)
		cn.mu.Unlock()
	} else if err == nil {
		startReader(cn, c)
		cn.born = c.mono()
		cn.used = cn.born
		cn.epoch = c.epoch
		c.conns = append(c.conns, cn)
		c.dialFailed = false
		c.dialCut = false
	} else {
		c.dialFailed = true
		c.dialCut = cut(err)
		if isTimeout(err) {
			c.silentAt = c.mono()
		}
		c.epoch++ // what stopped this dial may have ended the others' Redis
	}
	c.mu.Unlock()
	if err != nil {
		c.reportDial(err) // before the wake: a waiting check sees it counted
	}
	c.mu.Lock()
	c.dialDone.Broadcast()
	c.mu.Unlock()
}

// dialSafe is dial within the dial budget, with a panic turned into an
// error. This runs on a goroutine of the plugin's own, where nothing of
// Traefik's recovers: a panic there (Yaegi's lazily built call wrappers are
// not safe for concurrent first use; seen once in the tests) would end the
// whole Traefik process instead of one dial.
func (c *Pool) dialSafe(loadScript bool) (cn *rconn, err error) {
	defer func() {
		if r := recover(); r != nil {
			cn = nil
			err = fmt.Errorf("dialing redis %q: recovered from a panic: %v", c.opts.Addr, r)
		}
	}()
	return c.dial(c.now().Add(c.dialTimeout), loadScript)
}

// reportDial passes a failed dial to onDialError, recovering a panic as
// dialSafe does.
func (c *Pool) reportDial(err error) {
	defer func() { _ = recover() }()
	if c.onDialError != nil {
		c.onDialError(err)
	}
}

// tend grows the pool when it should (grow: its least busy connection
// carries growAt calls per open connection, or there is none) and prunes
// idle connections at most every pruneEvery. Requires c.mu held.
func (c *Pool) tend(grow bool, ns int64) {
	if grow && c.dialing == 0 && len(c.conns)+c.proving < c.poolSize {
		c.startDial()
	}
	if ns-c.lastPrune >= pruneEvery {
		c.lastPrune = ns
		if len(c.conns) > 1 {
			c.pruneIdle(ns)
		}
	}
}

// adminDo runs one command on a fresh connection to addr (user and
// password for AUTH), for topology queries, with o's TLS and budget; the
// connection is closed.
func adminDo(o *Options, addr, user, pass string, db int64, cmd string, args ...interface{}) (interface{}, error) {
	conn, err := adminConn(o, addr, user, pass, db, func(_ net.Conn) {})
	if err != nil {
		return nil, fmt.Errorf("dialing %q: %w", addr, err)
	}
	defer conn.Close()
	return conn.Do(cmd, args...)
}

// adminConn dials addr for a topology query or subscription, within the
// dial budget, with the deployment's TLS (each node verified by its own
// address when o.TLS names no server) and the given credentials; got
// receives the raw connection.
func adminConn(o *Options, addr, user, pass string, db int64, got func(net.Conn)) (redigo.Conn, error) {
	deadline := time.Now().Add(DialTimeout(o.Timeout))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return redigo.DialContext(ctx, "tcp", addr, dialOptions(o.TLS, deadline, user, pass, db, adminBytes, got)...)
}
