package redis

// Redis Cluster: which node owns a key (see topology.go for when the map is
// learnt and how redirections are followed).

import (
	"errors"
	"fmt"
	"net"
	"strconv"

	redigo "github.com/gomodule/redigo/redis"
)

// slotRange is one entry of CLUSTER SLOTS: slots first..last served by the
// primary at addr.
type slotRange struct {
	first, last int
	addr        string
}

// loadSlots asks the known nodes, then the seeds, for CLUSTER SLOTS and
// installs the first answer.
func (rc *Client) loadSlots() error {
	rc.topo.mu.Lock()
	var candidates []string
	for addr := range rc.topo.nodes {
		candidates = append(candidates, addr)
	}
	rc.topo.mu.Unlock()
	candidates = append(candidates, rc.opts.Endpoints...)
	err := errors.New("no seed node")
	for _, addr := range candidates {
		var ranges []slotRange
		if ranges, err = rc.clusterSlots(addr); err != nil {
			continue
		}
		slots := make([]*Pool, clusterSlots)
		keep := map[*Pool]bool{}
		rc.topo.mu.Lock()
		for _, r := range ranges {
			c := rc.node(r.addr, true)
			keep[c] = true
			for s := r.first; s <= r.last; s++ {
				slots[s] = c
			}
		}
		changed := rc.topo.slots == nil
		for i := 0; !changed && i < clusterSlots; i++ {
			changed = rc.topo.slots[i] != slots[i]
		}
		rc.topo.slots = slots
		rc.forget(keep)
		rc.topo.mu.Unlock()
		if changed {
			rc.SuspectAll() // a failover: a node's connections may be to its old role
			rc.hooks.changed()
		}
		return nil
	}
	return fmt.Errorf("reading the cluster's slots: %w", err)
}

// clusterSlots runs CLUSTER SLOTS on addr and checks its reply: each entry
// is [first, last, [host, port, ...], replicas...]; an empty host is
// addr's.
func (rc *Client) clusterSlots(addr string) ([]slotRange, error) {
	entries, err := redigo.Values(adminDo(&rc.opts, addr, rc.opts.Username, rc.opts.Password, 0, "CLUSTER", "SLOTS"))
	if err != nil {
		return nil, fmt.Errorf("%q: %w", addr, err)
	}
	if len(entries) == 0 {
		return nil, fmt.Errorf("%q: CLUSTER SLOTS is empty (no slot assigned)", addr)
	}
	bad := func(what string, v interface{}) error {
		return fmt.Errorf("%q: %w: CLUSTER SLOTS %s: %q", addr, ErrBadReply, what, fmt.Sprint(v))
	}
	var ranges []slotRange
	for _, e := range entries {
		f, err := redigo.Values(e, nil)
		if err != nil || len(f) < 3 {
			return nil, bad("entry", e)
		}
		first, err1 := redigo.Int(f[0], nil)
		last, err2 := redigo.Int(f[1], nil)
		if err1 != nil || err2 != nil || first < 0 || last < first || last >= clusterSlots {
			return nil, bad("range", f[:2])
		}
		n, err := redigo.Values(f[2], nil)
		if err != nil || len(n) < 2 {
			return nil, bad("node", f[2])
		}
		host, err1 := redigo.String(n[0], nil)
		port, err2 := redigo.Int(n[1], nil)
		if err1 != nil || err2 != nil || port <= 0 || port > 65535 {
			return nil, bad("node", n)
		}
		if host == "" || host == "?" {
			host, _, _ = net.SplitHostPort(addr)
		}
		ranges = append(ranges, slotRange{first: first, last: last, addr: net.JoinHostPort(host, strconv.Itoa(port))})
	}
	return ranges, nil
}
