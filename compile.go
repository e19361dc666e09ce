package tollgate

// What New compiles from a Config: the validated settings a Tollgate runs
// on (settings, policy, redisSettings), with each default filled in from
// config.go's constants.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Header modes.
const (
	headersIETF    = 1
	headersLegacy  = 2
	headersDraft07 = 4 // the RateLimit headers' draft 07 form (one policy)
)

// policy is one compiled bucket shape with its name and failure mode.
type policy struct {
	name       string // policy name in headers; "" key suffix for the top level
	keySuffix  string // appended to the client's key; "" for the top level
	lim        limit  // the whole limit (and the local fallback's base)
	shard      limit  // one sub-bucket in Redis: lim when not sharded
	average    int64
	periodUS   float64 // the period, µs
	periodSecs int64   // w in RateLimit-Policy
	failClosed bool
	shadow     bool           // never refuses (Config.Shadow)
	m          *policyMetrics // its counters (metrics.go); set by New
	// rule matching; the top-level policy matches everything
	pathPrefix string
	methods    []string
	source     *sourceCriterion // a rule's own client identity; nil: the top level's
}

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
	disabled    bool  // no policy at all
}

// validHeaderName reports whether s is an HTTP field name (RFC 9110 token).
func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0 {
			continue
		}
		return false
	}
	return s != ""
}

// parseDuration accepts a Go duration or bare (possibly fractional) seconds,
// as Traefik's duration fields do.
func parseDuration(field, s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || f > 1e9 {
			return 0, fmt.Errorf("%s: %q is out of range", field, s)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a duration (e.g. 1m, 250ms, or bare seconds)", field, s)
	}
	if d < 0 {
		return 0, fmt.Errorf("%s: %q is negative", field, s)
	}
	return d, nil
}

// positiveDuration is parseDuration that also refuses zero.
func positiveDuration(field, s string) (time.Duration, error) {
	d, err := parseDuration(field, s)
	if err == nil && d <= 0 {
		err = fmt.Errorf("%s: %q must be greater than zero", field, s)
	}
	return d, err
}

func nonNegative(field string, v int64) error {
	if v < 0 {
		return fmt.Errorf("%s: %d is negative", field, v)
	}
	return nil
}

func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

// failureMode parses "open"/"closed"; "" takes def.
func failureMode(field, s string, def bool) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return def, nil
	case "open":
		return false, nil
	case "closed":
		return true, nil
	}
	return false, fmt.Errorf("%s: %q is not open or closed", field, s)
}

// shadowMode parses a rule's shadow ("true"/"false", as strconv reads
// them); "" takes def.
func shadowMode(field, s string, def bool) (bool, error) {
	if s = strings.TrimSpace(s); s == "" {
		return def, nil
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		return false, fmt.Errorf("%s: %q is not true or false", field, s)
	}
	return v, nil
}

// checkMetricsOnly refuses a serveMetrics middleware that also configures
// a limit: it would apply none.
func checkMetricsOnly(cfg *Config) error {
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

// checkName refuses characters that cannot appear in a header's quoted
// string or that would make keys ambiguous.
func checkName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s: a name is required", field)
	}
	if len(s) > 64 {
		return fmt.Errorf("%s: %q is longer than 64 characters", field, s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '{' || c == '}' {
			return fmt.Errorf("%s: %q may hold only printable ASCII without spaces, quotes, backslashes or braces", field, s)
		}
	}
	return nil
}

// sanitizeName turns a middleware name into a valid class name.
func sanitizeName(s string) string {
	b := []byte(s)
	for i := range b {
		c := b[i]
		if c <= ' ' || c >= 0x7f || c == '"' || c == '\\' || c == '{' || c == '}' {
			b[i] = '_'
		}
	}
	if len(b) > 64 {
		b = b[:64]
	}
	if len(b) == 0 {
		return "default"
	}
	return string(b)
}

// compileLimit validates one bucket's numbers and returns its policy.
// prefix is "" for the top level or "rules[i]." for a rule.
func compileLimit(prefix string, average int64, period string, burst, cost int64) (*policy, error) {
	if average <= 0 {
		return nil, fmt.Errorf("%saverage: %d must be greater than zero", prefix, average)
	}
	per, err := positiveDuration(prefix+"period", period)
	if err != nil {
		return nil, err
	}
	if err := nonNegative(prefix+"burst", burst); err != nil {
		return nil, err
	}
	if err := nonNegative(prefix+"cost", cost); err != nil {
		return nil, err
	}
	burst = orDefault(burst, defaultBurst)
	cost = orDefault(cost, defaultCost)
	if burst < cost {
		return nil, fmt.Errorf("%sburst: %d is less than cost %d: no request could ever pass", prefix, burst, cost)
	}
	interval := float64(per.Microseconds()) / float64(average)
	if interval < 1e-3 {
		return nil, fmt.Errorf("%saverage: %d per %s is faster than one token per ns", prefix, average, per)
	}
	p := &policy{
		m:          &policyMetrics{}, // New's are the registry's
		lim:        limit{interval: interval, burst: float64(burst), cost: float64(cost)},
		average:    average,
		periodSecs: int64(per.Seconds()),
		periodUS:   float64(per.Microseconds()),
	}
	p.shard = p.lim
	if p.periodSecs < 1 {
		p.periodSecs = 1
	}
	return p, nil
}

// localShare is the per-pod fallback bucket while Redis is unavailable and
// replicas pods share the limit: average/replicas over the same period,
// burst/replicas, each at least one request's cost.
func (p *policy) localShare(replicas int64) limit {
	if replicas < 1 {
		replicas = 1
	}
	lb := int64(p.lim.burst) / replicas
	if lb < int64(p.lim.cost) {
		lb = int64(p.lim.cost)
	}
	la := float64(p.average) / float64(replicas)
	return limit{interval: p.periodUS / la, burst: float64(lb), cost: p.lim.cost}
}

// compile validates cfg and prepares everything ServeHTTP needs.
func compile(cfg *Config, name string) (*settings, error) {
	if cfg == nil {
		return nil, errors.New("no configuration")
	}
	s := &settings{}
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
	s.disabled = s.top == nil && len(s.rules) == 0 && len(s.plans) == 0

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
	if s.redis, err = compileRedis(&cfg.Redis); err != nil {
		return nil, err
	}
	return s, nil
}

// maxPlans bounds Plans.
const maxPlans = 64

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
		s.plans = append(s.plans, p)
	}
	if d := strings.TrimSpace(cfg.DefaultPlan); d != "" {
		i, ok := s.planIndex[d]
		if !ok {
			return fmt.Errorf("defaultPlan: %q is not one of the plans", cfg.DefaultPlan)
		}
		s.defaultPlan = i
	}
	return nil
}

// compileMethods upper-cases a rule's methods (requests are matched
// case-insensitively) and adds HEAD to a GET rule: HTTP defines HEAD as
// GET without the body, so a limit on GET that HEAD could dodge would be
// no limit.
func compileMethods(methods []string) []string {
	var out []string
	get, head := false, false
	for _, m := range methods {
		if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
			out = append(out, m)
			get = get || m == http.MethodGet
			head = head || m == http.MethodHead
		}
	}
	if get && !head {
		out = append(out, http.MethodHead)
	}
	return out
}

// reservedHeaders are the response headers decisionHeader may not name
// (canonical): what frames or routes the message, sets cookies, governs
// caches or authentication, and the headers Tollgate itself sends.
var reservedHeaders = map[string]bool{
	"Content-Length": true, "Content-Type": true, "Content-Encoding": true, "Content-Range": true,
	"Content-Location": true, "Content-Disposition": true, "Content-Security-Policy": true,
	"Transfer-Encoding": true, "Connection": true, "Keep-Alive": true, "Upgrade": true, "Trailer": true, "Te": true,
	"Proxy-Connection": true, "Location": true, "Host": true, "Date": true, "Server": true, "Alt-Svc": true,
	"Set-Cookie": true, "Set-Cookie2": true, "Cookie": true,
	"Cache-Control": true, "Expires": true, "Age": true, "Vary": true, "Etag": true, "Last-Modified": true, "Pragma": true,
	"Www-Authenticate": true, "Authorization": true, "Proxy-Authenticate": true, "Proxy-Authorization": true,
	"Strict-Transport-Security": true, "Accept-Ranges": true, "Allow": true,
	"Retry-After": true, "Ratelimit": true, "Ratelimit-Policy": true,
}

// reservedHeader reports whether the canonical header name h has a meaning
// in HTTP or is one Tollgate sends (reservedHeaders, X-Ratelimit-*,
// Access-Control-*).
func reservedHeader(h string) bool {
	return reservedHeaders[h] || strings.HasPrefix(h, "X-Ratelimit-") || strings.HasPrefix(h, "Access-Control-")
}

// maxRules bounds the rules of one middleware (rule sets are cached by bitmask).
const maxRules = 32

// maxShards bounds Shards.
const maxShards = 1024

// split sets the sub-bucket shape for n shards: 1/n of the rate and of the
// burst (a fraction of a token is fine: the capacities add up to the
// limit's).
func (p *policy) split(n int64) error {
	p.shard = p.lim
	if n <= 1 {
		return nil
	}
	p.shard.interval *= float64(n)
	p.shard.burst /= float64(n)
	if p.shard.burst < p.shard.cost {
		field := "burst"
		if p.keySuffix != "" {
			field = "rules[" + p.name + "].burst"
		}
		return fmt.Errorf("%s: %v split over %d shards leaves %.3g tokens per shard, less than one request's cost (%v)",
			field, p.lim.burst, n, p.shard.burst, p.lim.cost)
	}
	return nil
}

// redisSettings is a validated RedisConfig.
type redisSettings struct {
	name             string   // the redis label of the metrics (RedisConfig.Name)
	mode             int      // modeStandalone, modeSentinel, modeCluster
	endpoints        []string // sentinels or seed nodes
	masterName       string
	sentinelUser     string
	sentinelPass     string
	addr             string // standalone: the server; a node's client: the node
	username         string
	password         string
	db               int64
	tls              TLSConfig
	useTLS           bool
	timeout          time.Duration
	poolSize         int
	pipeline         int // ignored (RedisConfig.Pipeline)
	breakerThreshold int64
	probeInterval    time.Duration
	probeNS          int64 // probeInterval in ns, for the breaker
	heartbeatNS      int64 // heartbeat interval in ns; 0: off
}

// connKey identifies a Redis connection in the registry: what changes the
// connection, not how a check uses it (timeout, pool size, breaker
// settings), so reloads that change limits or timeouts share one pool.
func (r redisSettings) connKey() string {
	return fmt.Sprintf("%d|%s|%s|%s|%s|%s|%s|%s|%d|%t|%s|%s|%s|%t", r.mode, strings.Join(r.endpoints, ","), r.masterName,
		r.sentinelUser, r.sentinelPass, r.addr, r.username, r.password, r.db,
		r.useTLS, r.tls.CA, r.tls.Cert, r.tls.Key, r.tls.InsecureSkipVerify)
}

func compileRedis(c *RedisConfig) (redisSettings, error) {
	r := redisSettings{username: c.Username, password: c.Password, db: c.DB, tls: c.TLS}
	var eps []string
	for _, e := range c.Endpoints {
		if e = strings.TrimSpace(e); e != "" {
			eps = append(eps, e)
		}
	}
	if len(eps) == 0 {
		return r, errors.New("redis.endpoints: at least one host:port is required")
	}
	for i, e := range eps {
		if _, port, err := net.SplitHostPort(e); err != nil || port == "" {
			return r, fmt.Errorf("redis.endpoints[%d]: %q is not host:port", i, e)
		}
	}
	r.addr = eps[0]
	r.endpoints = eps
	r.name = strings.Join(eps, ",")
	switch strings.ToLower(strings.TrimSpace(c.Mode)) {
	case "", "standalone":
		r.mode = modeStandalone
	case "sentinel":
		r.mode = modeSentinel
		if r.masterName = strings.TrimSpace(c.MasterName); r.masterName == "" {
			return r, errors.New("redis.masterName: required in sentinel mode")
		}
		r.name = r.masterName
		r.sentinelUser, r.sentinelPass = c.SentinelUsername, c.SentinelPassword
	case "cluster":
		r.mode = modeCluster
		if c.DB != 0 {
			return r, fmt.Errorf("redis.db: %d, but Redis Cluster has only database 0", c.DB)
		}
	default:
		return r, fmt.Errorf("redis.mode: %q is not standalone, sentinel or cluster", c.Mode)
	}
	if n := strings.TrimSpace(c.Name); n != "" {
		if err := checkName("redis.name", n); err != nil {
			return r, err
		}
		r.name = n
	}
	if c.SentinelPassword != "" && c.SentinelPasswordFile != "" {
		return r, errors.New("redis.sentinelPassword and redis.sentinelPasswordFile are both set: use one")
	}
	if c.SentinelPasswordFile != "" {
		if r.mode != modeSentinel {
			return r, errors.New("redis.sentinelPasswordFile: set, but redis.mode is not sentinel")
		}
		pass, err := readPasswordFile("redis.sentinelPasswordFile", c.SentinelPasswordFile)
		if err != nil {
			return r, err
		}
		r.sentinelPass = pass
	}
	if c.Password != "" && c.PasswordFile != "" {
		return r, errors.New("redis.password and redis.passwordFile are both set: use one")
	}
	if c.PasswordFile != "" {
		pass, err := readPasswordFile("redis.passwordFile", c.PasswordFile)
		if err != nil {
			return r, err
		}
		r.password = pass
	}
	if c.DB < 0 {
		return r, fmt.Errorf("redis.db: %d is negative", c.DB)
	}
	if (c.TLS.Cert == "") != (c.TLS.Key == "") {
		return r, errors.New("redis.tls: cert and key must be set together")
	}
	r.useTLS = c.TLS.Enabled || c.TLS.CA != "" || c.TLS.Cert != "" || c.TLS.InsecureSkipVerify
	var err error
	to := c.Timeout
	if strings.TrimSpace(to) == "" {
		to = defaultTimeout
	}
	if r.timeout, err = positiveDuration("redis.timeout", to); err != nil {
		return r, err
	}
	pi := c.ProbeInterval
	if strings.TrimSpace(pi) == "" {
		pi = defaultProbeInterval
	}
	if r.probeInterval, err = positiveDuration("redis.probeInterval", pi); err != nil {
		return r, err
	}
	hb := c.Heartbeat
	if strings.TrimSpace(hb) == "" {
		hb = defaultHeartbeat
	}
	beat, err := parseDuration("redis.heartbeat", hb)
	if err != nil {
		return r, err
	}
	if beat != 0 && beat < 100*time.Millisecond {
		return r, fmt.Errorf("redis.heartbeat: %q is shorter than 100ms (0 turns it off)", c.Heartbeat)
	}
	r.heartbeatNS = int64(beat)
	if err := nonNegative("redis.poolSize", c.PoolSize); err != nil {
		return r, err
	}
	if err := nonNegative("redis.breakerThreshold", c.BreakerThreshold); err != nil {
		return r, err
	}
	if err := nonNegative("redis.pipeline", c.Pipeline); err != nil {
		return r, err
	}
	if c.Pipeline > 64 {
		return r, fmt.Errorf("redis.pipeline: %d lanes, at most 64", c.Pipeline)
	}
	r.pipeline = int(c.Pipeline)
	r.poolSize = int(orDefault(c.PoolSize, defaultPoolSize))
	r.breakerThreshold = orDefault(c.BreakerThreshold, defaultBreakerThreshold)
	r.probeNS = int64(r.probeInterval)
	return r, nil
}
