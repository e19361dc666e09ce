package tollgate

// The policies that apply to a request (a policy set): compiled once per
// New, picked per request (policiesFor), each with its prepared Redis call
// and its local shares.

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/usage"
)

// policySet is everything prepared for one combination of policies: the
// top-level limit (if any) plus the rules that matched, in config order.
type policySet struct {
	ps           []*config.Policy
	localsMu     sync.Mutex
	locals       []bucket.Limit // fallback bucket shapes for localsN pods
	localsN      int64
	quoted       []string // `"name"` of each policy
	decisionLen  int      // len of a decision over ps
	cmd          *redis.Command
	policyHeader string
	failClosed   bool       // some policy fails closed
	denied       *denyCache // Redis's refusals still in force, by client key

	// Rules keyed their own way (Policy.Source): ownKeys when some policy
	// is; a call's keys are then written as one string, each policy's key
	// joined to the next by joints[i] (its suffix and the next's length),
	// and cmd has no mid (ownCall).
	ownKeys bool
	joints  []string
	// In a Redis Cluster, a set with rules keyed their own way is charged
	// group by group (decideGroups): groups[g] holds the policies of one
	// identity, at groupPos[g] in the set.
	groups   []*policySet
	groupPos [][]int

	// lease, when not nil, leases the set's requests (lease.go).
	lease *leasing

	// capped when some policy is a concurrency cap (caps.go): cmd
	// is called whole, its keys joined by joints (capCall); give is
	// the give-back's call, of the same keys and args.
	capped bool
	give   *redis.Command

	// Calendar quotas (quota.go): quotas when some policy is one; its
	// call and RateLimit-Policy are then quotaV's (quotaCall), made
	// again, for keys of keyLen bytes, when a window rolls over.
	quotas     bool
	costed     bool           // some policy reads a response cost (costs.go)
	costShapes []*usage.Shape // the distinct shapes of those policies' costs
	costShape  []int          // by policy: its shape's index in costShapes; -1: it reads none, or is a cap (charged nothing)
	readsBody  bool           // one of them reads the body (jsonFields)
	keyLen     int
	quotaMu    sync.Mutex   // held to make a view
	quotaV     atomic.Value // *quotaView
	quotaUntil int64        // monotonic ns: quotaV's end (atomic)

	// Shadow policies (Config.Shadow): shadow when some policy is one;
	// enforce is the set of the others (nil when none), charged on their
	// own when a request is refused by shadow policies alone.
	shadow  bool
	enforce *policySet

	// The hot path's counting (ServeHTTP, one policy): admitted[how] is
	// its count of requests admitted, decided how (redis or local); fewer
	// than nearBelow tokens left is near the limit (a fifth of the burst:
	// 5 x remaining < burst), counted by answer.
	admitted  [3]*int64
	nearBelow int64

	// The hot path's headers (ServeHTTP): plain when an admitted request
	// takes them (IETF headers of one policy, or no headers); then
	// policyValue is the RateLimit-Policy value (nil: no headers) and
	// rPrefix starts the RateLimit value.
	plain       bool
	policyValue []string
	rPrefix     string
}

// newPolicySet prepares ps for client keys of keyLen bytes (headers: see
// withHeaders).
func newPolicySet(ps []*config.Policy, keyLen int) *policySet {
	s := &policySet{ps: ps, policyHeader: policyHeader(ps), decisionLen: bucket.DecisionLen(len(ps)), denied: newDenyCache(maxDenials)}
	var enforce []*config.Policy
	for _, p := range ps {
		s.quoted = append(s.quoted, `"`+p.Name+`"`)
		s.failClosed = s.failClosed || p.FailClosed
		if p.Shadow {
			s.shadow = true
		} else {
			enforce = append(enforce, p)
		}
	}
	s.cmd = newCommand(ps, keyLen)
	for _, p := range ps {
		s.ownKeys = s.ownKeys || p.Source != nil
		s.capped = s.capped || p.Cap != nil
	}
	if s.capped {
		parts := commandParts(ps, keyLen)
		s.give = redis.NewCommand(giveScr, parts.lens, parts.suffixes, parts.args, nil).Whole()
	}
	if s.ownKeys || s.capped {
		s.joints = s.cmd.Joints()
		s.cmd = s.cmd.Whole()
	}
	for _, p := range ps {
		s.quotas = s.quotas || p.Quota != nil
		s.costed = s.costed || p.RespCost != nil
		j := -1
		if p.RespCost != nil {
			if j = usage.IndexOf(s.costShapes, p.RespCost); j < 0 {
				j = len(s.costShapes)
				s.costShapes = append(s.costShapes, p.RespCost)
				s.readsBody = s.readsBody || p.RespCost.Paths != nil
			}
		}
		if p.Cap != nil {
			j = -1 // a cap's slot is charged nothing
		}
		s.costShape = append(s.costShape, j)
	}
	if s.quotas {
		s.keyLen = keyLen
		quotaRoll(s)
	}
	m := ps[0].Metrics
	s.admitted = [3]*int64{&m.N[decidedRedis*nResults+resAllowed], &m.N[decidedLocal*nResults+resAllowed],
		&m.N[decidedLease*nResults+resAllowed]}
	s.nearBelow = (int64(ps[0].Lim.Burst) + 4) / 5
	if s.shadow {
		for _, p := range ps {
			s.denied.shadow = append(s.denied.shadow, p.Shadow)
		}
	}
	if s.capped {
		for _, p := range ps {
			s.denied.capped = append(s.denied.capped, p.Cap != nil)
		}
	}
	if s.quotas {
		for _, p := range ps {
			s.denied.quota = append(s.denied.quota, p.Quota != nil)
		}
	}
	if s.shadow && len(enforce) > 0 {
		s.enforce = newPolicySet(enforce, keyLen)
	}
	return s
}

// withHeaders prepares s's hot-path headers for the headers mode (see
// settings.headers) and returns s.
func withHeaders(s *policySet, headers int) *policySet {
	if s.enforce != nil {
		withHeaders(s.enforce, headers)
	}
	// A rate and its quotas: plain too (serveQuotas).
	s.plain = !s.costed && !s.capped && (headers == 0 || headers == headersIETF) && (len(s.ps) == 1 && !s.quotas || quotasAfter(s.ps))
	if s.plain && headers == headersIETF && !s.quotas {
		s.policyValue = []string{s.policyHeader}
		s.rPrefix = s.quoted[0] + ";r="
	}
	if s.capped && headers == headersIETF {
		s.policyValue = []string{s.policyHeader} // serveCapped's
	}
	return s
}

// shareLocals computes the fallback bucket shapes for n pods. Requires
// s.localsMu held.
func (s *policySet) shareLocals(n int64) {
	locals := make([]bucket.Limit, len(s.ps))
	for i, p := range s.ps {
		locals[i] = localShare(p, n)
	}
	s.locals = locals
	s.localsN = n
}

// localKeys returns the local bucket keys of the client key: one per
// policy.
func (s *policySet) localKeys(key string) []string {
	keys := make([]string, len(s.ps))
	for i, p := range s.ps {
		keys[i] = key + p.KeySuffix
	}
	return keys
}

// planOf returns the index of req's plan in s.plans: the plan planHeader
// names, when it is exactly one known plan name, else defaultPlan (-1:
// the top level). An unknown value is never an error to the client, and
// never a key or a label of its own.
func planOf(s *config.Settings, req *http.Request) int {
	if v := req.Header[s.PlanHeader]; len(v) == 1 {
		if i, ok := s.PlanIndex[v[0]]; ok {
			return i
		}
	}
	return s.DefaultPlan
}

// honour replaces the calls of s, its enforcing part and its groups with
// LeaseScript's that ask for nothing.
func honour(s *policySet, keyLen int) {
	cmd := leaseCommand(commandParts(s.ps, keyLen), "-", 0, 0, 1, false)
	if s.ownKeys {
		cmd = cmd.Whole()
	}
	s.cmd = cmd
	if s.enforce != nil {
		honour(s.enforce, keyLen)
	}
	for _, g := range s.groups {
		honour(g, keyLen)
	}
}

// withGroups splits s, a set with rules keyed their own way, into groups
// for a Redis Cluster: one script's keys must share a slot, and keys of
// different identities hash to different slots. A group holds the
// policies of one identity (the top level's first, then each rule's) and
// one kind, enforcing or shadow: an enforcing policy's charge never hangs
// on a shadow one's in the same script.
func withGroups(s *policySet, keyLen int) {
	for _, shadow := range []bool{false, true} {
		var top []*config.Policy
		var topPos []int
		for i, p := range s.ps {
			if p.Source == nil && p.Shadow == shadow {
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
	// A rule keyed its own way is a group with its quotas (which share
	// its identity, hence its slot).
	for i := 0; i < len(s.ps); i++ {
		p := s.ps[i]
		if p.Source == nil {
			continue
		}
		ps, pos := []*config.Policy{p}, []int{i}
		for i+1 < len(s.ps) && (s.ps[i+1].Quota != nil || s.ps[i+1].Cap != nil) && s.ps[i+1].Source == p.Source {
			i++
			ps, pos = append(ps, s.ps[i]), append(pos, i)
		}
		s.groups = append(s.groups, newPolicySet(ps, keyLen))
		s.groupPos = append(s.groupPos, pos)
	}
	if s.enforce != nil && s.enforce.ownKeys {
		withGroups(s.enforce, keyLen)
	}
}

// quotasAfter reports whether ps is one policy and its quotas, or
// quotas alone.
func quotasAfter(ps []*config.Policy) bool {
	for i, p := range ps {
		if i > 0 && p.Quota == nil {
			return false
		}
	}
	return true
}

// policyHeader is the RateLimit-Policy value of ps.
func policyHeader(ps []*config.Policy) string {
	items := make([]string, len(ps))
	for i, p := range ps {
		items[i] = policyItem(p, p.PeriodSecs)
	}
	return strings.Join(items, ", ")
}

// policyItem is p's item in RateLimit-Policy, its window w seconds long.
func policyItem(p *config.Policy, w int64) string {
	if p.Cap != nil {
		return `"` + p.Name + `";q=` + strconv.FormatInt(p.Average, 10) + `;qu="concurrent-requests"`
	}
	return `"` + p.Name + `";q=` + strconv.FormatInt(p.Average, 10) + ";w=" + strconv.FormatInt(w, 10)
}

// quotaView is what a set with quotas calls and declares until one of its
// windows rolls over (until, µs since EpochUS on the quotas' clock).
type quotaView struct {
	cmd          *redis.Command
	policyHeader string
	policyValue  []string // policyHeader, for a header map's assignment
	until        int64
}

// quotaCall returns the view of s, a set with quotas, now: read without a
// lock until the monotonic clock passes the view's end (quotaUntil), then
// made again under quotaMu. (The view's end on the monotonic clock: a wall
// clock stepped meanwhile moves it by the step, and the script picks the
// window on Redis's TIME whatever the view.)
func quotaCall(s *policySet) *quotaView {
	if int64(time.Since(processStart))+monoOrigin < atomic.LoadInt64(&s.quotaUntil) { // clock.Mono(), inlined
		return s.quotaV.Load().(*quotaView)
	}
	return quotaRoll(s)
}

// quotaRoll is quotaCall when a window may have rolled over.
func quotaRoll(s *policySet) *quotaView {
	s.quotaMu.Lock()
	defer s.quotaMu.Unlock()
	now := quotaNow()
	us := quotaUS(now)
	v, _ := s.quotaV.Load().(*quotaView)
	if v == nil || us >= v.until {
		v = quotaViewAt(s, now)
		s.quotaV.Store(v)
	}
	atomic.StoreInt64(&s.quotaUntil, int64(time.Since(processStart))+monoOrigin+(v.until-us)*1000)
	return v
}

// quotaViewAt prepares the call and the RateLimit-Policy of s at now.
func quotaViewAt(s *policySet, now time.Time) *quotaView {
	v := &quotaView{until: -1}
	parts := commandParts(s.ps, s.keyLen)
	items := make([]string, len(s.ps))
	for i, p := range s.ps {
		if p.Quota == nil {
			items[i] = policyItem(p, p.PeriodSecs)
			continue
		}
		b := quotaWindow(p.Quota, now)
		parts.args[3*i+1] = bucket.WindowsArg(b, quotaShiftUS)
		items[i] = policyItem(p, bucket.WindowSeconds(b[1], b[2]))
		if v.until < 0 || b[2] < v.until {
			v.until = b[2]
		}
	}
	v.cmd = redis.NewCommand(bucketScr, parts.lens, parts.suffixes, parts.args, bucket.CheckDecision)
	if s.ownKeys || s.capped {
		v.cmd = v.cmd.Whole()
	}
	v.policyHeader = strings.Join(items, ", ")
	v.policyValue = []string{v.policyHeader}
	return v
}

// capCall writes the call of set's keys for member: each key, a cap's
// followed by #member, joined by set.joints.
func capCall(set *policySet, keys []string, member string) string {
	b := make([]byte, 0, 48*len(keys))
	for i, p := range set.ps {
		if i > 0 {
			b = append(b, set.joints[i-1]...)
		}
		b = append(b, keys[i]...)
		if p.Cap != nil {
			b = append(append(b, '#'), member...)
		}
	}
	return string(b)
}

// matches reports whether a rule applies to req.
func matches(p *config.Policy, req *http.Request) bool {
	if !strings.HasPrefix(req.URL.Path, p.PathPrefix) {
		return false
	}
	if len(p.Methods) == 0 {
		return true
	}
	for _, m := range p.Methods {
		if strings.EqualFold(m, req.Method) {
			return true
		}
	}
	return false
}
