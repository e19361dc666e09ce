package config

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/usage"
)

// Policy is one compiled limit: a bucket of one kind (Kind) with its
// name, key suffix, failure mode and what it reads (the request's methods
// and path for a rule's, the response's cost). Kind says which of its
// shapes is set and what its bucket's three script arguments and three
// decision slots mean (bucket.Kind):
//
//	bucket.Rate   Lim and Shard (the whole limit, one shard's); Lease when it leases
//	bucket.Quota  Quota (limit, window, zone); Lim's burst is the limit, for the local view
//	bucket.Cap    Cap (max, maxDuration, class key); Lim's burst is max
//
// A Policy is built by Compile and read by every request of its
// middleware, never written after New (Metrics is set by New; Quota's
// window cache has its own lock).
type Policy struct {
	Kind       bucket.Kind
	Name       string       // policy name in headers; "" key suffix for the top level
	KeySuffix  string       // appended to the client's key; "" for the top level
	Lim        bucket.Limit // the whole limit (and the local fallback's base)
	Shard      bucket.Limit // one sub-bucket in Redis: lim when not sharded
	Average    int64
	PeriodUS   float64 // the period, µs
	PeriodSecs int64   // w in RateLimit-Policy
	FailClosed bool
	Shadow     bool            // never refuses (Config.Shadow)
	Lease      LeaseShape      // the top level's and a plan's (Config.Lease); max 0: none
	Quota      *QuotaShape     // a calendar quota (quota.go); nil: a rate
	RespCost   *usage.Shape    // its owner's response cost (the root's costs.go); nil: none
	Cap        *CapShape       // a concurrency cap (caps.go); nil: none
	Metrics    *metrics.Policy // its counters (internal/metrics); set by New
	// rule matching; the top-level policy matches everything
	PathPrefix string
	Methods    []string
	Source     *Source // a rule's own client identity; nil: the top level's
	// RegionPPM is the region's static share of the limit in ppm, passed to
	// the script: positive when the share follows demand, negative when
	// it stays static (failing closed, or keyed its own way); 0 without
	// regions (region.go).
	RegionPPM int64
}

// CompileLimit validates one bucket's numbers and returns its policy.
// prefix is "" for the top level or "rules[i]." for a rule.
func CompileLimit(prefix string, average int64, period string, burst, cost int64) (*Policy, error) {
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
	if refill := interval * float64(burst); refill > maxRefillUS {
		return nil, fmt.Errorf("%sburst: %d tokens at %d per %s refill in %.0f years, more than the %.0f years a bucket may take (lower burst or period, or raise average)",
			prefix, burst, average, per, refill/usPerYear, maxRefillUS/usPerYear)
	}
	p := &Policy{
		Kind:       bucket.Rate,
		Metrics:    &metrics.Policy{}, // New's are the registry's
		Lim:        bucket.Limit{Interval: interval, Burst: float64(burst), Cost: float64(cost)},
		Average:    average,
		PeriodSecs: int64(per.Seconds()),
		PeriodUS:   float64(per.Microseconds()),
	}
	p.Shard = p.Lim
	if p.PeriodSecs < 1 {
		p.PeriodSecs = 1
	}
	return p, nil
}

// usPerYear is a year of 365.25 days, in µs.
const usPerYear = 365.25 * 24 * 3600 * 1e6

// maxRefillUS bounds the time an empty bucket takes to refill (burst
// tokens at average per period), in µs: 100 years. Every wait and expiry
// then fits the script's integers and a time.Duration (MaxWaitMS).
const maxRefillUS = 100 * usPerYear

// maxPlans bounds Plans.
const maxPlans = 64

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

// MaxRules bounds the rules of one middleware (rule sets are cached by bitmask).
const MaxRules = 32

// maxShards bounds Shards.
const maxShards = 1024

// split sets the sub-bucket shape for n shards: 1/n of the rate and of the
// burst (a fraction of a token is fine: the capacities add up to the
// limit's).
func (p *Policy) Split(n int64) error {
	p.Shard = p.Lim
	if n <= 1 {
		return nil
	}
	p.Shard.Interval *= float64(n)
	p.Shard.Burst /= float64(n)
	if p.Shard.Burst < p.Shard.Cost {
		field := "burst"
		if p.KeySuffix != "" {
			field = "rules[" + p.Name + "].burst"
		}
		return fmt.Errorf("%s: %v split over %d shards leaves %.3g tokens per shard, less than one request's cost (%v)",
			field, p.Lim.Burst, n, p.Shard.Burst, p.Lim.Cost)
	}
	return nil
}

// compileQuotas compiles the quotas of one owner (field: "quotas",
// "plans[i].quotas", "rules[i].quotas"): each a policy charged with the
// owner's cost, failure mode, shadow and client identity, its key the
// client's plus suffix (a rule's own: "" for the top level and plans)
// and its name; owner nil is the top level without a rate (cost,
// failClosed, shadow given). names holds the names taken (class, rules,
// plans): a quota may take none of them, nor one of its owner's.
func compileQuotas(field string, qs []Quota, owner *Policy, suffix string, cost int64, failClosed, shadow bool, names map[string]bool) ([]*Policy, error) {
	if len(qs) > maxQuotas {
		return nil, fmt.Errorf("%s: %d quotas, at most %d are allowed", field, len(qs), maxQuotas)
	}
	var source *Source
	if owner != nil {
		cost, failClosed, shadow = int64(owner.Lim.Cost), owner.FailClosed, owner.Shadow
		source = owner.Source
	}
	own := map[string]bool{}
	var out []*Policy
	for i, q := range qs {
		f := fmt.Sprintf("%s[%d]", field, i)
		if err := CheckName(f+".name", q.Name); err != nil {
			return nil, err
		}
		if names[q.Name] || own[q.Name] || owner != nil && owner.Name == q.Name {
			return nil, fmt.Errorf("%s.name: %q is used twice (quotas, plans, rules and the class share one namespace)", f, q.Name)
		}
		own[q.Name] = true
		if q.Limit <= 0 || q.Limit > maxQuotaLimit {
			return nil, fmt.Errorf("%s.limit: %d must be from 1 to %d", f, q.Limit, int64(maxQuotaLimit))
		}
		if q.Limit < cost {
			return nil, fmt.Errorf("%s.limit: %d is less than the cost %d: no request could ever pass", f, q.Limit, cost)
		}
		kind, err := bucket.ParseWindow(f+".window", q.Window)
		if err != nil {
			return nil, err
		}
		loc, err := bucket.LoadZone(f+".timezone", q.Timezone)
		if err != nil {
			return nil, err
		}
		p := &Policy{
			Name:       q.Name,
			KeySuffix:  suffix + ":" + q.Name,
			Lim:        bucket.Limit{Interval: 1e-3, Burst: float64(q.Limit), Cost: float64(cost)},
			Average:    q.Limit,
			PeriodSecs: 1,
			FailClosed: failClosed,
			Shadow:     shadow,
			Source:     source,
			Kind:       bucket.Quota,
			Quota:      &QuotaShape{Limit: q.Limit, Kind: kind, Loc: loc},
		}
		p.Shard = p.Lim
		out = append(out, p)
	}
	return out, nil
}
