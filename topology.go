package tollgate

// Where a check goes: one server (standalone), the primary the sentinels
// name (Sentinel), or the node that owns the key's slot (Redis Cluster).
//
// A backend has one redisClient (pool) per node it talks to. In sentinel
// and cluster modes the map from keys to nodes (the topology) is learnt off
// the request's clock, by a short-lived goroutine (refresh) that asks the
// sentinels (SENTINEL get-master-addr-by-name) or a node (CLUSTER SLOTS):
// when the backend is created, after a check failed for any reason but the
// pod's own state, after MOVED, and after READONLY (a primary demoted by a
// failover). At most one refresh runs per backend, at most one every
// minRefresh. Until the topology is known, and while a node is down, checks
// fall back like any failed check (failure policy: fallback.go).
//
// Cluster: every key of one check shares one hash tag ({tag}), hence one
// slot. MOVED sends the check, once, to the named node (and updates the
// slot at once, before the refresh); ASK sends it once with ASKING, without
// updating the map. Sentinel: besides the triggers above, a watcher
// subscribed to +switch-master on a sentinel switches to the new primary
// as soon as Sentinel announces it; it runs while the backend is used and
// ends after a minute without checks (a later check starts it again).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Modes (redis.mode).
const (
	modeStandalone = iota
	modeSentinel
	modeCluster
)

// Errors of the topology.
var (
	errNoRoute  = errors.New("tollgate: no redis node is known for the key yet")
	errRedirect = errors.New("tollgate: redis redirected the check")
	errReadOnly = errors.New("tollgate: redis answered as a read-only replica")
)

const (
	// minRefresh spaces topology refreshes.
	minRefresh = 250 * time.Millisecond
	// watchIdle ends the sentinel watcher after this long without checks.
	watchIdle = time.Minute
	// clusterSlots is the number of hash slots of Redis Cluster.
	clusterSlots = 16384
)

// topology is a backend's map from keys to nodes. Guarded by its mu.
type topology struct {
	mu      sync.Mutex
	nodes   map[string]*redisClient // by address, every node in use
	primary *redisClient            // sentinel: the current primary
	slots   []*redisClient          // cluster: owner by slot; nil until known
	extra   []string                // nodes named only by redirections, oldest first

	refreshing  int32 // 1 while a refresh runs
	lastRefresh int64 // Unix ns of the last refresh started
	learnt      int64 // monotonic ns when the last refresh succeeded
	watching    int32 // 1 while the sentinel watcher runs
}

// route returns the client for key, or nil while the topology is unknown.
func (b *backend) route(key string) *redisClient {
	slot := 0
	if b.base.mode == modeCluster {
		slot = keySlot(key)
	}
	t := &b.topo
	t.mu.Lock()
	c := t.primary
	if b.base.mode == modeCluster && t.slots != nil {
		c = t.slots[slot]
	}
	t.mu.Unlock()
	return c
}

// maxExtraNodes bounds the nodes known only from MOVED or ASK replies
// (not from CLUSTER SLOTS): past it the oldest is forgotten, so a refresh
// that keeps failing while redirections name new addresses cannot grow
// the pools without end.
const maxExtraNodes = 16

// node returns the client for addr, creating (and warming) it on first
// use. learnt says the topology named it (CLUSTER SLOTS, the sentinels);
// a node named only by a redirection is an extra, forgotten when more than
// maxExtraNodes are held or when the next refresh does not name it.
// Requires that b.topo.mu is held.
func (b *backend) node(addr string, learnt bool) *redisClient {
	if c, ok := b.topo.nodes[addr]; ok {
		if learnt {
			b.topo.unmarkExtra(addr)
		}
		return c
	}
	set := b.base
	set.addr = addr
	c, err := newRedisClient(set)
	if err != nil { // TLS files were read when the backend was created
		return nil
	}
	c.onDialError = func(err error) { b.dialFailed(err) }
	b.topo.nodes[addr] = c
	if !learnt {
		b.topo.extra = append(b.topo.extra, addr)
		if len(b.topo.extra) > maxExtraNodes {
			b.topo.forgetNode(b.topo.extra[0])
			b.topo.extra = b.topo.extra[1:]
		}
	}
	c.warm()
	return c
}

// unmarkExtra makes addr a learnt node. Requires t.mu held.
func (t *topology) unmarkExtra(addr string) {
	for i, a := range t.extra {
		if a == addr {
			t.extra = append(t.extra[:i], t.extra[i+1:]...)
			return
		}
	}
}

// forgetNode closes addr's idle connections and forgets it, with the
// slots it owned (their checks fall back until the next refresh).
// Requires t.mu held.
func (t *topology) forgetNode(addr string) {
	c := t.nodes[addr]
	if c == nil {
		return
	}
	c.forget()
	delete(t.nodes, addr)
	for i, o := range t.slots {
		if o == c {
			t.slots[i] = nil
		}
	}
	if t.primary == c {
		t.primary = nil
	}
}

// forget closes the idle connections of nodes no longer in use (keep), and
// forgets them. Requires that b.topo.mu is held.
func (b *backend) forget(keep map[*redisClient]bool) {
	b.topo.extra = nil

	for addr, c := range b.topo.nodes {
		if !keep[c] {
			c.forget()
			delete(b.topo.nodes, addr)
		}
	}
}

// topologyCheck is backend.check's path for sentinel and cluster modes:
// the check on the key's node, following one redirection.
func (b *backend) topologyCheck(cmd *command, key string, d []int64, o *redisSettings) error {
	if b.base.mode == modeSentinel && atomic.LoadInt32(&b.topo.watching) == 0 {
		b.watch()
	}
	start := b.now()
	c := b.route(key)
	if c == nil {
		b.refresh()
		return errNoRoute
	}
	cl, err := c.call(cmd, key, o.timeout)
	if err == errDialFailed || neverSent(err) {
		// The node is gone and the check never reached it: a failover
		// nobody has seen yet (no traffic since). Learn the topology now
		// and try the key's node once more if it changed.
		b.relearn(start)
		if next := b.route(key); next != nil && next != c {
			c = next
			cl, err = c.call(cmd, key, o.timeout)
		}
	}
	if err == errRedirect {
		return b.redirected(cmd, key, d, cl.line, c.set.addr, o)
	}
	if err != nil {
		return err
	}
	return decode(cl.line, d)
}

// relearn reads the topology now for a check begun at since (monotonic
// ns) whose node failed before its call was sent, unless a refresh has
// succeeded since, or one began less than minRefresh ago: one refresh at
// a time, and the checks that failed meanwhile use what it learnt. A
// refresh in progress (off the request's clock) is waited for, within the
// dial budget.
func (b *backend) relearn(since int64) {
	deadline := b.now() + int64(dialTimeoutFor(b.base.timeout))
	for atomic.LoadInt64(&b.topo.learnt) < since && b.now() < deadline {
		if atomic.LoadInt32(&b.topo.refreshing) == 0 {
			if b.now()-atomic.LoadInt64(&b.topo.lastRefresh) < int64(minRefresh) {
				return // one began less than minRefresh ago: its map stands
			}
			if atomic.CompareAndSwapInt32(&b.topo.refreshing, 0, 1) {
				atomic.StoreInt64(&b.topo.lastRefresh, b.now())
				b.refreshNow()
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// redirected follows a MOVED or ASK reply from the node at from once:
// MOVED updates the slot at once (and asks for a refresh), ASK runs the
// check after ASKING without updating the map. A target with no host
// (Redis's unknown endpoint) is on from's host, as in CLUSTER SLOTS.
func (b *backend) redirected(cmd *command, key string, d []int64, line []byte, from string, o *redisSettings) error {
	isAsk, slot, addr, ok := parseRedirect(line)
	if !ok {
		return errBadReply
	}
	if host, port, _ := net.SplitHostPort(addr); host == "" || host == "?" {
		fromHost, _, _ := net.SplitHostPort(from)
		addr = net.JoinHostPort(fromHost, port)
	}
	b.topo.mu.Lock()
	target := b.node(addr, false)
	if !isAsk && target != nil && b.topo.slots != nil {
		b.topo.slots[slot] = target
	}
	b.topo.mu.Unlock()
	if target == nil {
		b.refresh()
		return errRedirect
	}
	if isAsk {
		return target.checkAsking(cmd, key, d, o.timeout)
	}
	b.refresh()
	return target.check(cmd, key, d, o.timeout)
}

// parseRedirect parses "-MOVED 3999 127.0.0.1:6381\r\n" or "-ASK ...":
// whether it is ASK, the slot, and the node's address.
func parseRedirect(line []byte) (isAsk bool, slot int, addr string, ok bool) {
	f := strings.Fields(string(line[1:]))
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return false, 0, "", false
	}
	slot, err := strconv.Atoi(f[1])
	if err != nil || slot < 0 || slot >= clusterSlots {
		return false, 0, "", false
	}
	if _, port, err := net.SplitHostPort(f[2]); err != nil || port == "" {
		return false, 0, "", false
	}
	return f[0] == "ASK", slot, f[2], true
}

// refresh starts a topology refresh unless one runs or one started less
// than minRefresh ago.
func (b *backend) refresh() {
	t := &b.topo
	ns := b.now()
	last := atomic.LoadInt64(&t.lastRefresh)
	if ns-last < int64(minRefresh) || !atomic.CompareAndSwapInt32(&t.refreshing, 0, 1) {
		return
	}
	atomic.StoreInt64(&t.lastRefresh, ns)
	go b.refreshNow()
}

// refreshSync learns the topology now, unless a refresh runs (the
// prober's, off the request's clock).
func (b *backend) refreshSync() {
	if atomic.CompareAndSwapInt32(&b.topo.refreshing, 0, 1) {
		atomic.StoreInt64(&b.topo.lastRefresh, b.now())
		b.refreshNow()
	}
}

// refreshNow learns the topology (a goroutine of its own: see refresh).
func (b *backend) refreshNow() {
	defer func() {
		if r := recover(); r != nil {
			log.Printf("tollgate: redis %s: refreshing the topology: recovered from a panic: %v", b.describe(), r)
		}
		atomic.StoreInt32(&b.topo.refreshing, 0)
	}()
	var err error
	if b.base.mode == modeSentinel {
		err = b.resolvePrimary()
	} else {
		err = b.loadSlots()
	}
	if err != nil {
		b.logFailure(b.now(), err, &b.base)
		return
	}
	atomic.StoreInt64(&b.topo.learnt, b.now())
}

// checkAsking runs a check on this node after ASKING (a slot being
// migrated to it). ASKING holds for one command only, so the call is EVAL
// (a NOSCRIPT answer could not be followed by EVAL without asking again);
// ASKING and EVAL go in one write.
func (c *redisClient) checkAsking(cmd *command, key string, d []int64, timeout time.Duration) error {
	pre := newCall()
	cl, err := c.roundTrip(pre, askingCmd, cmd, cmd.evalHead, key, timeout, 0)
	if err != nil {
		return err
	}
	if string(pre.line) != "+OK\r\n" {
		return errBadReply
	}
	return decode(cl.line, d)
}

var askingCmd = []byte("*1\r\n$6\r\nASKING\r\n")

// adminDo runs one command on a fresh connection to addr (user and
// password for AUTH), for topology queries; the connection is closed.
func (b *backend) adminDo(addr, user, pass string, db int64, cmd string, args ...interface{}) (interface{}, error) {
	conn, err := b.adminConn(addr, user, pass, db, func(net.Conn) {})
	if err != nil {
		return nil, fmt.Errorf("dialing %q: %w", addr, err)
	}
	defer conn.Close()
	return conn.Do(cmd, args...)
}

// adminConn dials addr for a topology query or subscription, within the
// dial budget, with the deployment's TLS (each node verified by its own
// address: b.tlsConf names no server) and the given credentials; got
// receives the raw connection.
func (b *backend) adminConn(addr, user, pass string, db int64, got func(net.Conn)) (redis.Conn, error) {
	deadline := time.Now().Add(dialTimeoutFor(b.base.timeout))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return redis.DialContext(ctx, "tcp", addr, dialOptions(b.tlsConf, deadline, user, pass, db, adminBytes, got)...)
}
