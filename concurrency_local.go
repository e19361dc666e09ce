package tollgate

// Concurrency caps without Redis (concurrency.go): each pod holds the
// slots of a cap's key itself, at most max over the pods counted (at
// least 1), in its local store, given back when next returns.

// takeHeld is takeLocal for a set with caps (lims: its local shapes for
// n pods): each cap's slot taken in the local store, at most max/n (at
// least 1) per key, before the buckets; a full cap refuses and charges
// nothing (its rates' items show their local burst), a bucket's refusal
// gives the slots back.
func takeHeld(t *Tollgate, set *policySet, keys []string, lims []limit, n int64, d []int64) int {
	lb := t.local
	caps := make([]int64, len(set.ps))
	ck := make([]string, len(set.ps))
	for i, p := range set.ps {
		if p.conc == nil {
			continue
		}
		caps[i] = p.conc.max / n
		if caps[i] < 1 {
			caps[i] = 1
		}
		ck[i] = keys[i]
		if p.conc.class != "" {
			ck[i] = p.conc.class + p.keySuffix
		}
	}
	full := lb.hold(ck, caps, d)
	if full >= 0 {
		d[0] = 0
		for i, p := range set.ps {
			if p.conc == nil {
				d[1+3*i], d[2+3*i], d[3+3*i] = int64(lims[i].burst), 0, 0
			}
		}
		d[2+3*full] = concRetryMS
		return decidedLocal
	}
	left := append([]int64(nil), d...) // hold's slots left, by cap
	t.local.take(keys, lims, d)
	if set.quotas {
		localQuotas(set, d)
	}
	for i, p := range set.ps {
		if p.conc != nil {
			d[1+3*i], d[2+3*i], d[3+3*i] = left[1+3*i], 0, 0
			if d[0] != 1 {
				lb.unhold(ck[i])
				d[1+3*i]++
			}
		}
	}
	return decidedLocal
}

// hold takes a slot of every key of keys that is not "" (at most caps[i]
// held at once), all or none; d receives each one's slots left. It
// returns the index of a full one (none taken), or -1.
func (lb *localBuckets) hold(keys []string, caps []int64, d []int64) int {
	lb.heldMu.Lock()
	defer lb.heldMu.Unlock()
	for i, k := range keys {
		if k != "" && lb.held[k] >= caps[i] {
			for j, kj := range keys {
				if kj != "" {
					d[1+3*j] = caps[j] - lb.held[kj]
					if d[1+3*j] < 0 {
						d[1+3*j] = 0
					}
				}
			}
			return i
		}
	}
	for i, k := range keys {
		if k != "" {
			lb.held[k]++
			d[1+3*i] = caps[i] - lb.held[k]
			if d[1+3*i] < 0 {
				d[1+3*i] = 0
			}
		}
	}
	return -1
}

// unhold gives back a slot of key taken by hold.
func (lb *localBuckets) unhold(key string) {
	lb.heldMu.Lock()
	if lb.held[key] <= 1 {
		delete(lb.held, key)
	} else {
		lb.held[key]--
	}
	lb.heldMu.Unlock()
}
