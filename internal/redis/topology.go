package redis

// Where a check goes: one server (standalone), the primary the sentinels
// name (Sentinel), or the node that owns the key's slot (Redis Cluster).
//
// A Client has one Pool per node it talks to. In sentinel
// and cluster modes the map from keys to nodes (the topology) is learnt off
// the request's clock, by a short-lived goroutine (refresh) that asks the
// sentinels (SENTINEL get-master-addr-by-name) or a node (CLUSTER SLOTS):
// when the client starts, after a check failed for any reason but the
// pod's own state, after MOVED, and after READONLY (a primary demoted by a
// failover). At most one refresh runs per client, at most one every
// minRefresh. Until the topology is known, and while a node is down, checks
// fail with ErrNoRoute (the caller decides without Redis).
//
// Cluster: every key of one check shares one hash tag ({tag}), hence one
// slot. MOVED sends the check, once, to the named node (and updates the
// slot at once, before the refresh); ASK sends it once with ASKING, without
// updating the map. Sentinel: besides the triggers above, a watcher
// subscribed to +switch-master on a sentinel switches to the new primary
// as soon as Sentinel announces it; it runs while the client is used and
// ends after a minute without checks (a later check starts it again).

import (
	"log"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// topologyCheck is Client.Check's path for sentinel and cluster modes:
// the check on the key's node, following one redirection.
func (rc *Client) topologyCheck(cmd *Command, key string, d []int64, timeout time.Duration) error {
	if rc.opts.Mode == Sentinel && atomic.LoadInt32(&rc.topo.watching) == 0 {
		rc.watch()
	}
	start := rc.now()
	c := rc.route(key)
	if c == nil {
		rc.Refresh()
		return ErrNoRoute
	}
	cl, err := c.call(cmd, key, timeout)
	if err == ErrDialFailed || neverSent(err) {
		// The node is gone and the check never reached it: a failover
		// nobody has seen yet (no traffic since). Learn the topology now
		// and try the key's node once more if it changed.
		rc.relearn(start)
		if next := rc.route(key); next != nil && next != c {
			c = next
			cl, err = c.call(cmd, key, timeout)
		}
	}
	if err == errRedirect {
		return rc.redirected(cmd, key, d, cl.line, c.opts.Addr, timeout)
	}
	if err != nil {
		return err
	}
	return decode(cl.line, d, cmd)
}

// relearn reads the topology now for a check begun at since (monotonic
// ns) whose node failed before its call was sent, unless a refresh has
// succeeded since, or one began less than minRefresh ago: one refresh at
// a time, and the checks that failed meanwhile use what it learnt. A
// refresh in progress (off the request's clock) is waited for, within the
// dial budget.
func (rc *Client) relearn(since int64) {
	deadline := rc.now() + int64(DialTimeout(rc.opts.Timeout))
	for atomic.LoadInt64(&rc.topo.learnt) < since && rc.now() < deadline {
		if atomic.LoadInt32(&rc.topo.refreshing) == 0 {
			if rc.now()-atomic.LoadInt64(&rc.topo.lastRefresh) < int64(minRefresh) {
				return // one began less than minRefresh ago: its map stands
			}
			if atomic.CompareAndSwapInt32(&rc.topo.refreshing, 0, 1) {
				atomic.StoreInt64(&rc.topo.lastRefresh, rc.now())
				rc.refreshNow()
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
func (rc *Client) redirected(cmd *Command, key string, d []int64, line []byte, from string, timeout time.Duration) error {
	isAsk, slot, addr, ok := parseRedirect(line)
	if !ok {
		return ErrBadReply
	}
	if host, port, _ := net.SplitHostPort(addr); host == "" || host == "?" {
		fromHost, _, _ := net.SplitHostPort(from)
		addr = net.JoinHostPort(fromHost, port)
	}
	rc.topo.mu.Lock()
	target := rc.node(addr, false)
	if !isAsk && rc.topo.slots != nil {
		rc.topo.slots[slot] = target
	}
	rc.topo.mu.Unlock()
	if isAsk {
		return target.checkAsking(cmd, key, d, timeout)
	}
	rc.Refresh()
	return target.check(cmd, key, d, timeout)
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
func (rc *Client) Refresh() {
	t := &rc.topo
	ns := rc.now()
	last := atomic.LoadInt64(&t.lastRefresh)
	if ns-last < int64(minRefresh) || !atomic.CompareAndSwapInt32(&t.refreshing, 0, 1) {
		return
	}
	atomic.StoreInt64(&t.lastRefresh, ns)
	go rc.refreshNow()
}

// RefreshSync learns the topology now, unless a refresh runs (the
// prober's, off the request's clock).
func (rc *Client) RefreshSync() {
	if atomic.CompareAndSwapInt32(&rc.topo.refreshing, 0, 1) {
		atomic.StoreInt64(&rc.topo.lastRefresh, rc.now())
		rc.refreshNow()
	}
}

// refreshNow learns the topology (a goroutine of its own: see refresh).
func (rc *Client) refreshNow() {
	defer func() {
		if r := recover(); r != nil {
			log.Printf("tollgate: redis %s: refreshing the topology: recovered from a panic: %v", rc.Describe(), r)
		}
		atomic.StoreInt32(&rc.topo.refreshing, 0)
	}()
	var err error
	if rc.opts.Mode == Sentinel {
		err = rc.resolvePrimary()
	} else {
		err = rc.loadSlots()
	}
	if err != nil {
		rc.hooks.refreshFailed(err)
		return
	}
	atomic.StoreInt64(&rc.topo.learnt, rc.now())
}

// checkAsking runs a check on this node after ASKING (a slot being
// migrated to it). ASKING holds for one command only, so the call is EVAL
// (a NOSCRIPT answer could not be followed by EVAL without asking again);
// ASKING and EVAL go in one write.
func (c *Pool) checkAsking(cmd *Command, key string, d []int64, timeout time.Duration) error {
	pre := newCall()
	cl, err := c.roundTrip(pre, askingCmd, cmd, cmd.evalHead, key, timeout, 0)
	if err != nil {
		return err
	}
	if string(pre.line) != "+OK\r\n" {
		return ErrBadReply
	}
	return decode(cl.line, d, cmd)
}

var askingCmd = []byte("*1\r\n$6\r\nASKING\r\n")
