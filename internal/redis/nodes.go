package redis

// The nodes a topology uses: which one serves a key, new ones made on
// first use, the ones no longer named forgotten.

// route returns the client for key, or nil while the topology is unknown.
func (rc *Client) route(key string) *Pool {
	slot := 0
	if rc.opts.Mode == Cluster {
		slot = KeySlot(key)
	}
	t := &rc.topo
	t.mu.Lock()
	c := t.primary
	if rc.opts.Mode == Cluster && t.slots != nil {
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
// Requires that rc.topo.mu is held.
func (rc *Client) node(addr string, learnt bool) *Pool {
	if c, ok := rc.topo.nodes[addr]; ok {
		if learnt {
			rc.topo.unmarkExtra(addr)
		}
		return c
	}
	c := rc.newPool(addr)
	rc.topo.nodes[addr] = c
	if !learnt {
		rc.topo.extra = append(rc.topo.extra, addr)
		if len(rc.topo.extra) > maxExtraNodes {
			rc.topo.forgetNode(rc.topo.extra[0])
			rc.topo.extra = rc.topo.extra[1:]
		}
	}
	c.Warm()
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
// forgets them. Requires that rc.topo.mu is held.
func (rc *Client) forget(keep map[*Pool]bool) {
	rc.topo.extra = nil

	for addr, c := range rc.topo.nodes {
		if !keep[c] {
			c.forget()
			delete(rc.topo.nodes, addr)
		}
	}
}

// Pools returns the pools of every node in use.
func (rc *Client) Pools() []*Pool {
	if rc.pool != nil {
		return []*Pool{rc.pool}
	}
	rc.topo.mu.Lock()
	defer rc.topo.mu.Unlock()
	cs := make([]*Pool, 0, len(rc.topo.nodes))
	for _, c := range rc.topo.nodes {
		cs = append(cs, c)
	}
	return cs
}

// SuspectAll makes every node's connections prove themselves (a PING)
// before they carry a check again: something (the breaker opening) says
// Redis may have restarted or failed over since they last answered.
func (rc *Client) SuspectAll() {
	for _, c := range rc.Pools() {
		c.suspect()
	}
}
