package tollgate

// The script arguments commandParts writes (lens, suffixes,
// args) for a range of configurations (shards, fractions, quotas, caps
// with a class key, plans, rules keyed their own way, regions, leases)
// must be byte for byte what 8dd017e's commandParts wrote: r34Golden is
// the output of this same test run on a checkout of 8dd017e (names
// adapted: compile, s.topPolicies(), ...): the move of the protocol to
// internal/bucket (its argument writers per kind) changed no byte.

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
)

func r34Rules(s *config.Settings) []*config.Policy {
	var out []*config.Policy
	for i, r := range s.Rules {
		out = append(out, s.WithQuotas(r, s.RuleQuotas, i)...)
	}
	return out
}
func r34Configs() []*config.Config {
	var out []*config.Config
	add := func(f func(c *config.Config)) { c := CreateConfig(); f(c); out = append(out, c) }
	add(func(c *config.Config) { c.Average = 10; c.Period = "1m"; c.Burst = 20; c.Cost = 2; c.Shards = 3 })
	add(func(c *config.Config) { c.Average = 7; c.Burst = 3 })
	add(func(c *config.Config) {
		c.Average = 3
		c.Period = "0.7"
		c.Burst = 9
		c.Shards = 7
		c.Rules = []config.Rule{{Name: "r", Average: 11, Period: "13s", Burst: 14, Cost: 2}}
	})
	add(func(c *config.Config) {
		c.Average = 100
		c.Burst = 10
		c.Cost = 3
		c.Quotas = []config.Quota{{Name: "daily", Limit: 1000, Window: "day"}, {Name: "m", Limit: 99999, Window: "month", Timezone: "Europe/Berlin"}}
		c.Concurrency = &config.Concurrency{Max: 5, Key: "class", MaxDuration: "1.5s"}
		c.ResponseCost = &config.ResponseCost{Header: "X-C", Max: 100}
		c.Rules = []config.Rule{{Name: "login", Average: 5, Period: "1m", Burst: 6, Quotas: []config.Quota{{Name: "lm", Limit: 50, Window: "week"}}, Concurrency: &config.Concurrency{Max: 1},
			SourceCriterion: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}}, ResponseCost: &config.ResponseCost{Header: "X-D", Max: 7}}}
		c.PlanHeader = "X-Plan"
		c.Plans = []config.Plan{{Name: "pro", Average: 1000, Burst: 30, Concurrency: &config.Concurrency{Max: 50}}, {Name: "free", Average: 1, Period: "1h", Burst: 3, Quotas: []config.Quota{{Name: "fq", Limit: 3, Window: "hour"}}}, {Name: "vip", Unlimited: true}}
	})
	add(func(c *config.Config) { c.Concurrency = &config.Concurrency{Max: 2} })
	add(func(c *config.Config) { c.Quotas = []config.Quota{{Name: "q", Limit: 5, Window: "day"}} })
	add(func(c *config.Config) {
		c.Average = 9
		c.Period = "2s"
		c.Burst = 4
		c.Rules = []config.Rule{{Name: "fc", Average: 1, FailureMode: "closed"}, {Name: "own", Average: 2, SourceCriterion: &config.SourceCriterion{RequestHeaderName: "X-K"}}}
		c.Region = &config.RegionConfig{Name: "eu", Weight: 3, Peers: []config.PeerConfig{{Name: "us", Weight: 2, Endpoints: []string{"127.0.0.1:2"}}}}
	})
	add(func(c *config.Config) {
		c.Average = 1000000
		c.Period = "1h"
		c.Burst = 123456789
		c.Cost = 17
		c.Lease = config.Lease{Max: 5, TTL: "2s"}
	})
	return out
}

func TestScriptArgsUnchanged(t *testing.T) {
	var b strings.Builder
	for n, cfg := range r34Configs() {
		cfg.Redis.Endpoints = []string{"127.0.0.1:1"}
		s, err := config.Compile(cfg, "api@file")
		if err != nil {
			t.Fatalf("config %d: %v", n, err)
		}
		dump := func(what string, ps []*config.Policy) {
			if len(ps) == 0 {
				return
			}
			c := commandParts(ps, s.KeyLen)
			fmt.Fprintf(&b, "%d %s lens=%v suffixes=%q args=%q\n", n, what, c.lens, c.suffixes, c.args)
		}
		top := s.TopPolicies()
		dump("top", top)
		for i, p := range s.Plans {
			if p != nil {
				dump(fmt.Sprintf("plan%d", i), s.WithQuotas(p, s.PlanQuotas, i))
				dump(fmt.Sprintf("plan%d+rules", i), append(s.WithQuotas(p, s.PlanQuotas, i), r34Rules(s)...))
			}
		}
		dump("top+rules", append(append([]*config.Policy(nil), top...), r34Rules(s)...))
		for i, p := range s.Rules {
			dump(fmt.Sprintf("rule%d", i), s.WithQuotas(p, s.RuleQuotas, i))
		}
	}
	if got := b.String(); got != r34Golden {
		gl, wl := strings.Split(got, "\n"), strings.Split(r34Golden, "\n")
		for i := 0; i < len(gl) && i < len(wl); i++ {
			if gl[i] != wl[i] {
				t.Fatalf("line %d:\n got %s\nwant %s", i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("%d lines, want %d", len(gl), len(wl))
	}
}

// TestChargeArgsUnchanged: bucket.RateCharge and QuotaCharge write what
// 8dd017e's chargeResponse wrote inline, for awkward numbers.
func TestChargeArgsUnchanged(t *testing.T) {
	x := uint64(88172645463325252)
	rnd := func() uint64 { x ^= x << 13; x ^= x >> 7; x ^= x << 17; return x }
	for i := 0; i < 100000; i++ {
		l := bucket.Limit{Interval: math.Float64frombits(rnd()>>2) / 1e300, Burst: float64(rnd()%1e12) / float64(rnd()%1000+1), Cost: 1}
		extra := int64(rnd() % (1 << 62))
		got := bucket.RateCharge(l, extra)
		want := []string{strconv.FormatFloat(l.Interval, 'g', -1, 64), strconv.FormatFloat(l.Burst, 'g', -1, 64), strconv.FormatInt(extra, 10)}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("RateCharge(%v, %d) = %q, want %q", l, extra, got, want)
		}
		limit := int64(rnd() % 1e12)
		b := []int64{int64(rnd() >> 1), int64(rnd() >> 1), int64(rnd() >> 1), int64(rnd() >> 1)}
		shift := int64(rnd()) // any sign
		got = bucket.QuotaCharge(limit, extra, b, shift)
		want = []string{strconv.FormatInt(-limit, 10), strconv.FormatInt(b[0], 10) + " " + strconv.FormatInt(b[1], 10) + " " +
			strconv.FormatInt(b[2], 10) + " " + strconv.FormatInt(b[3], 10) + " " + strconv.FormatInt(shift, 10), strconv.FormatInt(extra, 10)}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Fatalf("QuotaCharge = %q, want %q", got, want)
		}
	}
}

// r34Golden is 8dd017e's output.
const r34Golden = `0 top lens=[16] suffixes=[""] args=["1.8e+07" "6.666666666666667" "2"]
0 top+rules lens=[16] suffixes=[""] args=["1.8e+07" "6.666666666666667" "2"]
1 top lens=[14] suffixes=[""] args=["142857.14285714287" "3" "1"]
1 top+rules lens=[14] suffixes=[""] args=["142857.14285714287" "3" "1"]
2 top lens=[16] suffixes=[""] args=["1.6333333333333335e+06" "1.2857142857142858" "1"]
2 top+rules lens=[16 16] suffixes=["" ":r"] args=["1.6333333333333335e+06" "1.2857142857142858" "1" "8.272727272727273e+06" "2" "2"]
2 rule0 lens=[16] suffixes=[":r"] args=["8.272727272727273e+06" "2" "2"]
3 top lens=[14 14 14 33] suffixes=["" ":daily" ":m" "}c"] args=["10000" "10" "3" "-1000" "" "3" "-99999" "" "3" "0" "5" "1500000"]
3 plan0 lens=[14 14 14 33] suffixes=[":pro" ":daily" ":m" ":pro}c"] args=["1000" "30" "3" "-1000" "" "3" "-99999" "" "3" "0" "50" "60000000"]
3 plan0+rules lens=[14 14 14 33 14 14 33] suffixes=[":pro" ":daily" ":m" ":pro}c" ":login" ":login:lm" ":login}c"] args=["1000" "30" "3" "-1000" "" "3" "-99999" "" "3" "0" "50" "60000000" "1.2e+07" "6" "3" "-50" "" "3" "0" "1" "60000000"]
3 plan1 lens=[14 14 33] suffixes=[":free" ":fq" "}c"] args=["3.6e+09" "3" "3" "-3" "" "3" "0" "5" "1500000"]
3 plan1+rules lens=[14 14 33 14 14 33] suffixes=[":free" ":fq" "}c" ":login" ":login:lm" ":login}c"] args=["3.6e+09" "3" "3" "-3" "" "3" "0" "5" "1500000" "1.2e+07" "6" "3" "-50" "" "3" "0" "1" "60000000"]
3 top+rules lens=[14 14 14 33 14 14 33] suffixes=["" ":daily" ":m" "}c" ":login" ":login:lm" ":login}c"] args=["10000" "10" "3" "-1000" "" "3" "-99999" "" "3" "0" "5" "1500000" "1.2e+07" "6" "3" "-50" "" "3" "0" "1" "60000000"]
3 rule0 lens=[14 14 33] suffixes=[":login" ":login:lm" ":login}c"] args=["1.2e+07" "6" "3" "-50" "" "3" "0" "1" "60000000"]
4 top lens=[33] suffixes=["}c"] args=["0" "2" "60000000"]
4 top+rules lens=[33] suffixes=["}c"] args=["0" "2" "60000000"]
5 top lens=[14] suffixes=[":q"] args=["-5" "" "1"]
5 top+rules lens=[14] suffixes=[":q"] args=["-5" "" "1"]
6 top lens=[14] suffixes=[""] args=["222222.22222222222" "4" "1" "600000"]
6 top+rules lens=[14 14 14] suffixes=["" ":fc" ":own"] args=["222222.22222222222" "4" "1" "2e+06" "1" "1" "1e+06" "1" "1" "600000" "-600000" "-600000"]
6 rule0 lens=[14] suffixes=[":fc"] args=["2e+06" "1" "1" "-600000"]
6 rule1 lens=[14] suffixes=[":own"] args=["1e+06" "1" "1" "-600000"]
7 top lens=[14] suffixes=[""] args=["3600" "1.23456789e+08" "17"]
7 top+rules lens=[14] suffixes=[""] args=["3600" "1.23456789e+08" "17"]
`
