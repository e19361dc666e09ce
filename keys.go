package tollgate

// Which buckets a request is charged to, beyond the common case (decide):
// its plan's top-level policy (Config.Plans, planOf) and rules that key
// clients their own way (Rule.SourceCriterion, ownCall). A login rule
// keyed by IP while the top level keys by API key gives a client that
// rotates API keys nothing: its login bucket is its address's.

import (
	"net/http"
)

// planOf returns the index of req's plan in s.plans: the plan planHeader
// names, when it is exactly one known plan name, else defaultPlan (-1:
// the top level). An unknown value is never an error to the client, and
// never a key or a label of its own.
func (s *settings) planOf(req *http.Request) int {
	if v := req.Header[s.planHeader]; len(v) == 1 {
		if i, ok := s.planIndex[v[0]]; ok {
			return i
		}
	}
	return s.defaultPlan
}

// ownCall returns the keys of a call over set, whose rules key clients
// their own way, written as one string (policySet.joints): key for the
// policies keyed as the top level, the rule's own identity's for the
// others (unsharded), so that they are all charged in one script, all or
// nothing (decideAny).
func ownCall(t *Tollgate, set *policySet, req *http.Request, key string) string {
	keys := ownKeys(t, set, req, key)
	call := keys[0]
	for i, j := range set.joints {
		call += j + keys[i+1]
	}
	return call
}

// ownKeys returns each policy's client key: the rule's own identity's, or
// key.
func ownKeys(t *Tollgate, set *policySet, req *http.Request, key string) []string {
	keys := make([]string, len(set.ps))
	for i, p := range set.ps {
		keys[i] = key
		if p.source != nil {
			keys[i] = clientKey(t.set.class, p.source.identity(req))
		}
	}
	return keys
}

// fallbackOwn is fallback for a set whose rules key clients their own way
// (key: the top level's unsharded client key).
func fallbackOwn(t *Tollgate, set *policySet, req *http.Request, key string, d []int64) int {
	if set.failClosed {
		return decidedUnavailable
	}
	keys := ownKeys(t, set, req, key)
	for i, p := range set.ps {
		keys[i] += p.keySuffix
	}
	return takeLocal(t, set, keys, d)
}

// fallbackFor is the fallback's decision for req over set, whoever keys it.
func fallbackFor(t *Tollgate, set *policySet, req *http.Request, d []int64) int {
	key := clientKey(t.set.class, t.set.source.identity(req))
	if set.ownKeys {
		return fallbackOwn(t, set, req, key, d)
	}
	return fallback(t, set, key, d)
}

// withGroups splits s, a set with rules keyed their own way, into groups
// for a Redis Cluster: one script's keys must share a slot, and keys of
// different identities hash to different slots. A group holds the
// policies of one identity (the top level's first, then each rule's) and
// one kind, enforcing or shadow: an enforcing policy's charge never hangs
// on a shadow one's in the same script.
func withGroups(s *policySet, keyLen int) {
	for _, shadow := range []bool{false, true} {
		var top []*policy
		var topPos []int
		for i, p := range s.ps {
			if p.source == nil && p.shadow == shadow {
				top = append(top, p)
				topPos = append(topPos, i)
			}
		}
		if len(top) > 0 {
			s.groups = append(s.groups, newPolicySet(top, keyLen))
			s.groupPos = append(s.groupPos, topPos)
		}
	}
	// (Appended one by one, never prepended: Yaegi's test mode cannot
	// compile a slice literal of a type that holds a slice of itself.)
	for i, p := range s.ps {
		if p.source != nil {
			s.groups = append(s.groups, newPolicySet([]*policy{p}, keyLen))
			s.groupPos = append(s.groupPos, []int{i})
		}
	}
	if s.enforce != nil && s.enforce.ownKeys {
		withGroups(s.enforce, keyLen)
	}
}

// decideGroups is decideAny in a Redis Cluster, for a set whose rules key
// clients their own way: each group is charged in a script of its own,
// every group every time, and the request passes when every group admits
// it. So a request one group refuses still took its
// tokens from the groups that admitted it: the all-or-nothing of one
// script holds within a group, not across identities. It returns the least
// global decision (local, then cache, then redis), or decidedUnavailable
// when an enforcing group fails closed. A shadow group that fails closed
// is a shadow refusal (its wait: the probe interval), so that the
// enforcing groups, decided and charged on their own, decide the request.
// In a refusal, a group that admitted shows no wait (as a bucket that fits
// does in one script's refusal): only the refusing policies name one.
func decideGroups(t *Tollgate, set *policySet, req *http.Request, d []int64) int {
	how := decidedRedis
	unavailable := false
	d[0] = 1
	admittedBy := make([]bool, len(set.groups))
	for gi, g := range set.groups {
		gd := make([]int64, g.decisionLen)
		ghow := decideAny(t, g, req, gd)
		if ghow == decidedUnavailable {
			if !g.shadow {
				unavailable = true
				continue
			}
			gd[0] = 0
			for k := range g.ps {
				gd[1+3*k], gd[2+3*k], gd[3+3*k] = 0, t.set.redis.probeNS/1e6, t.set.redis.probeNS/1e6
			}
			ghow = decidedLocal
		}
		if ghow == decidedLocal || ghow == decidedCache && how == decidedRedis {
			how = ghow
		}
		if gd[0] != 1 {
			d[0] = 0
		}
		admittedBy[gi] = gd[0] == 1
		for k, i := range set.groupPos[gi] {
			copy(d[1+3*i:4+3*i], gd[1+3*k:4+3*k])
		}
	}
	if d[0] != 1 {
		for gi := range set.groups {
			if admittedBy[gi] {
				for _, i := range set.groupPos[gi] {
					d[2+3*i] = 0
				}
			}
		}
	}
	if unavailable {
		return decidedUnavailable
	}
	return how
}
