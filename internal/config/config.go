// Package config is Tollgate's configuration in, its compiled model out:
// the schema Traefik decodes (Config and its parts, Default), the field
// parsers, secrets and Redis settings, and Compile, which validates a
// Config and returns the Settings and Policies a middleware runs on. It
// is cold code: the root package's New calls it, never a request.
package config

// Config is the plugin's dynamic configuration. Traefik decodes it with
// mapstructure (WeaklyTypedInput, case-insensitive names, lists split on
// ","), so every field also decodes from strings (Docker labels). Durations
// are strings: a Go duration ("1m", "250ms") or bare seconds ("60", "0.5").
type Config struct {
	// Average is the number of tokens refilled per Period. 0: no top-level
	// rate (rules, plans, quotas or a cap still apply; a middleware with
	// none of them is an error). Default 0.
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
	// Lease lets a pod serve a hot client from tokens reserved for it in
	// Redis (see Lease). Default off.
	Lease Lease `json:"lease,omitempty" yaml:"lease,omitempty" toml:"lease,omitempty"`
	// Quotas are calendar quotas charged with the top-level limit (see
	// Quota); with average 0 they apply alone. At most 8. Default none.
	Quotas []Quota `json:"quotas,omitempty" yaml:"quotas,omitempty" toml:"quotas,omitempty"`
	// ResponseCost charges what the response says a request cost (see
	// ResponseCost). Default none.
	ResponseCost *ResponseCost `json:"responseCost,omitempty" yaml:"responseCost,omitempty" toml:"responseCost,omitempty"`
	// Concurrency caps the requests in flight across every replica (see
	// Concurrency); with average 0 it applies alone. Default none.
	Concurrency *Concurrency `json:"concurrency,omitempty" yaml:"concurrency,omitempty" toml:"concurrency,omitempty"`
	// Rules add buckets for matching requests; every matching rule is charged
	// together with the top-level limit, all or nothing. Default none.
	Rules []Rule `json:"rules,omitempty" yaml:"rules,omitempty" toml:"rules,omitempty"`
	// PlanHeader names the request header that carries the client's plan
	// (Plans). Set it from the authentication layer (forwardAuth's
	// authResponseHeaders), which replaces what the client sent; never
	// trust a client's own. Default "": no plans.
	PlanHeader string `json:"planHeader,omitempty" yaml:"planHeader,omitempty" toml:"planHeader,omitempty"`
	// DefaultPlan is the plan of a request whose PlanHeader is missing or
	// names no plan. Default "": the top-level limit (Average) applies.
	DefaultPlan string `json:"defaultPlan,omitempty" yaml:"defaultPlan,omitempty" toml:"defaultPlan,omitempty"`
	// Plans replace the top-level limit for the clients whose PlanHeader
	// names them; rules still apply. Each plan is a policy of its own (its
	// name in the RateLimit headers and the metrics) with a bucket of its
	// own per client. At most 64.
	Plans []Plan `json:"plans,omitempty" yaml:"plans,omitempty" toml:"plans,omitempty"`
	// ExemptSourceRange lists client IPs and CIDRs never limited: their
	// requests pass untouched (no Redis call, no RateLimit headers). The
	// client IP is the top level's sourceCriterion.ipStrategy's (or the
	// connection's address). Default none.
	ExemptSourceRange []string `json:"exemptSourceRange,omitempty" yaml:"exemptSourceRange,omitempty" toml:"exemptSourceRange,omitempty"`
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
	// without a Redis call) or "unavailable" (503, a policy fails closed),
	// followed by ";shadow" when shadow policies alone would have refused
	// the request (Shadow). For access logs and dashboards (Traefik's
	// access log can keep response headers).
	// Empty (default): not sent.
	DecisionHeader string `json:"decisionHeader,omitempty" yaml:"decisionHeader,omitempty" toml:"decisionHeader,omitempty"`
	// Shadow checks and charges requests as when enforcing but never
	// refuses them (no 429, no 503): a request the top-level limit would
	// refuse passes, is counted (tollgate_requests_total, result
	// "shadow_limited"), marked in DecisionHeader ("redis;shadow") and
	// logged at most once per redis.probeInterval. Rules default to it.
	// Default false.
	Shadow bool `json:"shadow,omitempty" yaml:"shadow,omitempty" toml:"shadow,omitempty"`
	// ServeMetrics makes this middleware a metrics endpoint: it answers
	// every request with the Prometheus text exposition of every Tollgate
	// middleware's counters in the process (every class: see
	// MetricsClasses), and applies no limit (so it takes no average, rules
	// or shadow). Put it on a router of an internal entry point. Default
	// false.
	ServeMetrics bool `json:"serveMetrics,omitempty" yaml:"serveMetrics,omitempty" toml:"serveMetrics,omitempty"`
	// MetricsClasses, on a serveMetrics middleware, restricts what it
	// serves to the series of these classes (requests, near the limit,
	// the fallback's divisor); the process-wide, Redis and region series
	// are left out. For an endpoint a tenant may read: the default shows
	// every class of the process. At most 64 names (from labels:
	// comma-separated). Default none: every series.
	MetricsClasses []string `json:"metricsClasses,omitempty" yaml:"metricsClasses,omitempty" toml:"metricsClasses,omitempty"`
	// ServeAdmin makes this middleware the operators' endpoint for the
	// classes in AdminClasses (docs/admin.md): GET shows a client key's
	// state, DELETE refills it (or drops its override), PUT sets a per-key
	// override of the class's top-level limit. Like serveMetrics it
	// answers every request it sees and applies no limit. Put it on an
	// internal entry point behind basicAuth or ipAllowList. Default false.
	ServeAdmin bool `json:"serveAdmin,omitempty" yaml:"serveAdmin,omitempty" toml:"serveAdmin,omitempty"`
	// AdminClasses names the classes a serveAdmin middleware may see and
	// change; required with serveAdmin, at most 64 (from labels:
	// comma-separated).
	AdminClasses []string `json:"adminClasses,omitempty" yaml:"adminClasses,omitempty" toml:"adminClasses,omitempty"`
	// MaxOverrides bounds the per-key overrides of this middleware's class
	// that each pod keeps (set through a serveAdmin middleware); past it,
	// the overrides that expire first are honoured. Default 10000; at
	// most 30000.
	MaxOverrides int64 `json:"maxOverrides,omitempty" yaml:"maxOverrides,omitempty" toml:"maxOverrides,omitempty"`
	// Redis is the shared store.
	Redis RedisConfig `json:"redis,omitempty" yaml:"redis,omitempty" toml:"redis,omitempty"`
	// Region, when set, makes this fleet one region of several, each with
	// its own Redis, holding a share of every limit that follows the
	// clients' traffic (region.go). Without it nothing changes.
	Region *RegionConfig `json:"region,omitempty" yaml:"region,omitempty" toml:"region,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// RegionConfig names this fleet's region and the other regions' Redis.
// Every region must list the same regions with the same weights and the
// same limits; each names itself in name and the others in peers.
type RegionConfig struct {
	// Name is this region's name (printable, no spaces).
	Name string `json:"name,omitempty" yaml:"name,omitempty" toml:"name,omitempty"`
	// Weight is this region's static weight: its static share of every
	// limit is weight over the sum of every region's weight. Default 1.
	Weight int64 `json:"weight,omitempty" yaml:"weight,omitempty" toml:"weight,omitempty"`
	// Interval is how often shares are rebalanced (a duration, or bare
	// seconds). Default 5s; at least 100ms.
	Interval string `json:"interval,omitempty" yaml:"interval,omitempty" toml:"interval,omitempty"`
	// Peers are the other regions, at most 8.
	Peers []PeerConfig `json:"peers,omitempty" yaml:"peers,omitempty" toml:"peers,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// PeerConfig is another region: its name, weight and Redis, read and
// written only by the exchange, never on a request's path. The Redis
// fields mean what they mean under redis; timeout defaults to 1s.
type PeerConfig struct {
	Name                 string    `json:"name,omitempty" yaml:"name,omitempty" toml:"name,omitempty"`
	Weight               int64     `json:"weight,omitempty" yaml:"weight,omitempty" toml:"weight,omitempty"`
	Mode                 string    `json:"mode,omitempty" yaml:"mode,omitempty" toml:"mode,omitempty"`
	Endpoints            []string  `json:"endpoints,omitempty" yaml:"endpoints,omitempty" toml:"endpoints,omitempty"`
	MasterName           string    `json:"masterName,omitempty" yaml:"masterName,omitempty" toml:"masterName,omitempty"`
	SentinelUsername     string    `json:"sentinelUsername,omitempty" yaml:"sentinelUsername,omitempty" toml:"sentinelUsername,omitempty"`
	SentinelPassword     string    `json:"sentinelPassword,omitempty" yaml:"sentinelPassword,omitempty" toml:"sentinelPassword,omitempty"`
	SentinelPasswordFile string    `json:"sentinelPasswordFile,omitempty" yaml:"sentinelPasswordFile,omitempty" toml:"sentinelPasswordFile,omitempty"`
	Username             string    `json:"username,omitempty" yaml:"username,omitempty" toml:"username,omitempty"`
	Password             string    `json:"password,omitempty" yaml:"password,omitempty" toml:"password,omitempty"`
	PasswordFile         string    `json:"passwordFile,omitempty" yaml:"passwordFile,omitempty" toml:"passwordFile,omitempty"`
	DB                   int64     `json:"db,omitempty" yaml:"db,omitempty" toml:"db,omitempty"`
	TLS                  TLSConfig `json:"tls,omitempty" yaml:"tls,omitempty" toml:"tls,omitempty"`
	Timeout              string    `json:"timeout,omitempty" yaml:"timeout,omitempty" toml:"timeout,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// SourceCriterion mirrors Traefik's rateLimit sourceCriterion.
type SourceCriterion struct {
	// RequestHeaderName keys clients by this header's value; when the header
	// is absent the client IP (IPStrategy) is used.
	RequestHeaderName string `json:"requestHeaderName,omitempty" yaml:"requestHeaderName,omitempty" toml:"requestHeaderName,omitempty"`
	// RequestHeaderNames keys clients by the values of these headers
	// together, one value (the first line) of each: [X-Tenant, X-User]
	// gives tenant a's user 1 a bucket of its own. When one of them is
	// absent or empty, the client IP (IPStrategy) is used. At most 8, each
	// named once; one name is RequestHeaderName. Not with
	// RequestHeaderName or RequestHost. Default none; labels write it
	// comma-separated.
	RequestHeaderNames []string `json:"requestHeaderNames,omitempty" yaml:"requestHeaderNames,omitempty" toml:"requestHeaderNames,omitempty"`
	// RequestHost keys clients by the request's Host.
	RequestHost bool `json:"requestHost,omitempty" yaml:"requestHost,omitempty" toml:"requestHost,omitempty"`
	// IPStrategy picks the client IP.
	IPStrategy *IPStrategy `json:"ipStrategy,omitempty" yaml:"ipStrategy,omitempty" toml:"ipStrategy,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// IPStrategy mirrors Traefik's ipStrategy.
type IPStrategy struct {
	// Depth takes the Depth-th address from the right of X-Forwarded-For.
	// 0 (default) uses the connection's address (or ExcludedIPs).
	Depth int64 `json:"depth,omitempty" yaml:"depth,omitempty" toml:"depth,omitempty"`
	// ExcludedIPs (IPs or CIDRs) are skipped, from the right of
	// X-Forwarded-For; the first address not excluded is the client.
	ExcludedIPs []string `json:"excludedIPs,omitempty" yaml:"excludedIPs,omitempty" toml:"excludedIPs,omitempty"`
	// IPv6Subnet groups IPv6 clients by this prefix length (1-128; 128
	// keys each address on its own). 0 (default): 64, a subscriber's
	// usual allocation (a client rotating its addresses within its /64
	// would otherwise multiply its limit).
	IPv6Subnet int64 `json:"ipv6Subnet,omitempty" yaml:"ipv6Subnet,omitempty" toml:"ipv6Subnet,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// Plan is a client's tier (Config.Plans): a top-level limit of its own.
type Plan struct {
	// Name names the plan: the PlanHeader value that selects it, its
	// policy's name. Required, unique among plans, rules and the class.
	Name string `json:"name,omitempty" yaml:"name,omitempty" toml:"name,omitempty"`
	// Average, Period, Burst, Cost and FailureMode as at the top level
	// (Period, Cost and FailureMode default to the top level's).
	Average     int64  `json:"average,omitempty" yaml:"average,omitempty" toml:"average,omitempty"`
	Period      string `json:"period,omitempty" yaml:"period,omitempty" toml:"period,omitempty"`
	Burst       int64  `json:"burst,omitempty" yaml:"burst,omitempty" toml:"burst,omitempty"`
	Cost        int64  `json:"cost,omitempty" yaml:"cost,omitempty" toml:"cost,omitempty"`
	FailureMode string `json:"failureMode,omitempty" yaml:"failureMode,omitempty" toml:"failureMode,omitempty"`
	// Lease as at the top level; unset means the top level's.
	Lease *Lease `json:"lease,omitempty" yaml:"lease,omitempty" toml:"lease,omitempty"`
	// Quotas replace the top level's for the plan's clients; unset means
	// the top level's.
	Quotas []Quota `json:"quotas,omitempty" yaml:"quotas,omitempty" toml:"quotas,omitempty"`
	// ResponseCost as at the top level; unset means the top level's.
	ResponseCost *ResponseCost `json:"responseCost,omitempty" yaml:"responseCost,omitempty" toml:"responseCost,omitempty"`
	// Concurrency as at the top level; unset means the top level's.
	Concurrency *Concurrency `json:"concurrency,omitempty" yaml:"concurrency,omitempty" toml:"concurrency,omitempty"`
	// Unlimited: the plan's clients pass the top-level limit (no bucket,
	// no RateLimit headers of it); rules still apply.
	Unlimited bool `json:"unlimited,omitempty" yaml:"unlimited,omitempty" toml:"unlimited,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// Lease: when Redis admits a request and the client's buckets, after it,
// still hold at least 2 x Max x the pods counted requests' worth, the same
// script call reserves Max more for this pod, charged at once; the pod
// admits the client's next Max requests itself, with no Redis call,
// until they are spent or TTL ends. Tokens left at the end go back to the
// bucket. Near the limit nothing is leased, so refusals stay Redis's.
type Lease struct {
	// Max is the requests one lease holds. 0 (default) turns leases off.
	Max int64 `json:"max,omitempty" yaml:"max,omitempty" toml:"max,omitempty"`
	// TTL is how long a lease may be spent. Default "1s"; at most "10s".
	TTL string `json:"ttl,omitempty" yaml:"ttl,omitempty" toml:"ttl,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// Rule is an extra bucket charged for the requests it matches.
type Rule struct {
	// Name names the policy (headers, bucket key); required, unique.
	Name string `json:"name,omitempty" yaml:"name,omitempty" toml:"name,omitempty"`
	// PathPrefix matches request paths starting with it: a string prefix
	// of the decoded path, case-sensitive, not by segment. "" matches all.
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
	// SourceCriterion keys this rule's clients its own way (e.g. a login
	// limit by IP while the top level keys by API key, so that fresh API
	// keys gain nothing). Default: the top level's. In cluster mode its
	// buckets are charged in a script of their own (decideGroups).
	SourceCriterion *SourceCriterion `json:"sourceCriterion,omitempty" yaml:"sourceCriterion,omitempty" toml:"sourceCriterion,omitempty"`
	// Shadow: see Config.Shadow; "" means the top level's. A string so
	// that a rule can turn off the top level's shadow ("false").
	Shadow string `json:"shadow,omitempty" yaml:"shadow,omitempty" toml:"shadow,omitempty"`
	// Quotas are charged with the rule, under its client identity.
	Quotas []Quota `json:"quotas,omitempty" yaml:"quotas,omitempty" toml:"quotas,omitempty"`
	// ResponseCost for the rule's bucket and quotas; unset: none.
	ResponseCost *ResponseCost `json:"responseCost,omitempty" yaml:"responseCost,omitempty" toml:"responseCost,omitempty"`
	// Concurrency caps the rule's requests in flight; unset: none.
	Concurrency *Concurrency `json:"concurrency,omitempty" yaml:"concurrency,omitempty" toml:"concurrency,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// ResponseCost: after the backend answers, what the response says the
// request cost (Header's value, or the sum of JSONFields in its body),
// less the cost the request was charged, is charged to the same bucket
// and quotas, off the response's path; the bucket may go into debt. A
// value that is no integer from 0 to Max charges nothing more and is
// counted. Only a route with a ResponseCost has its ResponseWriter
// wrapped (the body read as it streams, never held back).
type ResponseCost struct {
	// Header names the response header, e.g. X-Usage-Tokens: a decimal
	// integer, one line. When JSONFields are set too, the header wins
	// when the response has it. Default "": none.
	Header string `json:"header,omitempty" yaml:"header,omitempty" toml:"header,omitempty"`
	// JSONFields are dotted paths into a JSON body (application/json,
	// +json) or into the JSON events of a text/event-stream, e.g.
	// [usage.total_tokens] or [usage.input_tokens, usage.output_tokens]:
	// the cost is their sum (in a stream, each path's last value). At
	// most 8 paths of at most 8 keys. Default none. Header or JSONFields
	// is required.
	JSONFields []string `json:"jsonFields,omitempty" yaml:"jsonFields,omitempty" toml:"jsonFields,omitempty"`
	// MaxScan bounds the bytes of a JSON body kept to be read: its last
	// MaxScan bytes (the usage object ends a body). Bytes; default
	// 1048576 (1 MiB), at most 16 MiB.
	MaxScan int64 `json:"maxScan,omitempty" yaml:"maxScan,omitempty" toml:"maxScan,omitempty"`
	// Max is the largest cost a response may name; required, > 0.
	Max int64 `json:"max,omitempty" yaml:"max,omitempty" toml:"max,omitempty"`
	// KeepHeader lets Header reach the client; by default it is taken
	// out of the response (it is the backend's word to the limiter).
	KeepHeader bool `json:"keepHeader,omitempty" yaml:"keepHeader,omitempty" toml:"keepHeader,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// Concurrency caps the requests in flight, across every replica, of
// each client (Key "client") or of its owner as a whole (Key "class"): a
// request takes a slot in the same script call as its rates, before the
// backend, and gives it back when the backend's response is done. A slot
// is held at most MaxDuration (a replica that dies holding slots).
type Concurrency struct {
	// Max is the requests in flight allowed; required, > 0.
	Max int64 `json:"max,omitempty" yaml:"max,omitempty" toml:"max,omitempty"`
	// Key is "client" (default: each client its own Max) or "class" (all
	// of the owner's clients together).
	Key string `json:"key,omitempty" yaml:"key,omitempty" toml:"key,omitempty"`
	// MaxDuration is the longest a slot is held. Default "60s"; at most
	// "24h".
	MaxDuration string `json:"maxDuration,omitempty" yaml:"maxDuration,omitempty" toml:"maxDuration,omitempty"`
	// Name names the cap in headers, problems and metrics. Default: the
	// class for a cap alone at the top level (average 0), else the
	// owner's name and "-concurrency".
	Name string `json:"name,omitempty" yaml:"name,omitempty" toml:"name,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// Quota is a calendar quota: at most Limit requests' cost per client in
// each calendar window (the hour, day, ISO week or month of Timezone),
// charged in the same script call as the rates it sits beside, all or
// nothing. Its counter lives in Redis until its window ends.
type Quota struct {
	// Name names the quota in headers, problems and metrics; required,
	// unique among the class, rules, plans and the owner's quotas. Plans'
	// quotas of one name share their counter (a client that changes plan
	// keeps its count).
	Name string `json:"name,omitempty" yaml:"name,omitempty" toml:"name,omitempty"`
	// Limit is the cost allowed per window; required, > 0.
	Limit int64 `json:"limit,omitempty" yaml:"limit,omitempty" toml:"limit,omitempty"`
	// Window is "hour", "day", "week" (ISO: from Monday) or "month".
	Window string `json:"window,omitempty" yaml:"window,omitempty" toml:"window,omitempty"`
	// Timezone is the IANA zone whose calendar the windows follow
	// ("Europe/Berlin"). Default "UTC".
	Timezone string `json:"timezone,omitempty" yaml:"timezone,omitempty" toml:"timezone,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
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
	// Name names the deployment in the metrics (the redis label).
	// Default: the endpoints as written, comma-separated (sentinel: the
	// masterName). Never holds a password.
	Name string `json:"name,omitempty" yaml:"name,omitempty" toml:"name,omitempty"`
	// MasterName is the primary's name in Sentinel; required in sentinel
	// mode.
	MasterName string `json:"masterName,omitempty" yaml:"masterName,omitempty" toml:"masterName,omitempty"`
	// SentinelUsername and SentinelPassword authenticate to the sentinels
	// (Username and Password are the data nodes'). Default "": no AUTH.
	SentinelUsername string `json:"sentinelUsername,omitempty" yaml:"sentinelUsername,omitempty" toml:"sentinelUsername,omitempty"`
	SentinelPassword string `json:"sentinelPassword,omitempty" yaml:"sentinelPassword,omitempty" toml:"sentinelPassword,omitempty"`
	// SentinelPasswordFile is read for SentinelPassword, as PasswordFile
	// is for Password; exclusive with SentinelPassword.
	SentinelPasswordFile string `json:"sentinelPasswordFile,omitempty" yaml:"sentinelPasswordFile,omitempty" toml:"sentinelPasswordFile,omitempty"`
	// Username for Redis ACL (AUTH username password). Default "".
	Username string `json:"username,omitempty" yaml:"username,omitempty" toml:"username,omitempty"`
	// Password for AUTH. Default "" (no AUTH). Traefik's API and dashboard
	// show it as written: prefer PasswordFile.
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
	// request's clock, when that one carries as many as there are
	// connections open (about sqrt(concurrency) connections). 0 means 64.
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
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// TLSConfig holds file paths (PEM) and the verification switch.
type TLSConfig struct {
	// Enabled turns TLS on with nothing else set: the server verified
	// against the system's roots. Setting CA, Cert or InsecureSkipVerify
	// turns it on too.
	Enabled bool `json:"enabled,omitempty" yaml:"enabled,omitempty" toml:"enabled,omitempty"`
	// CA is a PEM bundle the server's certificate is verified against;
	// empty: the system's roots. At most 1 MiB, a regular file.
	CA                 string `json:"ca,omitempty" yaml:"ca,omitempty" toml:"ca,omitempty"`
	Cert               string `json:"cert,omitempty" yaml:"cert,omitempty" toml:"cert,omitempty"`
	Key                string `json:"key,omitempty" yaml:"key,omitempty" toml:"key,omitempty"`
	InsecureSkipVerify bool   `json:"insecureSkipVerify,omitempty" yaml:"insecureSkipVerify,omitempty" toml:"insecureSkipVerify,omitempty"`
	// Unknown holds the options Traefik found no field for (words.go):
	// New refuses the config when it holds any.
	Unknown map[string]interface{} `json:"-" yaml:"-" toml:"-" mapstructure:",remain"`
}

// Default returns the default configuration; Traefik decodes the
// middleware's options over it.
func Default() *Config {
	return &Config{
		Period:      defaultPeriod,
		Burst:       defaultBurst,
		Cost:        defaultCost,
		FailureMode: "open",
		Replicas:    defaultReplicas,
		Headers:     "ietf",
		Redis: RedisConfig{
			Endpoints:        []string{"127.0.0.1:6379"},
			Timeout:          defaultTimeout,
			PoolSize:         defaultPoolSize,
			BreakerThreshold: defaultBreakerThreshold,
			ProbeInterval:    defaultProbeInterval,
			Heartbeat:        defaultHeartbeat,
		},
	}
}

// The defaults of the fields that compile also fills in when a config
// leaves them empty or zero (a config decoded over something else than
// CreateConfig's, e.g. in tests or a catalog loader).
const (
	defaultPeriod           = "1s"
	defaultBurst            = 1
	defaultCost             = 1
	defaultReplicas         = 1
	defaultShards           = 1
	defaultTimeout          = "5ms"
	defaultPoolSize         = 64
	defaultBreakerThreshold = 3
	defaultProbeInterval    = "3s"
	defaultHeartbeat        = "5s"
)
