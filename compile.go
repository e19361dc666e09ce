package tollgate

// What New compiles from a Config: the validated settings a Tollgate runs
// on (settings; its policies: policy.go; its Redis: redissettings.go), with
// each default filled in from config.go's constants.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/regions"
)

// Header modes.
const (
	headersIETF    = 1
	headersLegacy  = 2
	headersDraft07 = 4 // the RateLimit headers' draft 07 form (one policy)
)

// settings is a validated, compiled Config.
type settings struct {
	class     string
	headerTag string  // class, NUL, "h:": what a header identity is hashed after (clientKey)
	byHeader  bool    // clients keyed by a header (source.header), not sharded: decide's common case
	top       *policy // nil when Average is 0
	rules     []*policy
	// Plans (Config.Plans): plans[i] replaces top for the clients of plan
	// i (nil: unlimited), named by planHeader's value (planIndex); a
	// request without a known plan has defaultPlan (-1: top).
	plans       []*policy
	planIndex   map[string]int
	planHeader  string
	defaultPlan int
	exempt      []*net.IPNet // ExemptSourceRange
	ownKeys     bool         // some rule keys its clients its own way (policy.source)
	source      sourceCriterion
	headers     int
	decision    string // DecisionHeader, canonical; "" when off
	redis       redisSettings
	replicas    int64 // Replicas: the fallback's divisor until a heartbeat count is seen
	shards      int64 // sub-buckets per client bucket; 1: not sharded
	digits      int   // width of the shard number in keys
	keyLen      int   // length of a client key in Redis (sharded or not)
	leases      bool  // the top level or a plan leases (lease.go): every call honours leases
	// Quotas (quota.go), charged with their owner: the top level's (also
	// with no top-level rate), plans[i]'s and rules[i]'s. (Not in policy:
	// Yaegi refuses a struct type that holds a slice of itself.)
	topQuotas   []*policy
	planQuotas  [][]*policy
	ruleQuotas  [][]*policy
	region      *regions.Settings // nil without regions (region.go)
	regionPeers []redisSettings   // the peers' Redis, in region.Peers' order
}

// checkMetricsOnly refuses a serveMetrics middleware that also configures
// a limit: it would apply none.
func checkMetricsOnly(cfg *Config) error {
	if err := checkWords(cfg); err != nil {
		return err
	}
	switch {
	case cfg.Average != 0:
		return fmt.Errorf("serveMetrics: a metrics endpoint applies no limit, but average is %d (put the limit on a middleware of its own)", cfg.Average)
	case len(cfg.Rules) > 0:
		return fmt.Errorf("serveMetrics: a metrics endpoint applies no limit, but %d rules are set (put them on a middleware of its own)", len(cfg.Rules))
	case cfg.Shadow:
		return errors.New("serveMetrics: a metrics endpoint applies no limit, but shadow is set")
	}
	return nil
}

// compile validates cfg and prepares everything ServeHTTP needs.
func compile(cfg *Config, name string) (*settings, error) {
	if cfg == nil {
		return nil, errors.New("no configuration")
	}
	if err := checkWords(cfg); err != nil {
		return nil, err
	}
	s := &settings{}
	if len(cfg.MetricsClasses) > 0 {
		return nil, errors.New("metricsClasses: set, but serveMetrics is not (it restricts what a metrics endpoint serves)")
	}
	if cfg.Class != "" {
		if err := checkName("class", cfg.Class); err != nil {
			return nil, err
		}
		s.class = cfg.Class
	} else {
		s.class = sanitizeName(name)
	}
	s.headerTag = s.class + "\x00h:"
	for _, f := range []struct {
		name string
		v    int64
	}{{"average", cfg.Average}, {"burst", cfg.Burst}, {"cost", cfg.Cost}, {"replicas", cfg.Replicas}, {"shards", cfg.Shards}} {
		if err := nonNegative(f.name, f.v); err != nil {
			return nil, err
		}
	}
	s.replicas = orDefault(cfg.Replicas, defaultReplicas)
	s.shards = orDefault(cfg.Shards, defaultShards)
	if s.shards > maxShards {
		return nil, fmt.Errorf("shards: %d is more than %d", s.shards, maxShards)
	}
	s.keyLen = len(clientKey("", ""))
	if s.shards > 1 {
		s.digits = len(strconv.FormatInt(s.shards-1, 10))
		s.keyLen += 1 + s.digits
	}
	period := cfg.Period
	if strings.TrimSpace(period) == "" {
		period = defaultPeriod
	}
	topClosed, err := failureMode("failureMode", cfg.FailureMode, false)
	if err != nil {
		return nil, err
	}
	if cfg.Average > 0 {
		p, err := compileLimit("", cfg.Average, period, cfg.Burst, cfg.Cost)
		if err != nil {
			return nil, err
		}
		p.name = s.class
		p.failClosed = topClosed
		p.shadow = cfg.Shadow
		if p.lease, err = compileLease("lease", cfg.Lease); err != nil {
			return nil, err
		}
		s.top = p
	} else if _, err := positiveDuration("period", period); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, r := range cfg.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		if err := checkName(field+".name", r.Name); err != nil {
			return nil, err
		}
		if seen[r.Name] || r.Name == s.class {
			return nil, fmt.Errorf("%s.name: %q is used twice (the class %q names the top-level policy)", field, r.Name, s.class)
		}
		seen[r.Name] = true
		rp := r.Period
		if strings.TrimSpace(rp) == "" {
			rp = period
		}
		p, err := compileLimit(field+".", r.Average, rp, r.Burst, orDefault(r.Cost, orDefault(cfg.Cost, defaultCost)))
		if err != nil {
			return nil, err
		}
		if p.failClosed, err = failureMode(field+".failureMode", r.FailureMode, topClosed); err != nil {
			return nil, err
		}
		if p.shadow, err = shadowMode(field+".shadow", r.Shadow, cfg.Shadow); err != nil {
			return nil, err
		}
		if r.SourceCriterion != nil {
			src, err := compileSource(r.SourceCriterion)
			if err != nil {
				return nil, fmt.Errorf("%s.%w", field, err)
			}
			p.source = &src
			s.ownKeys = true
		}
		p.name = r.Name
		p.keySuffix = ":" + r.Name
		p.pathPrefix = r.PathPrefix
		p.methods = compileMethods(r.Methods)
		s.rules = append(s.rules, p)
	}
	if err := compilePlans(cfg, s, period, topClosed, seen); err != nil {
		return nil, err
	}
	if err := compileAllQuotas(cfg, s, topClosed, seen); err != nil {
		return nil, err
	}
	if err := s.withCaps(cfg, topClosed); err != nil {
		return nil, err
	}
	if err := compileResponseCosts(cfg, s); err != nil {
		return nil, err
	}
	for _, p := range append(append(s.rules, s.top), s.plans...) {
		if p == nil || p.source != nil { // a rule keyed its own way has one key, never sharded
			continue
		}
		if err := p.split(s.shards); err != nil {
			return nil, err
		}
	}
	if s.exempt, err = parseCIDRs("exemptSourceRange", cfg.ExemptSourceRange); err != nil {
		return nil, err
	}
	if len(s.rules) > maxRules {
		return nil, fmt.Errorf("rules: %d rules, at most %d are allowed", len(s.rules), maxRules)
	}

	switch strings.ToLower(strings.TrimSpace(cfg.Headers)) {
	case "", "ietf":
		s.headers = headersIETF
	case "legacy":
		s.headers = headersLegacy
	case "both":
		s.headers = headersIETF | headersLegacy
	case "draft07":
		s.headers = headersDraft07
	case "none":
		s.headers = 0
	default:
		return nil, fmt.Errorf("headers: %q is not ietf, legacy, both, draft07 or none", cfg.Headers)
	}
	if h := strings.TrimSpace(cfg.DecisionHeader); h != "" {
		if !validHeaderName(h) {
			return nil, fmt.Errorf("decisionHeader: %q is not a header name", cfg.DecisionHeader)
		}
		s.decision = http.CanonicalHeaderKey(h)
		if reservedHeader(s.decision) {
			return nil, fmt.Errorf("decisionHeader: %q has a meaning in HTTP (framing, cookies, caching, authentication or the RateLimit headers): name a header of your own, e.g. X-Tollgate-Decision", cfg.DecisionHeader)
		}
	}
	if s.source, err = compileSource(cfg.SourceCriterion); err != nil {
		return nil, err
	}
	if s.planHeader != "" && s.planHeader == s.source.header {
		return nil, fmt.Errorf("planHeader: %q is also the client key's header (sourceCriterion.requestHeaderName)", cfg.PlanHeader)
	}
	s.byHeader = s.source.header != "" && s.shards <= 1
	for _, p := range append([]*policy{s.top}, s.plans...) {
		s.leases = s.leases || p != nil && p.lease.max > 0
	}
	if s.shards > 1 || cfg.Region != nil || s.hasQuotas() || s.costed() || hasAnyConcurrency(cfg) {
		s.leases = false // see Lease in the README: a sharded or regional key, or one with quotas, response costs or caps, is not leased
	}
	if s.redis, err = compileRedis(&cfg.Redis); err != nil {
		return nil, err
	}
	if err := checkCaps(s.policies(), s.redis.mode == redis.Cluster, s.ownKeys); err != nil {
		return nil, err
	}
	if s.region, s.regionPeers, err = compileRegion(cfg.Region, s.redis); err != nil {
		return nil, err
	}
	if s.region != nil {
		for _, p := range s.policies() {
			p.regionPPM = s.region.Static
			if p.failClosed || p.source != nil || p.quota != nil { // a quota counts per region (quota.go)
				p.regionPPM = -s.region.Static
			}
		}
	}
	if s.top == nil && len(s.rules) == 0 && len(s.plans) == 0 && len(s.topQuotas) == 0 {
		return nil, errors.New("no limit: set average, rules, plans, quotas or concurrency (or serveMetrics for a metrics endpoint); a middleware with none would limit nothing")
	}
	return s, nil
}

// compilePlans compiles cfg's plans into s (see settings.plans); names
// holds the rules' names, which a plan may not take.
func compilePlans(cfg *Config, s *settings, period string, topClosed bool, names map[string]bool) error {
	s.defaultPlan = -1
	if len(cfg.Plans) == 0 {
		switch {
		case strings.TrimSpace(cfg.PlanHeader) != "":
			return errors.New("planHeader: set, but there are no plans")
		case strings.TrimSpace(cfg.DefaultPlan) != "":
			return errors.New("defaultPlan: set, but there are no plans")
		}
		return nil
	}
	h := strings.TrimSpace(cfg.PlanHeader)
	if h == "" {
		return errors.New("plans: set, but planHeader is not: name the header your authentication layer sets")
	}
	if !validHeaderName(h) {
		return fmt.Errorf("planHeader: %q is not a header name", cfg.PlanHeader)
	}
	s.planHeader = http.CanonicalHeaderKey(h)
	if len(cfg.Plans) > maxPlans {
		return fmt.Errorf("plans: %d plans, at most %d are allowed", len(cfg.Plans), maxPlans)
	}
	s.planIndex = make(map[string]int)
	for i, pl := range cfg.Plans {
		field := fmt.Sprintf("plans[%d]", i)
		if err := checkName(field+".name", pl.Name); err != nil {
			return err
		}
		if _, dup := s.planIndex[pl.Name]; dup || names[pl.Name] || pl.Name == s.class {
			return fmt.Errorf("%s.name: %q is used twice (plans, rules and the class %q share one namespace)", field, pl.Name, s.class)
		}
		s.planIndex[pl.Name] = i
		if pl.Unlimited {
			if pl.Average != 0 {
				return fmt.Errorf("%s: unlimited, but average is %d: set one", field, pl.Average)
			}
			var unlimited *policy // (Yaegi: append of an untyped nil panics)
			s.plans = append(s.plans, unlimited)
			continue
		}
		pp := pl.Period
		if strings.TrimSpace(pp) == "" {
			pp = period
		}
		p, err := compileLimit(field+".", pl.Average, pp, pl.Burst, orDefault(pl.Cost, orDefault(cfg.Cost, defaultCost)))
		if err != nil {
			return err
		}
		if p.failClosed, err = failureMode(field+".failureMode", pl.FailureMode, topClosed); err != nil {
			return err
		}
		p.name = pl.Name
		p.keySuffix = ":" + pl.Name
		p.shadow = cfg.Shadow
		lease, lf := cfg.Lease, "lease"
		if pl.Lease != nil {
			lease, lf = *pl.Lease, field+".lease"
		}
		if p.lease, err = compileLease(lf, lease); err != nil {
			return err
		}
		s.plans = append(s.plans, p)
	}
	if d := strings.TrimSpace(cfg.DefaultPlan); d != "" {
		i, ok := s.planIndex[d]
		if !ok {
			return fmt.Errorf("defaultPlan: %q is not one of the plans", cfg.DefaultPlan)
		}
		s.defaultPlan = i
	} else if cfg.Average <= 0 {
		// A request without a known plan would pass unlimited: anyone could
		// send a plan header naming none.
		return errors.New("plans: a request whose planHeader is missing, repeated or names no plan would not be limited: set defaultPlan (e.g. the lowest plan, or an unlimited one to say so) or a top-level average")
	}
	return nil
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
		return errors.New("quotas: not with shards (a quota keeps a client's whole window under one key)")
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
				return fmt.Errorf("%s: the plan is unlimited, its quotas would limit nothing: set average, or no quotas", field)
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

// withCaps compiles cfg's concurrency caps (compileCaps) after their owners' quotas.
func (s *settings) withCaps(cfg *Config, topClosed bool) error {
	if !hasAnyConcurrency(cfg) {
		return nil
	}
	switch {
	case s.shards > 1:
		return errors.New("concurrency: not with shards (a client's slots are one sorted set)")
	case cfg.Region != nil:
		return errors.New("concurrency: not with regions (each region's Redis would hold its own slots)")
	}
	taken := map[string]bool{s.class: true}
	for _, p := range s.policies() {
		taken[p.name] = true
	}
	for n := range s.planIndex {
		taken[n] = true
	}
	top, plans, rules, err := compileCaps(cfg, s.class, s.top, s.plans, s.rules, s.planQuotas, taken, topClosed)
	if err != nil {
		return err
	}
	if top != nil {
		s.topQuotas = append(s.topQuotas, top)
	}
	if s.planQuotas == nil { // no quotas: compileAllQuotas made neither
		s.planQuotas, s.ruleQuotas = make([][]*policy, len(s.plans)), make([][]*policy, len(s.rules))
	}
	for i, p := range plans {
		if p != nil {
			s.planQuotas[i] = append(s.planQuotas[i], p)
		}
	}
	for i, p := range rules {
		if p != nil {
			s.ruleQuotas[i] = append(s.ruleQuotas[i], p)
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
