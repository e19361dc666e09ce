package tollgate

// Calendar quotas (Config.Quotas): a counter per client and calendar
// window, charged in the bucket script beside the rates, all or nothing.
//
// A quota is one more policy of its owner's sets (the top level's, a
// plan's, a rule's), after the owner, keyed as the owner keys its
// clients. Its call passes the limit, the request's cost and the bounds
// of the previous, current and next windows (quota_window.go, from the
// pod's clock); the script picks the window that holds Redis's TIME, so
// a pod whose clock is off by less than a window counts in the right
// one. Its counter is the key <policy key>@<window start, s> and expires
// a minute after its window ends. The set's call and RateLimit-Policy
// are made again when a window rolls over (quotaCall). Redis unavailable,
// a quota is not counted (failureMode open admits, closed answers 503).

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// maxQuotas bounds the quotas of one owner.
const maxQuotas = 8

// maxQuotaLimit bounds a quota's limit: the script's numbers stay exact.
const maxQuotaLimit = 1000000000000

// quotaShape is a quota's calendar: its limit, window and zone, and the
// windows around the last instant asked (window).
type quotaShape struct {
	limit  int64
	kind   int
	loc    *time.Location
	mu     sync.Mutex
	bounds []int64 // windowBounds at the last look; nil before the first
}

// quotaShiftUS moves the quotas' clock, the pod's and the script's alike,
// by that many µs: for tests (a DST day on a real redis-server). No
// configuration sets it.
var quotaShiftUS int64

// quotaNow is the quotas' clock: the wall clock, shifted by quotaShiftUS.
func quotaNow() time.Time {
	return time.Now().Add(time.Duration(quotaShiftUS) * time.Microsecond)
}

// window returns the bounds of the windows around now (windowBounds),
// computed again only when now has left the current one.
func (q *quotaShape) window(now time.Time) []int64 {
	us := now.UnixMicro() - epochUS
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.bounds == nil || us < q.bounds[1] || us >= q.bounds[2] {
		b := windowBounds(q.kind, q.loc, now)
		q.bounds = []int64{b[0], b[1], b[2], b[3]}
	}
	return q.bounds
}

// compileQuotas compiles the quotas of one owner (field: "quotas",
// "plans[i].quotas", "rules[i].quotas"): each a policy charged with the
// owner's cost, failure mode, shadow and client identity, its key the
// client's plus suffix (a rule's own: "" for the top level and plans)
// and its name; owner nil is the top level without a rate (cost,
// failClosed, shadow given). names holds the names taken (class, rules,
// plans): a quota may take none of them, nor one of its owner's.
func compileQuotas(field string, qs []Quota, owner *policy, suffix string, cost int64, failClosed, shadow bool, names map[string]bool) ([]*policy, error) {
	if len(qs) > maxQuotas {
		return nil, fmt.Errorf("%s: %d quotas, at most %d are allowed", field, len(qs), maxQuotas)
	}
	var source *sourceCriterion
	if owner != nil {
		cost, failClosed, shadow = int64(owner.lim.cost), owner.failClosed, owner.shadow
		source = owner.source
	}
	own := map[string]bool{}
	var out []*policy
	for i, q := range qs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := checkName(f+".name", q.Name); err != nil {
			return nil, err
		}
		if names[q.Name] || own[q.Name] || owner != nil && owner.name == q.Name {
			return nil, fmt.Errorf("%s.name: %q is used twice (quotas, plans, rules and the class share one namespace)", f, q.Name)
		}
		own[q.Name] = true
		if q.Limit <= 0 || q.Limit > maxQuotaLimit {
			return nil, fmt.Errorf("%s.limit: %d must be from 1 to %d", f, q.Limit, int64(maxQuotaLimit))
		}
		if q.Limit < cost {
			return nil, fmt.Errorf("%s.limit: %d is less than the cost %d: no request could ever pass", f, q.Limit, cost)
		}
		kind, err := parseWindow(f+".window", q.Window)
		if err != nil {
			return nil, err
		}
		loc, err := loadZone(f+".timezone", q.Timezone)
		if err != nil {
			return nil, err
		}
		p := &policy{
			name:       q.Name,
			keySuffix:  suffix + ":" + q.Name,
			lim:        limit{interval: 1e-3, burst: float64(q.Limit), cost: float64(cost)},
			average:    q.Limit,
			periodSecs: 1,
			failClosed: failClosed,
			shadow:     shadow,
			source:     source,
			quota:      &quotaShape{limit: q.Limit, kind: kind, loc: loc},
		}
		p.shard = p.lim
		out = append(out, p)
	}
	return out, nil
}

// compileAllQuotas compiles the quotas of the top level, the plans and
// the rules into s. names holds the rules' names. A quota takes no name
// of the class, a rule or a plan; a rule's, none of another quota's
// either (they would meet in one set); plans may repeat the top level's
// names and each other's (never in one set), and share their counters.
func compileAllQuotas(cfg *Config, s *settings, topClosed bool, names map[string]bool) error {
	if !hasAnyQuota(cfg) {
		return nil
	}
	if s.shards > 1 {
		return errors.New("quotas: not with shards (a quota counts the client's whole window in one counter)")
	}
	base := map[string]bool{s.class: true}
	for n := range names {
		base[n] = true
	}
	for n := range s.planIndex {
		base[n] = true
	}
	taken := map[string]bool{}
	for n := range base {
		taken[n] = true
	}
	var err error
	if s.topQuotas, err = compileQuotas("quotas", cfg.Quotas, s.top, "", orDefault(cfg.Cost, defaultCost), topClosed, cfg.Shadow, base); err != nil {
		return err
	}
	for _, q := range s.topQuotas {
		taken[q.name] = true
	}
	s.planQuotas = make([][]*policy, len(s.plans))
	for i, pl := range cfg.Plans {
		field, p := fmt.Sprintf("plans[%d].quotas", i), s.plans[i]
		if p == nil {
			if len(pl.Quotas) > 0 {
				return fmt.Errorf("%s: the plan is unlimited, its quotas would count nothing: set average, or no quotas", field)
			}
			continue
		}
		qs := pl.Quotas
		if qs == nil {
			field, qs = "quotas", cfg.Quotas // the top level's, charged as the plan
		}
		if s.planQuotas[i], err = compileQuotas(field, qs, p, "", 0, false, false, base); err != nil {
			return err
		}
		for _, q := range s.planQuotas[i] {
			taken[q.name] = true
		}
	}
	s.ruleQuotas = make([][]*policy, len(s.rules))
	for i, r := range s.rules {
		if s.ruleQuotas[i], err = compileQuotas(fmt.Sprintf("rules[%d].quotas", i), cfg.Rules[i].Quotas, r, r.keySuffix, 0, false, false, taken); err != nil {
			return err
		}
		for _, q := range s.ruleQuotas[i] {
			taken[q.name] = true
		}
	}
	return nil
}

// withQuotas returns p followed by its quotas (qs[i] of p at i, or the
// top level's when p is the top level).
func (s *settings) withQuotas(p *policy, qs [][]*policy, i int) []*policy {
	ps := []*policy{p}
	if qs != nil {
		ps = append(ps, qs[i]...)
	}
	return ps
}

// hasAnyQuota reports whether cfg sets a quota anywhere.
func hasAnyQuota(cfg *Config) bool {
	n := len(cfg.Quotas)
	for _, p := range cfg.Plans {
		n += len(p.Quotas)
	}
	for _, r := range cfg.Rules {
		n += len(r.Quotas)
	}
	return n > 0
}

// hasQuotas reports whether s has a quota.
func (s *settings) hasQuotas() bool {
	for _, p := range s.policies() {
		if p.quota != nil {
			return true
		}
	}
	return false
}

// policies returns every policy of s: the rules, the top level, the
// plans, and their quotas.
func (s *settings) policies() []*policy {
	var out []*policy
	for i, p := range s.rules {
		out = append(out, s.withQuotas(p, s.ruleQuotas, i)...)
	}
	out = append(out, s.topPolicies()...)
	for i, p := range s.plans {
		if p != nil {
			out = append(out, s.withQuotas(p, s.planQuotas, i)...)
		}
	}
	return out
}

// topPolicies is the set of a request with no plan and no rule: the
// top-level rate and its quotas, or nil.
func (s *settings) topPolicies() []*policy {
	var ps []*policy
	if s.top != nil {
		ps = append(ps, s.top)
	}
	ps = append(ps, s.topQuotas...)
	if len(ps) == 0 {
		return nil
	}
	return ps
}

// quotaView is what a set with quotas calls and declares until one of its
// windows rolls over (until, µs since epochUS on the quotas' clock).
type quotaView struct {
	cmd          *redis.Command
	policyHeader string
	until        int64
}

// quotaCall returns the view of s, a set with quotas, now.
func quotaCall(s *policySet) *quotaView {
	now := quotaNow()
	us := now.UnixMicro() - epochUS
	s.quotaMu.Lock()
	defer s.quotaMu.Unlock()
	if s.quotaV == nil || us >= s.quotaV.until {
		s.quotaV = quotaViewAt(s, now)
	}
	return s.quotaV
}

// quotaViewAt prepares the call and the RateLimit-Policy of s at now.
func quotaViewAt(s *policySet, now time.Time) *quotaView {
	v := &quotaView{until: -1}
	parts := commandParts(s.ps, s.keyLen)
	items := make([]string, len(s.ps))
	for i, p := range s.ps {
		if p.quota == nil {
			items[i] = policyItem(p, p.periodSecs)
			continue
		}
		b := p.quota.window(now)
		parts.args[3*i+1] = strconv.FormatInt(b[0], 10) + " " + strconv.FormatInt(b[1], 10) + " " +
			strconv.FormatInt(b[2], 10) + " " + strconv.FormatInt(b[3], 10) + " " + strconv.FormatInt(quotaShiftUS, 10)
		items[i] = policyItem(p, windowSeconds(b[1], b[2]))
		if v.until < 0 || b[2] < v.until {
			v.until = b[2]
		}
	}
	v.cmd = redis.NewCommand(bucket, parts.lens, parts.suffixes, parts.args, checkDecision)
	if s.ownKeys {
		v.cmd = v.cmd.Whole()
	}
	v.policyHeader = strings.Join(items, ", ")
	return v
}

// quotaSecs is the length of p's current window in seconds (a quota), or
// its period's (a rate).
func quotaSecs(p *policy) int64 {
	if p.quota == nil {
		return p.periodSecs
	}
	b := p.quota.window(quotaNow())
	return windowSeconds(b[1], b[2])
}

// localQuotas fills in what the local fallback left of the quotas of set
// in d: a quota is not counted without Redis, so its item shows the limit
// and the time to its window's end (the pod's clock).
func localQuotas(set *policySet, d []int64) {
	now := quotaNow()
	us := now.UnixMicro() - epochUS
	for i, p := range set.ps {
		if p.quota == nil {
			continue
		}
		b := p.quota.window(now)
		d[1+3*i] = p.quota.limit
		d[2+3*i] = 0
		d[3+3*i] = (b[2] - us + 999) / 1000
	}
}
