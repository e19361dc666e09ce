package config

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/usage"
)

// The bounds of ResponseCost.
const (
	maxResponseCost = 1000000000000
	defaultMaxScan  = 1 << 20
	maxMaxScan      = 16 << 20
)

// compileResponseCost validates rc (field names it); nil: none.
func compileResponseCost(field string, rc *ResponseCost) (*usage.Shape, error) {
	if rc == nil || strings.TrimSpace(rc.Header) == "" && len(rc.JSONFields) == 0 && rc.Max == 0 && rc.MaxScan == 0 && !rc.KeepHeader {
		return nil, nil
	}
	shape := &usage.Shape{KeepHeader: rc.KeepHeader, MaxScan: defaultMaxScan}
	if h := strings.TrimSpace(rc.Header); h != "" {
		if !ValidHeaderName(h) {
			return nil, fmt.Errorf("%s.header: %q is not a header name", field, rc.Header)
		}
		shape.Header = http.CanonicalHeaderKey(h)
		if reservedHeader(shape.Header) {
			return nil, fmt.Errorf("%s.header: %q has a meaning in HTTP: name the backend's own usage header, e.g. X-Usage-Tokens", field, rc.Header)
		}
	}
	if len(rc.JSONFields) > usage.MaxPaths {
		return nil, fmt.Errorf("%s.jsonFields: %d paths, at most %d are allowed", field, len(rc.JSONFields), usage.MaxPaths)
	}
	for i, f := range rc.JSONFields {
		keys, bad := usage.ParsePath(strings.TrimSpace(f))
		if bad != "" {
			return nil, fmt.Errorf("%s.jsonFields[%d]: %q %s", field, i, printableWord(f), bad)
		}
		for j, q := range shape.Paths {
			if pathPrefix(q, keys) || pathPrefix(keys, q) {
				return nil, fmt.Errorf("%s.jsonFields[%d]: %q repeats or contains jsonFields[%d]: a value would be counted twice, or be an object", field, i, printableWord(f), j)
			}
		}
		shape.Paths = append(shape.Paths, keys)
	}
	if shape.Header == "" && shape.Paths == nil {
		return nil, fmt.Errorf("%s: set header or jsonFields (where the response says what it cost)", field)
	}
	if rc.MaxScan < 0 || rc.MaxScan > maxMaxScan {
		return nil, fmt.Errorf("%s.maxScan: %d must be from 1 to %d bytes (0: %d)", field, rc.MaxScan, maxMaxScan, defaultMaxScan)
	}
	if rc.MaxScan > 0 {
		shape.MaxScan = int(rc.MaxScan)
	}
	if rc.Max <= 0 || rc.Max > maxResponseCost {
		return nil, fmt.Errorf("%s.max: %d must be from 1 to %d", field, rc.Max, int64(maxResponseCost))
	}
	shape.Max = rc.Max
	return shape, nil
}

// compileResponseCosts compiles the response costs of the top level, the
// plans (unset: the top level's) and the rules onto their policies and
// those policies' quotas.
func compileResponseCosts(cfg *Config, s *Settings) error {
	top, err := compileResponseCost("responseCost", cfg.ResponseCost)
	if err != nil {
		return err
	}
	set := func(shape *usage.Shape, ps []*Policy) {
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

// pathPrefix reports whether a is b or one of b's ancestors.
func pathPrefix(a, b []string) bool {
	if len(a) > len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
