package config

import (
	"strings"
	"testing"
)

// TestUnknownWords: a word no config struct knows is an error naming it,
// where it was written, and the nearest known one, at every level Traefik
// decodes (the decoding itself, by Traefik's decoder, is e2e's
// TestInvalidConfigs over testdata/invalid/unknown-*.yaml).
func TestUnknownWords(t *testing.T) {
	u := func(k string) map[string]interface{} { return map[string]interface{}{k: "1"} }
	for _, tc := range []struct {
		desc string
		set  func(c *Config)
		want string
	}{
		{desc: "none", set: func(c *Config) {}},
		{desc: "top", set: func(c *Config) { c.Unknown = u("burts") }, want: `burts: unknown option (did you mean "burst"?)`},
		{desc: "top, case aside", set: func(c *Config) { c.Unknown = u("AVERGE") }, want: `AVERGE: unknown option (did you mean "average"?)`},
		{desc: "first in order", set: func(c *Config) { c.Unknown = map[string]interface{}{"zz": 1, "burts": 1} }, want: `burts: unknown`},
		{desc: "source", set: func(c *Config) { c.SourceCriterion = &SourceCriterion{Unknown: u("requestHeaderNme")} },
			want: `sourceCriterion.requestHeaderNme: unknown option (did you mean "requestHeaderName"?)`},
		{desc: "ipStrategy", set: func(c *Config) {
			c.SourceCriterion = &SourceCriterion{IPStrategy: &IPStrategy{Unknown: u("excludedIP")}}
		}, want: `sourceCriterion.ipStrategy.excludedIP: unknown option (did you mean "excludedIPs"?)`},
		{desc: "lease", set: func(c *Config) { c.Lease.Unknown = u("tll") }, want: `lease.tll: unknown option (did you mean "ttl"?)`},
		{desc: "quota", set: func(c *Config) { c.Quotas = []Quota{{}, {Unknown: u("limt")}} }, want: `quotas[1].limt: unknown option (did you mean "limit"?)`},
		{desc: "responseCost", set: func(c *Config) { c.ResponseCost = &ResponseCost{Unknown: u("keepHeaders")} },
			want: `responseCost.keepHeaders: unknown option (did you mean "keepHeader"?)`},
		{desc: "concurrency", set: func(c *Config) { c.Concurrency = &Concurrency{Unknown: u("kye")} }, want: `concurrency.kye: unknown option (did you mean "key"?)`},
		{desc: "rule", set: func(c *Config) { c.Rules = []Rule{{Unknown: u("method")}} }, want: `rules[0].method: unknown option (did you mean "methods"?)`},
		{desc: "rule source", set: func(c *Config) {
			c.Rules = []Rule{{SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{Unknown: u("dept")}}}}
		}, want: `rules[0].sourceCriterion.ipStrategy.dept: unknown option (did you mean "depth"?)`},
		{desc: "rule quota", set: func(c *Config) { c.Rules = []Rule{{Quotas: []Quota{{Unknown: u("timezon")}}}} },
			want: `rules[0].quotas[0].timezon: unknown option (did you mean "timezone"?)`},
		{desc: "rule cost", set: func(c *Config) {
			c.Rules = []Rule{{ResponseCost: &ResponseCost{Unknown: u("mx")}}}
		}, want: `rules[0].responseCost.mx: unknown option (did you mean "max"?)`},
		{desc: "rule cap", set: func(c *Config) { c.Rules = []Rule{{Concurrency: &Concurrency{Unknown: u("nam")}}} }, want: `rules[0].concurrency.nam: unknown option (did you mean "name"?)`},
		{desc: "plan", set: func(c *Config) { c.Plans = []Plan{{Unknown: u("unlimted")}} }, want: `plans[0].unlimted: unknown option (did you mean "unlimited"?)`},
		{desc: "plan lease", set: func(c *Config) { c.Plans = []Plan{{Lease: &Lease{Unknown: u("mx")}}} }, want: `plans[0].lease.mx: unknown option (did you mean "max"?)`},
		{desc: "plan quota", set: func(c *Config) { c.Plans = []Plan{{Quotas: []Quota{{Unknown: u("windows")}}}} }, want: `plans[0].quotas[0].windows: unknown option (did you mean "window"?)`},
		{desc: "plan cost", set: func(c *Config) {
			c.Plans = []Plan{{ResponseCost: &ResponseCost{Unknown: u("heder")}}}
		}, want: `plans[0].responseCost.heder: unknown option (did you mean "header"?)`},
		{desc: "plan cap", set: func(c *Config) {
			c.Plans = []Plan{{Concurrency: &Concurrency{Unknown: u("maximum")}}}
		}, want: `plans[0].concurrency.maximum: unknown option (did you mean "max"?)`},
		{desc: "redis", set: func(c *Config) { c.Redis.Unknown = u("adress") }, want: `redis.adress: unknown option`},
		{desc: "redis tls", set: func(c *Config) { c.Redis.TLS.Unknown = u("insecure") }, want: `redis.tls.insecure: unknown option (did you mean "insecureSkipVerify"?)`},
		{desc: "region", set: func(c *Config) { c.Region = &RegionConfig{Unknown: u("intervall")} }, want: `region.intervall: unknown option (did you mean "interval"?)`},
		{desc: "region peer", set: func(c *Config) {
			c.Region = &RegionConfig{Peers: []PeerConfig{{Unknown: u("passwrd")}}}
		},
			want: `region.peers[0].passwrd: unknown option (did you mean "password"?)`},
		{desc: "region peer tls", set: func(c *Config) {
			c.Region = &RegionConfig{Peers: []PeerConfig{{TLS: TLSConfig{Unknown: u("certs")}}}}
		},
			want: `region.peers[0].tls.certs: unknown option (did you mean "cert"?)`},
		{desc: "a hostile word is quoted and cut", set: func(c *Config) { c.Unknown = u("a\x00b" + strings.Repeat("x", 100)) }, want: `"a\x00bxxx`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := Default()
			cfg.Average = 10
			tc.set(cfg)
			_, err := Compile(cfg, "api@file")
			if tc.want == "" {
				if err != nil {
					t.Fatalf("compile: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("compile error = %v, want one containing %q", err, tc.want)
			}
			if len(err.Error()) > 200 {
				t.Fatalf("error of %d bytes: %q", len(err.Error()), err)
			}
		})
	}
}

// TestUnknownWordsMetricsEndpoint: a serveMetrics middleware refuses an
// unknown word too.
func TestUnknownWordsMetricsEndpoint(t *testing.T) {
	cfg := Default()
	cfg.ServeMetrics = true
	cfg.Unknown = map[string]interface{}{"metricsClass": "api"}
	if err := CheckMetricsOnly(cfg); err == nil || !strings.Contains(err.Error(), `metricsClass: unknown option (did you mean "metricsClasses"?)`) {
		t.Fatalf("metricsEndpoint error = %v", err)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{{"", "", 0}, {"a", "", 1}, {"", "ab", 2}, {"burts", "burst", 2}, {"kitten", "sitting", 3}, {"average", "average", 0}} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

// TestUnknownWordMessages: what a message says of words that are not
// misspellings (and of hostile ones).
func TestUnknownWordMessages(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		set     func(c *Config)
		want    string
		notWant string
	}{
		{desc: "a known option written twice in two cases", set: func(c *Config) { c.Unknown = map[string]interface{}{"average": 5} },
			want: `average: "average" is written twice, in two cases: write it once`},
		{desc: "an empty key", set: func(c *Config) { c.Unknown = map[string]interface{}{"": 1} }, want: `"": unknown option`},
		{desc: "a look-alike letter is escaped", set: func(c *Config) { c.Unknown = map[string]interface{}{"\u0430verage": 1} },
			want: `"\u0430verage": unknown option`},
		{desc: "nothing near: no suggestion", set: func(c *Config) { c.Unknown = map[string]interface{}{"unknown": 1} },
			want: `unknown: unknown option`, notWant: "did you mean"},
		{desc: "an option of another level", set: func(c *Config) {
			c.Rules = []Rule{{Name: "r", Average: 1, Unknown: map[string]interface{}{"lease": 1}}}
		},
			want: `rules[0].lease: unknown option here ("lease" is an option of the top level)`},
		{desc: "a source option at the top", set: func(c *Config) { c.Unknown = map[string]interface{}{"requestHeaderName": "X"} },
			want: `requestHeaderName: unknown option here ("requestHeaderName" is an option of sourceCriterion)`},
		{desc: "a long hostile word is cut", set: func(c *Config) { c.Unknown = map[string]interface{}{"x" + strings.Repeat("\u00e9", 40): 1} },
			want: `"x\u00e9\u00e9`, notWant: "\u00e9"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := Default()
			cfg.Average = 10
			tc.set(cfg)
			_, err := Compile(cfg, "api@file")
			if err == nil || !strings.Contains(err.Error(), tc.want) || tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) || len(err.Error()) > 200 {
				t.Fatalf("error %q, want one containing %q (and not %q), at most 200 bytes", err, tc.want, tc.notWant)
			}
		})
	}
}
