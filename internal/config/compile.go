package config

// What New compiles from a Config: the validated settings a Tollgate runs
// on (Settings; its policies: policy.go; its Redis: redissettings.go), with
// each default filled in from config.go's constants.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/redis"
	"github.com/tollgate-dev/tollgate/internal/regions"
)

// Header modes.
const (
	HeadersIETF    = 1
	HeadersLegacy  = 2
	HeadersDraft07 = 4 // the RateLimit headers' draft 07 form (one policy)
)

// Settings is a validated, compiled Config.
type Settings struct {
	Class     string
	HeaderTag string  // class, NUL, "h:": what a header identity is hashed after (ClientKey)
	ByHeader  bool    // clients keyed by a header (source.header), not sharded: decide's common case
	Top       *Policy // nil when Average is 0
	Rules     []*Policy
	// Plans (Config.Plans): Plans[i] replaces top for the clients of plan
	// i (nil: unlimited), named by planHeader's value (planIndex); a
	// request without a known plan has defaultPlan (-1: top).
	Plans       []*Policy
	PlanIndex   map[string]int
	PlanHeader  string
	DefaultPlan int
	Exempt      []*net.IPNet // ExemptSourceRange
	OwnKeys     bool         // some rule keys its clients its own way (Policy.Source)
	Source      Source
	Headers     int
	Decision    string // DecisionHeader, canonical; "" when off
	Redis       RedisSettings
	Replicas    int64 // Replicas: the fallback's divisor until a heartbeat count is seen
	Shards      int64 // sub-buckets per client bucket; 1: not sharded
	Digits      int   // width of the shard number in keys
	KeyLen      int   // length of a client key in Redis (sharded or not)
	Leases      bool  // the top level or a plan leases (lease.go): every call honours leases
	// MaxOverrides bounds the per-key overrides kept for the class
	// (Config.MaxOverrides; the root's admin.go).
	MaxOverrides int64
	// Quotas (quota.go), charged with their owner: the top level's (also
	// with no top-level rate), plans[i]'s and rules[i]'s. (Not in policy:
	// Yaegi refuses a struct type that holds a slice of itself.)
	TopQuotas   []*Policy
	PlanQuotas  [][]*Policy
	RuleQuotas  [][]*Policy
	Region      *regions.Settings // nil without regions (region.go)
	RegionPeers []RedisSettings   // the peers' Redis, in region.Peers' order
}

// CheckMetricsOnly refuses a serveMetrics middleware that also configures
// a limit: it would apply none.
func CheckMetricsOnly(cfg *Config) error {
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

// MaxOverrides bounds Config.MaxOverrides; DefaultOverrides is its
// default.
const (
	MaxOverrides     = 30000
	DefaultOverrides = 10000
	maxAdminClasses  = 64
)

// CompileAdmin validates a serveAdmin middleware's config and returns the
// classes it may see and change.
func CompileAdmin(cfg *Config) ([]string, error) {
	if err := checkWords(cfg); err != nil {
		return nil, err
	}
	switch {
	case cfg.ServeMetrics:
		return nil, errors.New("serveAdmin: serveMetrics is set too (one endpoint a middleware)")
	case cfg.Average != 0:
		return nil, fmt.Errorf("serveAdmin: an admin endpoint applies no limit, but average is %d (put the limit on a middleware of its own)", cfg.Average)
	case len(cfg.Rules) > 0:
		return nil, fmt.Errorf("serveAdmin: an admin endpoint applies no limit, but %d rules are set", len(cfg.Rules))
	case len(cfg.AdminClasses) == 0:
		return nil, errors.New("adminClasses: required with serveAdmin: the classes this endpoint may see and change")
	case len(cfg.AdminClasses) > maxAdminClasses:
		return nil, fmt.Errorf("adminClasses: %d classes, at most %d are allowed", len(cfg.AdminClasses), maxAdminClasses)
	}
	var out []string
	for i, c := range cfg.AdminClasses {
		c = strings.TrimSpace(c)
		if err := CheckName(fmt.Sprintf("adminClasses[%d]", i), c); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Compile validates cfg and prepares everything ServeHTTP needs.
func Compile(cfg *Config, name string) (*Settings, error) {
	if cfg == nil {
		return nil, errors.New("no configuration")
	}
	if err := checkWords(cfg); err != nil {
		return nil, err
	}
	s := &Settings{MaxOverrides: orDefault(cfg.MaxOverrides, DefaultOverrides)}
	if cfg.ServeAdmin || len(cfg.AdminClasses) > 0 {
		return nil, errors.New("adminClasses: set, but serveAdmin is not (an admin endpoint is a middleware of its own: serveAdmin: true, adminClasses: [...])")
	}
	if cfg.MaxOverrides < 0 || cfg.MaxOverrides > MaxOverrides {
		return nil, fmt.Errorf("maxOverrides: %d is not between 0 and %d", cfg.MaxOverrides, MaxOverrides)
	}
	if len(cfg.MetricsClasses) > 0 {
		return nil, errors.New("metricsClasses: set, but serveMetrics is not (it restricts what a metrics endpoint serves)")
	}
	if cfg.Class != "" {
		if err := CheckName("class", cfg.Class); err != nil {
			return nil, err
		}
		s.Class = cfg.Class
	} else {
		s.Class = SanitizeName(name)
	}
	s.HeaderTag = s.Class + "\x00h:"
	for _, f := range []struct {
		name string
		v    int64
	}{{"average", cfg.Average}, {"burst", cfg.Burst}, {"cost", cfg.Cost}, {"replicas", cfg.Replicas}, {"shards", cfg.Shards}} {
		if err := nonNegative(f.name, f.v); err != nil {
			return nil, err
		}
	}
	s.Replicas = orDefault(cfg.Replicas, defaultReplicas)
	s.Shards = orDefault(cfg.Shards, defaultShards)
	if s.Shards > maxShards {
		return nil, fmt.Errorf("shards: %d is more than %d", s.Shards, maxShards)
	}
	s.KeyLen = len(bucket.ClientKey("", ""))
	if s.Shards > 1 {
		s.Digits = len(strconv.FormatInt(s.Shards-1, 10))
		s.KeyLen += 1 + s.Digits
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
		p, err := CompileLimit("", cfg.Average, period, cfg.Burst, cfg.Cost)
		if err != nil {
			return nil, err
		}
		p.Name = s.Class
		p.FailClosed = topClosed
		p.Shadow = cfg.Shadow
		if p.Lease, err = CompileLease("lease", cfg.Lease); err != nil {
			return nil, err
		}
		s.Top = p
	} else if _, err := positiveDuration("period", period); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for i, r := range cfg.Rules {
		field := fmt.Sprintf("rules[%d]", i)
		if err := CheckName(field+".name", r.Name); err != nil {
			return nil, err
		}
		if seen[r.Name] || r.Name == s.Class {
			return nil, fmt.Errorf("%s.name: %q is used twice (the class %q names the top-level policy)", field, r.Name, s.Class)
		}
		seen[r.Name] = true
		rp := r.Period
		if strings.TrimSpace(rp) == "" {
			rp = period
		}
		p, err := CompileLimit(field+".", r.Average, rp, r.Burst, orDefault(r.Cost, orDefault(cfg.Cost, defaultCost)))
		if err != nil {
			return nil, err
		}
		if p.FailClosed, err = failureMode(field+".failureMode", r.FailureMode, topClosed); err != nil {
			return nil, err
		}
		if p.Shadow, err = shadowMode(field+".shadow", r.Shadow, cfg.Shadow); err != nil {
			return nil, err
		}
		if r.SourceCriterion != nil {
			src, err := CompileSource(r.SourceCriterion)
			if err != nil {
				return nil, fmt.Errorf("%s.%w", field, err)
			}
			p.Source = &src
			s.OwnKeys = true
		}
		p.Name = r.Name
		p.KeySuffix = ":" + r.Name
		p.PathPrefix = r.PathPrefix
		p.Methods = compileMethods(r.Methods)
		s.Rules = append(s.Rules, p)
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
	for _, p := range append(append(s.Rules, s.Top), s.Plans...) {
		if p == nil || p.Source != nil { // a rule keyed its own way has one key, never sharded
			continue
		}
		if err := p.Split(s.Shards); err != nil {
			return nil, err
		}
	}
	if s.Exempt, err = parseCIDRs("exemptSourceRange", cfg.ExemptSourceRange); err != nil {
		return nil, err
	}
	if len(s.Rules) > MaxRules {
		return nil, fmt.Errorf("rules: %d rules, at most %d are allowed", len(s.Rules), MaxRules)
	}

	switch strings.ToLower(strings.TrimSpace(cfg.Headers)) {
	case "", "ietf":
		s.Headers = HeadersIETF
	case "legacy":
		s.Headers = HeadersLegacy
	case "both":
		s.Headers = HeadersIETF | HeadersLegacy
	case "draft07":
		s.Headers = HeadersDraft07
	case "none":
		s.Headers = 0
	default:
		return nil, fmt.Errorf("headers: %q is not ietf, legacy, both, draft07 or none", cfg.Headers)
	}
	if h := strings.TrimSpace(cfg.DecisionHeader); h != "" {
		if !ValidHeaderName(h) {
			return nil, fmt.Errorf("decisionHeader: %q is not a header name", cfg.DecisionHeader)
		}
		s.Decision = http.CanonicalHeaderKey(h)
		if reservedHeader(s.Decision) {
			return nil, fmt.Errorf("decisionHeader: %q has a meaning in HTTP (framing, cookies, caching, authentication or the RateLimit headers): name a header of your own, e.g. X-Tollgate-Decision", cfg.DecisionHeader)
		}
	}
	if s.Decision != "" {
		for _, p := range s.Policies() {
			if p.RespCost != nil && p.RespCost.Header == s.Decision {
				return nil, fmt.Errorf("responseCost.header: %q is also the decisionHeader: name them apart", p.RespCost.Header)
			}
		}
	}
	if s.Source, err = CompileSource(cfg.SourceCriterion); err != nil {
		return nil, err
	}
	if s.PlanHeader != "" && s.PlanHeader == s.Source.Header {
		return nil, fmt.Errorf("planHeader: %q is also the client key's header (sourceCriterion.requestHeaderName)", cfg.PlanHeader)
	}
	for _, h := range s.Source.Headers {
		if s.PlanHeader == h {
			return nil, fmt.Errorf("planHeader: %q is also one of the client key's headers (sourceCriterion.requestHeaderNames)", cfg.PlanHeader)
		}
	}
	// A composite key (Source.Headers) is never ByHeader: the fast paths
	// hash Source.Header alone, its identity is built by identity.
	s.ByHeader = s.Source.Header != "" && s.Source.Headers == nil && s.Shards <= 1
	for _, p := range append([]*Policy{s.Top}, s.Plans...) {
		s.Leases = s.Leases || p != nil && p.Lease.Max > 0
	}
	if s.Shards > 1 || cfg.Region != nil || s.HasQuotas() || s.Costed() || hasAnyConcurrency(cfg) {
		s.Leases = false // see Lease in the README: a sharded or regional key, or one with quotas, response costs or caps, is not leased
	}
	if s.Redis, err = CompileRedis(&cfg.Redis); err != nil {
		return nil, err
	}
	if err := checkCaps(s.Policies(), s.Redis.Mode == redis.Cluster, s.OwnKeys); err != nil {
		return nil, err
	}
	if s.Region, s.RegionPeers, err = CompileRegion(cfg.Region, s.Redis); err != nil {
		return nil, err
	}
	if s.Region != nil {
		for _, p := range s.Policies() {
			p.RegionPPM = s.Region.Static
			if p.FailClosed || p.Source != nil || p.Quota != nil { // a quota counts per region (quota.go)
				p.RegionPPM = -s.Region.Static
			}
		}
	}
	if s.Top == nil && len(s.Rules) == 0 && len(s.Plans) == 0 && len(s.TopQuotas) == 0 {
		return nil, errors.New("no limit: set average, rules, plans, quotas or concurrency (or serveMetrics for a metrics endpoint); a middleware with none would limit nothing")
	}
	return s, nil
}

// compilePlans compiles cfg's plans into s (see Settings.Plans); names
// holds the rules' names, which a plan may not take.
func compilePlans(cfg *Config, s *Settings, period string, topClosed bool, names map[string]bool) error {
	s.DefaultPlan = -1
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
	if !ValidHeaderName(h) {
		return fmt.Errorf("planHeader: %q is not a header name", cfg.PlanHeader)
	}
	s.PlanHeader = http.CanonicalHeaderKey(h)
	if len(cfg.Plans) > maxPlans {
		return fmt.Errorf("plans: %d plans, at most %d are allowed", len(cfg.Plans), maxPlans)
	}
	s.PlanIndex = make(map[string]int)
	for i, pl := range cfg.Plans {
		field := fmt.Sprintf("plans[%d]", i)
		if err := CheckName(field+".name", pl.Name); err != nil {
			return err
		}
		if _, dup := s.PlanIndex[pl.Name]; dup || names[pl.Name] || pl.Name == s.Class {
			return fmt.Errorf("%s.name: %q is used twice (plans, rules and the class %q share one namespace)", field, pl.Name, s.Class)
		}
		s.PlanIndex[pl.Name] = i
		if pl.Unlimited {
			if pl.Average != 0 {
				return fmt.Errorf("%s: unlimited, but average is %d: set one", field, pl.Average)
			}
			var unlimited *Policy // (Yaegi: append of an untyped nil panics)
			s.Plans = append(s.Plans, unlimited)
			continue
		}
		pp := pl.Period
		if strings.TrimSpace(pp) == "" {
			pp = period
		}
		p, err := CompileLimit(field+".", pl.Average, pp, pl.Burst, orDefault(pl.Cost, orDefault(cfg.Cost, defaultCost)))
		if err != nil {
			return err
		}
		if p.FailClosed, err = failureMode(field+".failureMode", pl.FailureMode, topClosed); err != nil {
			return err
		}
		p.Name = pl.Name
		p.KeySuffix = ":" + pl.Name
		p.Shadow = cfg.Shadow
		lease, lf := cfg.Lease, "lease"
		if pl.Lease != nil {
			lease, lf = *pl.Lease, field+".lease"
		}
		if p.Lease, err = CompileLease(lf, lease); err != nil {
			return err
		}
		s.Plans = append(s.Plans, p)
	}
	if d := strings.TrimSpace(cfg.DefaultPlan); d != "" {
		i, ok := s.PlanIndex[d]
		if !ok {
			return fmt.Errorf("defaultPlan: %q is not one of the plans", cfg.DefaultPlan)
		}
		s.DefaultPlan = i
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
func compileAllQuotas(cfg *Config, s *Settings, topClosed bool, names map[string]bool) error {
	if !hasAnyQuota(cfg) {
		return nil
	}
	if s.Shards > 1 {
		return errors.New("quotas: not with shards (a quota keeps a client's whole window under one key)")
	}
	base := map[string]bool{s.Class: true}
	for n := range names {
		base[n] = true
	}
	for n := range s.PlanIndex {
		base[n] = true
	}
	taken := map[string]bool{}
	for n := range base {
		taken[n] = true
	}
	var err error
	if s.TopQuotas, err = compileQuotas("quotas", cfg.Quotas, s.Top, "", orDefault(cfg.Cost, defaultCost), topClosed, cfg.Shadow, base); err != nil {
		return err
	}
	for _, q := range s.TopQuotas {
		taken[q.Name] = true
	}
	s.PlanQuotas = make([][]*Policy, len(s.Plans))
	for i, pl := range cfg.Plans {
		field, p := fmt.Sprintf("plans[%d].quotas", i), s.Plans[i]
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
		if s.PlanQuotas[i], err = compileQuotas(field, qs, p, "", 0, false, false, base); err != nil {
			return err
		}
		for _, q := range s.PlanQuotas[i] {
			taken[q.Name] = true
		}
	}
	s.RuleQuotas = make([][]*Policy, len(s.Rules))
	for i, r := range s.Rules {
		if s.RuleQuotas[i], err = compileQuotas(fmt.Sprintf("rules[%d].quotas", i), cfg.Rules[i].Quotas, r, r.KeySuffix, 0, false, false, taken); err != nil {
			return err
		}
		for _, q := range s.RuleQuotas[i] {
			taken[q.Name] = true
		}
	}
	return nil
}

// withCaps compiles cfg's concurrency caps (compileCaps) after their owners' quotas.
func (s *Settings) withCaps(cfg *Config, topClosed bool) error {
	if !hasAnyConcurrency(cfg) {
		return nil
	}
	switch {
	case s.Shards > 1:
		return errors.New("concurrency: not with shards (a client's slots are one sorted set)")
	case cfg.Region != nil:
		return errors.New("concurrency: not with regions (each region's Redis would hold its own slots)")
	}
	taken := map[string]bool{s.Class: true}
	for _, p := range s.Policies() {
		taken[p.Name] = true
	}
	for n := range s.PlanIndex {
		taken[n] = true
	}
	top, plans, rules, err := compileCaps(cfg, s.Class, s.Top, s.Plans, s.Rules, s.PlanQuotas, taken, topClosed)
	if err != nil {
		return err
	}
	if top != nil {
		s.TopQuotas = append(s.TopQuotas, top)
	}
	if s.PlanQuotas == nil { // no quotas: compileAllQuotas made neither
		s.PlanQuotas, s.RuleQuotas = make([][]*Policy, len(s.Plans)), make([][]*Policy, len(s.Rules))
	}
	for i, p := range plans {
		if p != nil {
			s.PlanQuotas[i] = append(s.PlanQuotas[i], p)
		}
	}
	for i, p := range rules {
		if p != nil {
			s.RuleQuotas[i] = append(s.RuleQuotas[i], p)
		}
	}
	return nil
}

// WithQuotas returns p followed by its quotas (qs[i] of p at i, or the
// top level's when p is the top level).
func (s *Settings) WithQuotas(p *Policy, qs [][]*Policy, i int) []*Policy {
	ps := []*Policy{p}
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

// HasQuotas reports whether s has a quota.
func (s *Settings) HasQuotas() bool {
	for _, p := range s.Policies() {
		if p.Quota != nil {
			return true
		}
	}
	return false
}

// Policies returns every policy of s: the rules, the top level, the
// plans, and their quotas.
func (s *Settings) Policies() []*Policy {
	var out []*Policy
	for i, p := range s.Rules {
		out = append(out, s.WithQuotas(p, s.RuleQuotas, i)...)
	}
	out = append(out, s.TopPolicies()...)
	for i, p := range s.Plans {
		if p != nil {
			out = append(out, s.WithQuotas(p, s.PlanQuotas, i)...)
		}
	}
	return out
}

// TopPolicies is the set of a request with no plan and no rule: the
// top-level rate and its quotas, or nil.
func (s *Settings) TopPolicies() []*Policy {
	var ps []*Policy
	if s.Top != nil {
		ps = append(ps, s.Top)
	}
	ps = append(ps, s.TopQuotas...)
	if len(ps) == 0 {
		return nil
	}
	return ps
}
