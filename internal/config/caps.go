package config

import (
	"fmt"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/internal/bucket"
)

// compileConcurrency compiles c, owned by owner (nil: the top level
// without a rate, failClosed and shadow given), named field in errors:
// its name (default: ownerName for a cap alone, else ownerName +
// "-concurrency") may not be one of names.
func compileConcurrency(field string, c *Concurrency, owner *Policy, class, ownerName, suffix string, failClosed, shadow bool, names map[string]bool) (*Policy, error) {
	if c.Max <= 0 || c.Max > maxConcurrency {
		return nil, fmt.Errorf("%s.max: %d must be from 1 to %d", field, c.Max, maxConcurrency)
	}
	shape := &CapShape{Max: c.Max, DurUS: int64(defaultMaxDuration / time.Microsecond)}
	switch strings.ToLower(strings.TrimSpace(c.Key)) {
	case "", "client":
	case "class":
		shape.Class = bucket.KeyPrefix + "c:" + class + "}"
	default:
		return nil, fmt.Errorf("%s.key: %q is not client or class", field, c.Key)
	}
	if strings.TrimSpace(c.MaxDuration) != "" {
		d, err := positiveDuration(field+".maxDuration", c.MaxDuration)
		if err != nil {
			return nil, err
		}
		if d > MaxHoldDuration || d < time.Millisecond {
			return nil, fmt.Errorf("%s.maxDuration: %q must be from 1ms to %s", field, c.MaxDuration, MaxHoldDuration)
		}
		shape.DurUS = int64(d / time.Microsecond)
	}
	name := c.Name
	if name == "" {
		name = ownerName
		if owner != nil {
			name += "-concurrency"
		}
	}
	if err := CheckName(field+".name", name); err != nil {
		return nil, err
	}
	if names[name] && (owner != nil || name != class) || owner != nil && owner.Name == name { // a cap alone may take the class's name
		return nil, fmt.Errorf("%s.name: %q is used twice (caps, quotas, plans, rules and the class share one namespace)", field, name)
	}
	var source *Source
	if owner != nil {
		failClosed, shadow, source = owner.FailClosed, owner.Shadow, owner.Source
	}
	p := &Policy{
		Name:       name,
		KeySuffix:  suffix + "}c",
		Lim:        bucket.Limit{Interval: 1e-3, Burst: float64(c.Max), Cost: 1},
		Average:    c.Max,
		PeriodSecs: 1,
		FailClosed: failClosed,
		Shadow:     shadow,
		Source:     source,
		Kind:       bucket.Cap,
		Cap:        shape,
	}
	p.Shard = p.Lim
	return p, nil
}

// compileCaps compiles the caps of the top level (top: its rate, nil
// without one), of the plans (a plan without one has the top level's,
// counted with everyone's: its name, its slots) and of the rules, none
// taking a name of taken (the class, the policies so far; a plan's may
// repeat another plan's, never in one set). It returns the top level's
// cap and the plans' and rules' by index (nil: none).
func compileCaps(cfg *Config, class string, top *Policy, plans, rules []*Policy, planQuotas [][]*Policy, taken map[string]bool, topClosed bool) (*Policy, []*Policy, []*Policy, error) {
	var topCap *Policy
	if c := cfg.Concurrency; c != nil {
		p, err := compileConcurrency("concurrency", c, top, class, class, "", topClosed, cfg.Shadow, taken)
		if err != nil {
			return nil, nil, nil, err
		}
		taken[p.Name] = true
		topCap = p
	}
	planCaps := make([]*Policy, len(plans))
	for i, pl := range cfg.Plans {
		field, c := fmt.Sprintf("plans[%d].concurrency", i), pl.Concurrency
		if c == nil {
			field, c = "concurrency", cfg.Concurrency
		}
		owner := plans[i]
		if c == nil || owner == nil {
			if owner == nil && pl.Concurrency != nil {
				return nil, nil, nil, fmt.Errorf("%s: the plan is unlimited, its cap would limit nothing: set average, or no concurrency", field)
			}
			continue
		}
		own := map[string]bool{}
		for n := range taken {
			own[n] = true
		}
		if i < len(planQuotas) {
			for _, q := range planQuotas[i] {
				own[q.Name] = true
			}
		}
		suffix := owner.KeySuffix
		if pl.Concurrency == nil && topCap != nil {
			inherited := *c
			inherited.Name = topCap.Name
			c, suffix = &inherited, ""
			delete(own, topCap.Name)
		}
		p, err := compileConcurrency(field, c, owner, class, owner.Name, suffix, false, false, own)
		if err != nil {
			return nil, nil, nil, err
		}
		planCaps[i] = p
	}
	for _, p := range planCaps { // a rule's cap may share a set with a plan's
		if p != nil {
			taken[p.Name] = true
		}
	}
	ruleCaps := make([]*Policy, len(rules))
	for i, r := range rules {
		c := cfg.Rules[i].Concurrency
		if c == nil {
			continue
		}
		p, err := compileConcurrency(fmt.Sprintf("rules[%d].concurrency", i), c, r, class, r.Name, r.KeySuffix, false, false, taken)
		if err != nil {
			return nil, nil, nil, err
		}
		taken[p.Name] = true
		ruleCaps[i] = p
	}
	return topCap, planCaps, ruleCaps, nil
}

// checkCaps refuses caps among ps that a Redis Cluster (cluster) cannot
// take in one script: a class's (its key is in another slot than its
// clients') and any beside rules keyed their own way (ownKeys: charged
// group by group).
func checkCaps(ps []*Policy, cluster, ownKeys bool) error {
	if !cluster {
		return nil
	}
	for _, p := range ps {
		if p.Cap == nil {
			continue
		}
		if p.Cap.Class != "" {
			return fmt.Errorf("concurrency (%s): key class is not for a Redis Cluster (the class's slots and its clients' buckets live in different slots): use key client, or a standalone or Sentinel Redis", p.Name)
		}
		if ownKeys {
			return fmt.Errorf("concurrency (%s): not beside rules keyed their own way in a Redis Cluster (their buckets are charged in calls of their own)", p.Name)
		}
	}
	return nil
}

// hasAnyConcurrency reports whether cfg sets a cap anywhere.
func hasAnyConcurrency(cfg *Config) bool {
	if cfg.Concurrency != nil {
		return true
	}
	for _, p := range cfg.Plans {
		if p.Concurrency != nil {
			return true
		}
	}
	for _, r := range cfg.Rules {
		if r.Concurrency != nil {
			return true
		}
	}
	return false
}

// CapShape is a compiled Concurrency.
type CapShape struct {
	Max   int64
	Class string // the owner's class key (key: class): tg{c:<class>}; "" per client
	DurUS int64  // maxDuration, µs
}

const (
	maxConcurrency     = 1000000
	defaultMaxDuration = 60 * time.Second
	MaxHoldDuration    = 24 * time.Hour
)
