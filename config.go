package tollgate

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is the plugin's dynamic configuration. Traefik decodes it with
// mapstructure (WeaklyTypedInput, case-insensitive names, lists split on
// ","), so every field also decodes from strings (Docker labels). Durations
// are strings: a Go duration ("1m", "250ms") or bare seconds ("60", "0.5").
type Config struct {
	// Average is the number of tokens refilled per Period. 0 disables the
	// top-level limit (rules still apply; with no rules requests pass and
	// Redis is never called). Default 0.
	Average int64 `json:"average,omitempty" yaml:"average,omitempty" toml:"average,omitempty"`
	// Period is the refill period of Average. Default "1s"; must be > 0.
	Period string `json:"period,omitempty" yaml:"period,omitempty" toml:"period,omitempty"`
	// Burst is the bucket capacity, in tokens. Default 1; 0 means 1. Must be
	// at least Cost.
	Burst int64 `json:"burst,omitempty" yaml:"burst,omitempty" toml:"burst,omitempty"`
	// Cost is the number of tokens one request takes. Default 1; 0 means 1.
	Cost int64 `json:"cost,omitempty" yaml:"cost,omitempty" toml:"cost,omitempty"`
	// Class names the bucket namespace and the top-level policy (in the
	// RateLimit headers). Routers whose middlewares share a class share
	// budgets. Default "": the middleware's name.
	Class string `json:"class,omitempty" yaml:"class,omitempty" toml:"class,omitempty"`
	// SourceCriterion says who a client is, exactly as Traefik's rateLimit:
	// at most one of requestHeaderName, requestHost, ipStrategy. Default: the
	// client IP from the connection (ipStrategy with depth 0).
	SourceCriterion *SourceCriterion `json:"sourceCriterion,omitempty" yaml:"sourceCriterion,omitempty" toml:"sourceCriterion,omitempty"`
	// Shards splits each client's buckets (the top level's and the rules')
	// into this many sub-buckets, each with 1/Shards of the average and of
	// the burst, whose keys carry the shard in the hash tag
	// (tg{tag:i}), so that in a Redis Cluster one hot client spreads over
	// several slots and nodes. Each request is charged to one sub-bucket
	// picked at random. The limit becomes approximate: never more than the
	// limit is admitted, but a client may be refused while another shard
	// still holds tokens (see the README). All of one request's buckets are
	// charged in one script, hence in one shard; so the setting is the
	// middleware's, not a rule's. Default 1 (no split); at most 1024; burst
	// must be at least Shards x Cost.
	Shards int64 `json:"shards,omitempty" yaml:"shards,omitempty" toml:"shards,omitempty"`
	// Rules add buckets for matching requests; every matching rule is charged
	// together with the top-level limit, all or nothing. Default none.
	Rules []Rule `json:"rules,omitempty" yaml:"rules,omitempty" toml:"rules,omitempty"`
	// FailureMode says what the top-level limit does while Redis is
	// unavailable: "open" (the local fallback bucket decides) or "closed"
	// (503). Rules default to it. Default "open".
	FailureMode string `json:"failureMode,omitempty" yaml:"failureMode,omitempty" toml:"failureMode,omitempty"`
	// Replicas is the number of Traefik replicas sharing the limit, for the
	// local fallback: while Redis is unavailable each pod allows
	// Average/N and Burst/N (at least one request), where N is the number
	// of pods last counted by the heartbeat (redis.heartbeat) or, until one
	// was counted and always when the heartbeat is off, Replicas. Default 1;
	// 0 means 1.
	Replicas int64 `json:"replicas,omitempty" yaml:"replicas,omitempty" toml:"replicas,omitempty"`
	// Headers selects the response headers: "ietf" (RateLimit-Policy and
	// RateLimit), "legacy" (X-RateLimit-Limit/Remaining/Reset), "both" or
	// "none". Default "ietf".
	Headers string `json:"headers,omitempty" yaml:"headers,omitempty" toml:"headers,omitempty"`
	// DecisionHeader names a response header telling how the request was
	// decided: "redis", "local" (Redis unavailable, the local fallback
	// decided), "cache" (a refusal from Redis still in force, repeated
	// without a Redis call) or "unavailable" (503, a policy fails closed). For access
	// logs and dashboards (Traefik's access log can keep response headers).
	// Empty (default): not sent.
	DecisionHeader string `json:"decisionHeader,omitempty" yaml:"decisionHeader,omitempty" toml:"decisionHeader,omitempty"`
	// Redis is the shared store.
	Redis RedisConfig `json:"redis,omitempty" yaml:"redis,omitempty" toml:"redis,omitempty"`
}

// SourceCriterion mirrors Traefik's rateLimit sourceCriterion.
type SourceCriterion struct {
	// RequestHeaderName keys clients by this header's value; when the header
	// is absent the client IP (IPStrategy) is used.
	RequestHeaderName string `json:"requestHeaderName,omitempty" yaml:"requestHeaderName,omitempty" toml:"requestHeaderName,omitempty"`
	// RequestHost keys clients by the request's Host.
	RequestHost bool `json:"requestHost,omitempty" yaml:"requestHost,omitempty" toml:"requestHost,omitempty"`
	// IPStrategy picks the client IP.
	IPStrategy *IPStrategy `json:"ipStrategy,omitempty" yaml:"ipStrategy,omitempty" toml:"ipStrategy,omitempty"`
}

// IPStrategy mirrors Traefik's ipStrategy.
type IPStrategy struct {
	// Depth takes the Depth-th address from the right of X-Forwarded-For.
	// 0 (default) uses the connection's address (or ExcludedIPs).
	Depth int64 `json:"depth,omitempty" yaml:"depth,omitempty" toml:"depth,omitempty"`
	// ExcludedIPs (IPs or CIDRs) are skipped, from the right of
	// X-Forwarded-For; the first address not excluded is the client.
	ExcludedIPs []string `json:"excludedIPs,omitempty" yaml:"excludedIPs,omitempty" toml:"excludedIPs,omitempty"`
	// IPv6Subnet groups IPv6 clients by this prefix length (1-128).
	// 0 (default) keys each IPv6 address on its own.
	IPv6Subnet int64 `json:"ipv6Subnet,omitempty" yaml:"ipv6Subnet,omitempty" toml:"ipv6Subnet,omitempty"`
}

// Rule is an extra bucket charged for the requests it matches.
type Rule struct {
	// Name names the policy (headers, bucket key); required, unique.
	Name string `json:"name,omitempty" yaml:"name,omitempty" toml:"name,omitempty"`
	// PathPrefix matches request paths starting with it. "" matches all.
	PathPrefix string `json:"pathPrefix,omitempty" yaml:"pathPrefix,omitempty" toml:"pathPrefix,omitempty"`
	// Methods matches these HTTP methods (case-insensitive). Empty matches all.
	Methods []string `json:"methods,omitempty" yaml:"methods,omitempty" toml:"methods,omitempty"`
	// Average, tokens per Period; required, > 0.
	Average int64 `json:"average,omitempty" yaml:"average,omitempty" toml:"average,omitempty"`
	// Period defaults to the top-level Period.
	Period string `json:"period,omitempty" yaml:"period,omitempty" toml:"period,omitempty"`
	// Burst, tokens; 0 means 1.
	Burst int64 `json:"burst,omitempty" yaml:"burst,omitempty" toml:"burst,omitempty"`
	// Cost, tokens per request; 0 means the top-level Cost.
	Cost int64 `json:"cost,omitempty" yaml:"cost,omitempty" toml:"cost,omitempty"`
	// FailureMode "open" or "closed"; "" means the top-level FailureMode.
	FailureMode string `json:"failureMode,omitempty" yaml:"failureMode,omitempty" toml:"failureMode,omitempty"`
}

// RedisConfig says where the shared buckets live.
type RedisConfig struct {
	// Mode is the deployment: "standalone" (one server, or a primary behind
	// a stable address), "sentinel" (the primary that the sentinels at
	// Endpoints name for MasterName) or "cluster" (Redis Cluster; Endpoints
	// are seed nodes). Default "standalone".
	Mode string `json:"mode,omitempty" yaml:"mode,omitempty" toml:"mode,omitempty"`
	// Endpoints lists host:port: the server (standalone: the first is
	// used), the sentinels, or the cluster's seed nodes. Default
	// ["127.0.0.1:6379"].
	Endpoints []string `json:"endpoints,omitempty" yaml:"endpoints,omitempty" toml:"endpoints,omitempty"`
	// MasterName is the primary's name in Sentinel; required in sentinel
	// mode.
	MasterName string `json:"masterName,omitempty" yaml:"masterName,omitempty" toml:"masterName,omitempty"`
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (Username and Password are the data nodes'). Default "": no AUTH.
	SentinelUsername string `json:"sentinelUsername,omitempty" yaml:"sentinelUsername,omitempty" toml:"sentinelUsername,omitempty"`
	SentinelPassword string `json:"sentinelPassword,omitempty" yaml:"sentinelPassword,omitempty" toml:"sentinelPassword,omitempty"`
	// Username for Redis ACL (AUTH username password). Default "".
	Username string `json:"username,omitempty" yaml:"username,omitempty" toml:"username,omitempty"`
	// Password for AUTH. Default "" (no AUTH).
	Password string `json:"password,omitempty" yaml:"password,omitempty" toml:"password,omitempty"`
	// PasswordFile is read for the password, for mounted secrets: a regular
	// file (symlinks followed) of at most 4 KiB holding one line (one
	// trailing newline trimmed); an empty file is an error. Exclusive with
	// Password.
	PasswordFile string `json:"passwordFile,omitempty" yaml:"passwordFile,omitempty" toml:"passwordFile,omitempty"`
	// DB is the database number (SELECT). Default 0.
	DB int64 `json:"db,omitempty" yaml:"db,omitempty" toml:"db,omitempty"`
	// TLS enables TLS when any of its fields is set.
	TLS TLSConfig `json:"tls,omitempty" yaml:"tls,omitempty" toml:"tls,omitempty"`
	// Timeout is Redis's budget for one check: from when the check is
	// written (or, behind a burst pipelined on the same connection, from
	// the reply before it, up to 10 timeouts after its write) to its reply;
	// past it the request falls back. A pod whose pool has no connection yet
	// (just started, or Redis just restarted) waits for the dial in progress
	// instead (its budget: 100 x Timeout, 250ms to 2s). Default "5ms".
	Timeout string `json:"timeout,omitempty" yaml:"timeout,omitempty" toml:"timeout,omitempty"`
	// PoolSize caps the connections per process and Redis node that carry
	// checks (the heartbeat has one more of its own). A check takes an idle
	// connection; when none is idle it is pipelined on the least busy one
	// (each carries any number at once), and one more is dialled, off the
	// request's clock, when that one carries 2 per connection open (about
	// sqrt(concurrency/2) connections). 0 means 64.
	PoolSize int64 `json:"poolSize,omitempty" yaml:"poolSize,omitempty" toml:"poolSize,omitempty"`
	// Pipeline is accepted for compatibility and ignored: concurrent checks
	// are always pipelined on a few shared connections per node (see
	// PoolSize). Validated: 0 to 64.
	Pipeline int64 `json:"pipeline,omitempty" yaml:"pipeline,omitempty" toml:"pipeline,omitempty"`
	// BreakerThreshold is the number of failures within one second that
	// open the circuit breaker, when they are also at least half of that
	// second's checks. 0 means 3.
	BreakerThreshold int64 `json:"breakerThreshold,omitempty" yaml:"breakerThreshold,omitempty" toml:"breakerThreshold,omitempty"`
	// ProbeInterval is how often an open breaker lets one check through to
	// probe Redis. Default "3s".
	ProbeInterval string `json:"probeInterval,omitempty" yaml:"probeInterval,omitempty" toml:"probeInterval,omitempty"`
	// Heartbeat is how often each pod registers itself in Redis for the
	// class, so that the local fallback knows how many pods share the limit
	// (see Replicas). A pod not heard from for 3 heartbeats is no longer
	// counted. Default "5s"; "0" turns it off (Replicas is then used as
	// given).
	Heartbeat string `json:"heartbeat,omitempty" yaml:"heartbeat,omitempty" toml:"heartbeat,omitempty"`
}

// TLSConfig holds file paths (PEM) and the verification switch.
type TLSConfig struct {
	CA                 string `json:"ca,omitempty" yaml:"ca,omitempty" toml:"ca,omitempty"`
	Cert               string `json:"cert,omitempty" yaml:"cert,omitempty" toml:"cert,omitempty"`
	Key                string `json:"key,omitempty" yaml:"key,omitempty" toml:"key,omitempty"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty" yaml:"insecureSkipVerify,omitempty" toml:"insecureSkipVerify,omitempty"`
}

// CreateConfig returns the default configuration; Traefik decodes the
// middleware's options over it.
func CreateConfig() *Config {
	return &Config{
		Period:      "1s",
		Burst:       1,
		Cost:        1,
		FailureMode: "open",
		Replicas:    1,
		Headers:     "ietf",
		Redis: RedisConfig{
			Endpoints:        []string{"127.0.0.1:6379"},
			Timeout:          "5ms",
			PoolSize:         64,
			BreakerThreshold: 3,
			ProbeInterval:    "3s",
			Heartbeat:        "5s",
		},
	}
}

// Header modes.
const (
	headersIETF   = 1
	headersLegacy = 2
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
	// rule matching; the top-level policy matches everything
	pathPrefix string
	methods    []string
}

// settings is a validated, compiled Config.
type settings struct {
	class     string
	headerTag string  // class, NUL, "h:": what a header identity is hashed after (clientKey)
	byHeader  bool    // clients keyed by a header (source.header), not sharded: decide's common case
	top       *policy // nil when Average is 0
	rules     []*policy
	source    sourceCriterion
	headers   int
	decision  string // DecisionHeader, canonical; "" when off
	redis     redisSettings
	replicas  int64 // Replicas: the fallback's divisor until a heartbeat count is seen
	shards    int64 // sub-buckets per client bucket; 1: not sharded
	digits    int   // width of the shard number in keys
	keyLen    int   // length of a client key in Redis (sharded or not)
	disabled  bool  // no policy at all
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
	burst = orDefault(burst, 1)
	cost = orDefault(cost, 1)
	if burst < cost {
		return nil, fmt.Errorf("%sburst: %d is less than cost %d: no request could ever pass", prefix, burst, cost)
	}
	interval := float64(per.Microseconds()) / float64(average)
	if interval < 1e-3 {
		return nil, fmt.Errorf("%saverage: %d per %s is faster than one token per ns", prefix, average, per)
	}
	p := &policy{
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
	s.replicas = orDefault(cfg.Replicas, 1)
	s.shards = orDefault(cfg.Shards, 1)
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
		period = "1s"
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
		p, err := compileLimit(field+".", r.Average, rp, r.Burst, orDefault(r.Cost, orDefault(cfg.Cost, 1)))
		if err != nil {
			return nil, err
		}
		if p.failClosed, err = failureMode(field+".failureMode", r.FailureMode, topClosed); err != nil {
			return nil, err
		}
		p.name = r.Name
		p.keySuffix = ":" + r.Name
		p.pathPrefix = r.PathPrefix
		for _, m := range r.Methods {
			if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
				p.methods = append(p.methods, m)
			}
		}
		s.rules = append(s.rules, p)
	}
	for _, p := range append(s.rules, s.top) {
		if p == nil {
			continue
		}
		if err := p.split(s.shards); err != nil {
			return nil, err
		}
	}
	if len(s.rules) > maxRules {
		return nil, fmt.Errorf("rules: %d rules, at most %d are allowed", len(s.rules), maxRules)
	}
	s.disabled = s.top == nil && len(s.rules) == 0

	switch strings.ToLower(strings.TrimSpace(cfg.Headers)) {
	case "", "ietf":
		s.headers = headersIETF
	case "legacy":
		s.headers = headersLegacy
	case "both":
		s.headers = headersIETF | headersLegacy
	case "none":
		s.headers = 0
	default:
		return nil, fmt.Errorf("headers: %q is not ietf, legacy, both or none", cfg.Headers)
	}
	if h := strings.TrimSpace(cfg.DecisionHeader); h != "" {
		if !validHeaderName(h) {
			return nil, fmt.Errorf("decisionHeader: %q is not a header name", cfg.DecisionHeader)
		}
		s.decision = http.CanonicalHeaderKey(h)
	}
	if s.source, err = compileSource(cfg.SourceCriterion); err != nil {
		return nil, err
	}
	s.byHeader = s.source.header != "" && s.shards <= 1
	if s.redis, err = compileRedis(&cfg.Redis); err != nil {
		return nil, err
	}
	return s, nil
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

// maxPasswordFile is the size of the largest redis.passwordFile, in bytes.
const maxPasswordFile = 4096

// readPasswordFile reads the password in redis.passwordFile. The path comes
// from the dynamic configuration, whose author may not be whoever runs
// Traefik, so the file must be a regular file (a symlink to one is followed:
// Kubernetes mounts secrets so) of at most maxPasswordFile bytes holding one
// line of printable characters; a trailing "\n" or "\r\n" is trimmed.
// Anything else is an error naming the field and the path, and is never sent
// to Redis: a FIFO would block New, a device such as /dev/zero would never
// end, a multi-line file (a key, /etc/passwd, /proc/self/environ) is no
// password, and an empty one would silently turn AUTH off. The error never
// quotes the file's content.
func readPasswordFile(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("redis.passwordFile: reading %q: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("redis.passwordFile: %q is not a regular file (mode %s)", path, fi.Mode())
	}
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("redis.passwordFile: reading %q: %w", path, err)
	}
	defer f.Close()
	// Again on what was opened, in case the path changed since os.Stat.
	if fi, err = f.Stat(); err != nil {
		return "", fmt.Errorf("redis.passwordFile: reading %q: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("redis.passwordFile: %q is not a regular file (mode %s)", path, fi.Mode())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxPasswordFile+1))
	if err != nil {
		return "", fmt.Errorf("redis.passwordFile: reading %q: %w", path, err)
	}
	if len(b) > maxPasswordFile {
		return "", fmt.Errorf("redis.passwordFile: %q is larger than %d bytes", path, maxPasswordFile)
	}
	pass := string(b)
	if strings.HasSuffix(pass, "\n") {
		pass = strings.TrimSuffix(strings.TrimSuffix(pass, "\n"), "\r")
	}
	if pass == "" {
		return "", fmt.Errorf("redis.passwordFile: %q is empty", path)
	}
	for i := 0; i < len(pass); i++ {
		c := pass[i]
		if c == '\n' || c == '\r' {
			return "", fmt.Errorf("redis.passwordFile: %q holds more than one line", path)
		}
		if c < ' ' || c == 0x7f {
			return "", fmt.Errorf("redis.passwordFile: %q holds a control character (at byte %d)", path, i)
		}
	}
	return pass, nil
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
	switch strings.ToLower(strings.TrimSpace(c.Mode)) {
	case "", "standalone":
		r.mode = modeStandalone
	case "sentinel":
		r.mode = modeSentinel
		if r.masterName = strings.TrimSpace(c.MasterName); r.masterName == "" {
			return r, errors.New("redis.masterName: required in sentinel mode")
		}
		r.sentinelUser, r.sentinelPass = c.SentinelUsername, c.SentinelPassword
	case "cluster":
		r.mode = modeCluster
		if c.DB != 0 {
			return r, fmt.Errorf("redis.db: %d, but Redis Cluster has only database 0", c.DB)
		}
	default:
		return r, fmt.Errorf("redis.mode: %q is not standalone, sentinel or cluster", c.Mode)
	}
	if c.Password != "" && c.PasswordFile != "" {
		return r, errors.New("redis.password and redis.passwordFile are both set: use one")
	}
	if c.PasswordFile != "" {
		pass, err := readPasswordFile(c.PasswordFile)
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
	r.useTLS = c.TLS.CA != "" || c.TLS.Cert != "" || c.TLS.InsecureSkipVerify
	var err error
	to := c.Timeout
	if strings.TrimSpace(to) == "" {
		to = "5ms"
	}
	if r.timeout, err = positiveDuration("redis.timeout", to); err != nil {
		return r, err
	}
	pi := c.ProbeInterval
	if strings.TrimSpace(pi) == "" {
		pi = "3s"
	}
	if r.probeInterval, err = positiveDuration("redis.probeInterval", pi); err != nil {
		return r, err
	}
	hb := c.Heartbeat
	if strings.TrimSpace(hb) == "" {
		hb = "5s"
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
	r.poolSize = int(orDefault(c.PoolSize, 64))
	r.breakerThreshold = orDefault(c.BreakerThreshold, 3)
	r.probeNS = int64(r.probeInterval)
	return r, nil
}
