package config

import (
	"fmt"
	"net/http"
	"strings"
)

// CostShape is a compiled ResponseCost: the header (canonical) and the
// largest cost it may name.
type CostShape struct {
	Header string
	Max    int64
}

// maxResponseCost bounds ResponseCost.Max.
const maxResponseCost = 1000000000000

// compileResponseCost validates rc (field names it); nil: none.
func compileResponseCost(field string, rc *ResponseCost) (*CostShape, error) {
	if rc == nil || strings.TrimSpace(rc.Header) == "" && rc.Max == 0 {
		return nil, nil
	}
	h := strings.TrimSpace(rc.Header)
	if !ValidHeaderName(h) {
		return nil, fmt.Errorf("%s.header: %q is not a header name", field, rc.Header)
	}
	if rc.Max <= 0 || rc.Max > maxResponseCost {
		return nil, fmt.Errorf("%s.max: %d must be from 1 to %d", field, rc.Max, int64(maxResponseCost))
	}
	return &CostShape{Header: http.CanonicalHeaderKey(h), Max: rc.Max}, nil
}

// compileResponseCosts compiles the response costs of the top level, the
// plans (unset: the top level's) and the rules onto their policies and
// those policies' quotas.
func compileResponseCosts(cfg *Config, s *Settings) error {
	top, err := compileResponseCost("responseCost", cfg.ResponseCost)
	if err != nil {
		return err
	}
	set := func(shape *CostShape, ps []*Policy) {
		for _, p := range ps {
			p.RespCost = shape
		}
	}
	set(top, s.TopPolicies())
	for i, pl := range cfg.Plans {
		shape := top
		if pl.ResponseCost != nil {
			if shape, err = compileResponseCost(fmt.Sprintf("plans[%d].responseCost", i), pl.ResponseCost); err != nil {
				return err
			}
		}
		if p := s.Plans[i]; p != nil {
			set(shape, s.WithQuotas(p, s.PlanQuotas, i))
		}
	}
	for i, r := range cfg.Rules {
		shape, err := compileResponseCost(fmt.Sprintf("rules[%d].responseCost", i), r.ResponseCost)
		if err != nil {
			return err
		}
		set(shape, s.WithQuotas(s.Rules[i], s.RuleQuotas, i))
	}
	if s.Costed() && (s.Shards > 1 || cfg.Region != nil) {
		return fmt.Errorf("responseCost: not with shards or regions (a response's charge goes to the client's whole bucket in one Redis)")
	}
	return nil
}

// Costed reports whether some policy of s reads a response cost.
func (s *Settings) Costed() bool {
	for _, p := range s.Policies() {
		if p.RespCost != nil {
			return true
		}
	}
	return false
}
