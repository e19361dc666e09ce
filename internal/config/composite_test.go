package config

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// TestCompileHeaderNames: sourceCriterion.requestHeaderNames compiles to
// the canonical names in their order (Source.Headers, Composite), one
// name to requestHeaderName's single header, and is refused, naming the
// field, when a name is empty, not a header name or repeated, when there
// are more than MaxKeyHeaders, and beside requestHeaderName or
// requestHost. ipStrategy composes with it (the fallback).
func TestCompileHeaderNames(t *testing.T) {
	nine := make([]string, MaxKeyHeaders+1)
	for i := range nine {
		nine[i] = fmt.Sprintf("X-H%d", i)
	}
	for _, tc := range []struct {
		desc    string
		sc      SourceCriterion
		header  string   // Source.Header
		headers []string // Source.Headers
		depth   int
		err     string
	}{
		{desc: "two, canonical, in order", sc: SourceCriterion{RequestHeaderNames: []string{"x-user", " X-TENANT "}},
			headers: []string{"X-User", "X-Tenant"}},
		{desc: "the most", sc: SourceCriterion{RequestHeaderNames: nine[:MaxKeyHeaders]}, headers: nine[:MaxKeyHeaders]},
		{desc: "one is requestHeaderName", sc: SourceCriterion{RequestHeaderNames: []string{"x-api-key"}}, header: "X-Api-Key"},
		{desc: "none is no key header", sc: SourceCriterion{RequestHeaderNames: []string{}}},
		{desc: "with an IP strategy", sc: SourceCriterion{RequestHeaderNames: []string{"X-Tenant", "X-User"}, IPStrategy: &IPStrategy{Depth: 2}},
			headers: []string{"X-Tenant", "X-User"}, depth: 2},
		{desc: "too many", sc: SourceCriterion{RequestHeaderNames: nine},
			err: "sourceCriterion.requestHeaderNames: 9 headers, at most 8 are allowed"},
		{desc: "an empty name", sc: SourceCriterion{RequestHeaderNames: []string{"X-Tenant", ""}},
			err: "sourceCriterion.requestHeaderNames[1]: empty"},
		{desc: "a blank name", sc: SourceCriterion{RequestHeaderNames: []string{" ", "X-User"}},
			err: "sourceCriterion.requestHeaderNames[0]: empty"},
		{desc: "a control character", sc: SourceCriterion{RequestHeaderNames: []string{"X-Tenant", "X-Us\x00er"}},
			err: `sourceCriterion.requestHeaderNames[1]: "X-Us\x00er" is not a header name`},
		{desc: "a newline", sc: SourceCriterion{RequestHeaderNames: []string{"X-Tenant\nX-Evil", "X-User"}},
			err: `sourceCriterion.requestHeaderNames[0]: "X-Tenant\nX-Evil" is not a header name`},
		{desc: "a space inside", sc: SourceCriterion{RequestHeaderNames: []string{"X Tenant", "X-User"}},
			err: `sourceCriterion.requestHeaderNames[0]: "X Tenant" is not a header name`},
		{desc: "a name twice, canonically", sc: SourceCriterion{RequestHeaderNames: []string{"X-User", "X-Tenant", "x-user"}},
			err: `sourceCriterion.requestHeaderNames[2]: "x-user" is also requestHeaderNames[0] ("X-User")`},
		{desc: "with requestHeaderName", sc: SourceCriterion{RequestHeaderName: "X-API-Key", RequestHeaderNames: []string{"X-Tenant", "X-User"}},
			err: `sourceCriterion: requestHeaderName ("X-API-Key") and requestHeaderNames are two keys: set one`},
		{desc: "with requestHeaderName, one name", sc: SourceCriterion{RequestHeaderName: "X-API-Key", RequestHeaderNames: []string{"X-API-Key"}},
			err: `sourceCriterion: requestHeaderName ("X-API-Key") and requestHeaderNames are two keys: set one`},
		{desc: "with requestHost", sc: SourceCriterion{RequestHost: true, RequestHeaderNames: []string{"X-Tenant", "X-User"}},
			err: "sourceCriterion: requestHost keys by the Host alone: set no requestHeaderName, requestHeaderNames or ipStrategy with it"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			sc := tc.sc
			s, err := CompileSource(&sc)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Header != tc.header || !reflect.DeepEqual(s.Headers, tc.headers) || s.Composite != (tc.headers != nil) || s.Host || s.Depth != tc.depth {
				t.Fatalf("Source{Header: %q, Headers: %q, Composite: %t, Host: %t, Depth: %d}, want Header %q, Headers %q, Depth %d",
					s.Header, s.Headers, s.Composite, s.Host, s.Depth, tc.header, tc.headers, tc.depth)
			}
		})
	}
}

// TestCompositeKeysInSettings: a composite key is never ByHeader (the
// request path's fast paths hash Source.Header alone), one name is; a
// rule may key its clients by headers of its own (its errors name the
// rule); planHeader may not be one of the key's headers.
func TestCompositeKeysInSettings(t *testing.T) {
	compile := func(mutate func(c *Config)) (*Settings, error) {
		cfg := Default()
		cfg.Average = 10
		mutate(cfg)
		return Compile(cfg, "api@file")
	}
	for _, tc := range []struct {
		desc     string
		names    []string
		byHeader bool
	}{
		{desc: "two headers", names: []string{"X-Tenant", "X-User"}, byHeader: false},
		{desc: "one header", names: []string{"X-Tenant"}, byHeader: true},
	} {
		s, err := compile(func(c *Config) { c.SourceCriterion = &SourceCriterion{RequestHeaderNames: tc.names} })
		if err != nil {
			t.Fatalf("%s: %v", tc.desc, err)
		}
		if s.ByHeader != tc.byHeader {
			t.Errorf("%s: ByHeader %t, want %t", tc.desc, s.ByHeader, tc.byHeader)
		}
	}

	s, err := compile(func(c *Config) {
		c.SourceCriterion = &SourceCriterion{RequestHeaderName: "X-API-Key"}
		c.Rules = []Rule{{Name: "export", Average: 1, SourceCriterion: &SourceCriterion{RequestHeaderNames: []string{"x-tenant", "x-user"}}}}
	})
	if err != nil {
		t.Fatal(err)
	}
	if !s.ByHeader || !s.OwnKeys || s.Rules[0].Source == nil || !s.Rules[0].Source.Composite ||
		!reflect.DeepEqual(s.Rules[0].Source.Headers, []string{"X-Tenant", "X-User"}) {
		t.Fatalf("a rule keyed by X-Tenant and X-User under a top level keyed by X-API-Key: ByHeader %t, OwnKeys %t, rule source %+v",
			s.ByHeader, s.OwnKeys, s.Rules[0].Source)
	}

	for _, tc := range []struct {
		desc   string
		mutate func(c *Config)
		err    string
	}{
		{desc: "a rule's name twice", mutate: func(c *Config) {
			c.Rules = []Rule{{Name: "export", Average: 1, SourceCriterion: &SourceCriterion{RequestHeaderNames: []string{"X-User", "X-USER"}}}}
		}, err: `rules[0].sourceCriterion.requestHeaderNames[1]: "X-USER" is also requestHeaderNames[0]`},
		{desc: "a rule's with requestHost", mutate: func(c *Config) {
			c.Rules = []Rule{{Name: "export", Average: 1, SourceCriterion: &SourceCriterion{RequestHost: true, RequestHeaderNames: []string{"X-Tenant", "X-User"}}}}
		}, err: "rules[0].sourceCriterion: requestHost keys by the Host alone"},
		{desc: "planHeader is a key header", mutate: func(c *Config) {
			c.SourceCriterion = &SourceCriterion{RequestHeaderNames: []string{"X-Tenant", "X-Plan"}}
			c.PlanHeader, c.DefaultPlan = "x-plan", "free"
			c.Plans = []Plan{{Name: "free", Average: 1}}
		}, err: `planHeader: "x-plan" is also one of the client key's headers (sourceCriterion.requestHeaderNames)`},
	} {
		if _, err := compile(tc.mutate); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: error %v, want one containing %q", tc.desc, err, tc.err)
		}
	}
}

// TestCompositeKeyWords: requestHeaderNames is a word of sourceCriterion
// at the top and in rules, nowhere else, and a misspelling of it is
// answered with the nearest option.
func TestCompositeKeyWords(t *testing.T) {
	u := func(k string) map[string]interface{} { return map[string]interface{}{k: "X-Tenant,X-User"} }
	for _, tc := range []struct {
		desc string
		set  func(c *Config)
		want string
	}{
		{desc: "known in sourceCriterion", set: func(c *Config) {
			c.SourceCriterion = &SourceCriterion{RequestHeaderNames: []string{"X-Tenant", "X-User"}}
		}},
		{desc: "known in a rule's sourceCriterion", set: func(c *Config) {
			c.Rules = []Rule{{Name: "r", Average: 1, SourceCriterion: &SourceCriterion{RequestHeaderNames: []string{"X-Tenant", "X-User"}}}}
		}},
		{desc: "a typo", set: func(c *Config) { c.SourceCriterion = &SourceCriterion{Unknown: u("requestHeaderNamez")} },
			want: `sourceCriterion.requestHeaderNamez: unknown option (did you mean "requestHeaderName`},
		{desc: "a typo nearer the plural", set: func(c *Config) { c.SourceCriterion = &SourceCriterion{Unknown: u("requestHeadersNames")} },
			want: `sourceCriterion.requestHeadersNames: unknown option (did you mean "requestHeaderNames"?)`},
		{desc: "a typo in a rule", set: func(c *Config) {
			c.Rules = []Rule{{Name: "r", Average: 1, SourceCriterion: &SourceCriterion{Unknown: u("requestHeaderNamess")}}}
		}, want: `rules[0].sourceCriterion.requestHeaderNamess: unknown option (did you mean "requestHeaderNames"?)`},
		{desc: "at the top level", set: func(c *Config) { c.Unknown = u("requestHeaderNames") },
			want: `requestHeaderNames: unknown option here ("requestHeaderNames" is an option of sourceCriterion)`},
		{desc: "in a rule, outside its sourceCriterion", set: func(c *Config) {
			c.Rules = []Rule{{Name: "r", Average: 1, Unknown: u("requestheadernames")}}
		}, want: `rules[0].requestheadernames: unknown option here ("requestHeaderNames" is an option of sourceCriterion)`},
		{desc: "in ipStrategy", set: func(c *Config) {
			c.SourceCriterion = &SourceCriterion{IPStrategy: &IPStrategy{Unknown: u("requestHeaderNames")}}
		}, want: `sourceCriterion.ipStrategy.requestHeaderNames: unknown option here ("requestHeaderNames" is an option of sourceCriterion)`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := Default()
			cfg.Average = 10
			tc.set(cfg)
			_, err := Compile(cfg, "api@file")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("error %v, want none", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
