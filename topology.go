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

	refreshing  int32 // 1 while a refresh runs
	lastRefresh int64 // Unix ns of the last refresh started
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

// node returns the client for addr, creating (and warming) it on first
// use. Requires that b.topo.mu is held.
func (b *backend) node(addr string) *redisClient {
	if c, ok := b.topo.nodes[addr]; ok {
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
	c.warm()
	return c
}

// forget closes the idle connections of nodes no longer in use (keep), and
// forgets them. Requires that b.topo.mu is held.
func (b *backend) forget(keep map[*redisClient]bool) {
	for addr, c := range b.topo.nodes {
		if !keep[c] {
			c.closeIdle()
			delete(b.topo.nodes, addr)
		}
	}
}

// topologyCheck is backend.check's path for sentinel and cluster modes:
// the check on the key's node, following one redirection.
func (b *backend) topologyCheck(cmd *command, key string, d []int64, now time.Time, ns int64, o *redisSettings) error {
	if b.base.mode == modeSentinel && atomic.LoadInt32(&b.topo.watching) == 0 {
		b.watch()
	}
	c := b.route(key)
	if c == nil {
		b.refresh()
		return errNoRoute
	}
	err := c.check(cmd, key, d, now, ns, o.timeout)
	if err == nil || !errors.Is(err, errRedirect) {
		return err
	}
	// "MOVED 3999 127.0.0.1:6381" or "ASK 3999 127.0.0.1:6381"
	f := strings.Fields(strings.TrimPrefix(err.Error(), errRedirect.Error()+": "))
	if len(f) != 3 {
		return err
	}
	slot, perr := strconv.Atoi(f[1])
	if perr != nil || slot < 0 || slot >= clusterSlots {
		return err
	}
	b.topo.mu.Lock()
	target := b.node(f[2])
	if f[0] == "MOVED" && target != nil && b.topo.slots != nil {
		b.topo.slots[slot] = target
	}
	b.topo.mu.Unlock()
	if target == nil {
		return err
	}
	deadline := now.Add(o.timeout)
	if f[0] == "ASK" {
		return target.checkAsking(cmd, key, d, deadline)
	}
	b.refresh()
	return target.check(cmd, key, d, b.now(), b.now().UnixNano(), time.Until(deadline))
}

// refresh starts a topology refresh unless one runs or one started less
// than minRefresh ago.
func (b *backend) refresh() {
	t := &b.topo
	ns := b.now().UnixNano()
	last := atomic.LoadInt64(&t.lastRefresh)
	if ns-last < int64(minRefresh) || !atomic.CompareAndSwapInt32(&t.refreshing, 0, 1) {
		return
	}
	atomic.StoreInt64(&t.lastRefresh, ns)
	go b.refreshNow()
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
		b.logFailure(b.now().UnixNano(), err, &b.base)
	}
}

// checkAsking runs a check on this node after ASKING (a slot being
// migrated to it), within deadline. ASKING holds for one command only, so
// the call is EVAL (a NOSCRIPT answer could not be followed by EVAL
// without asking again).
func (c *redisClient) checkAsking(cmd *command, key string, d []int64, deadline time.Time) error {
	return c.exchangeFresh(cmd, key, d, deadline, true)
}

var askingCmd = []byte("*1\r\n$6\r\nASKING\r\n")

// sendAsking writes ASKING and the EVAL call in one write and reads
// ASKING's +OK.
func sendAsking(cn *rconn, cmd *command, key string) error {
	cn.buf = cmd.appendCall(append(cn.buf[:0], askingCmd...), cmd.evalHead, key)
	if _, err := cn.nc.Write(cn.buf); err != nil {
		return err
	}
	line, err := readLine(cn.br)
	if err != nil {
		return err
	}
	if string(line) != "+OK" {
		return errBadReply
	}
	return nil
}

// adminDo runs one command on a fresh connection to addr (user and
// password for AUTH), for topology queries; the connection is closed.
func (b *backend) adminDo(addr, user, pass string, db int64, cmd string, args ...interface{}) (interface{}, error) {
	conn, err := b.adminConn(addr, user, pass, db, func(net.Conn) {})
	if err != nil {
		return nil, fmt.Errorf("dialing %s: %w", addr, err)
	}
	defer conn.Close()
	return conn.Do(cmd, args...)
}

// adminConn dials addr for a topology query or subscription, within the
// dial budget, with the deployment's TLS (each node verified by its own
// address: b.tlsConf names no server) and the given credentials; got
// receives the raw connection.
func (b *backend) adminConn(addr, user, pass string, db int64, got func(net.Conn)) (redis.Conn, error) {
	deadline := b.now().Add(dialTimeoutFor(b.base.timeout))
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return redis.DialContext(ctx, "tcp", addr, dialOptions(b.tlsConf, deadline, user, pass, db, got)...)
}
