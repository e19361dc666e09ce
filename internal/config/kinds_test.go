package config

import (
	"testing"

	"github.com/tollgate-dev/tollgate/internal/bucket"
)

// TestPolicyKinds: every policy Compile makes says its kind, and the kind
// agrees with the shape it carries (the request path picks a bucket's
// script arguments by Kind, its headers and fallback by the shapes).
func TestPolicyKinds(t *testing.T) {
	cfg := Default()
	cfg.Average = 100
	cfg.Quotas = []Quota{{Name: "daily", Limit: 1000, Window: "day"}}
	cfg.Concurrency = &Concurrency{Max: 5}
	cfg.Rules = []Rule{{Name: "login", Average: 5, Quotas: []Quota{{Name: "login-month", Limit: 50, Window: "month"}}, Concurrency: &Concurrency{Max: 1}}}
	cfg.PlanHeader = "X-Plan"
	cfg.Plans = []Plan{{Name: "pro", Average: 1000, Concurrency: &Concurrency{Max: 50}}}
	s, err := Compile(cfg, "api")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[bucket.Kind]int{}
	for _, p := range s.Policies() {
		seen[p.Kind]++
		switch p.Kind {
		case bucket.Rate:
			if p.Quota != nil || p.Cap != nil || p.Lim.Interval <= 0 {
				t.Errorf("%s: a rate with quota %v, cap %v, interval %v", p.Name, p.Quota, p.Cap, p.Lim.Interval)
			}
		case bucket.Quota:
			if p.Quota == nil || p.Cap != nil {
				t.Errorf("%s: a quota with quota %v, cap %v", p.Name, p.Quota, p.Cap)
			}
		case bucket.Cap:
			if p.Cap == nil || p.Quota != nil {
				t.Errorf("%s: a cap with quota %v, cap %v", p.Name, p.Quota, p.Cap)
			}
		default:
			t.Errorf("%s: kind %d", p.Name, p.Kind)
		}
	}
	// rates: api, login, pro; quotas: daily (top, and pro's by default), login-month; caps: top, login's, pro's
	if seen[bucket.Rate] != 3 || seen[bucket.Quota] != 3 || seen[bucket.Cap] != 3 {
		t.Fatalf("kinds seen %v, want 3 of each", seen)
	}
}

// TestKindArgs: each kind's script arguments say the kind by the sign of
// the first one, as BucketScript reads them.
func TestKindArgs(t *testing.T) {
	for _, tc := range []struct {
		desc string
		args []string
		want [3]string
	}{
		{"rate", bucket.RateArgs(bucket.Limit{Interval: 600000, Burst: 20, Cost: 1}), [3]string{"600000", "20", "1"}},
		{"quota", bucket.QuotaArgs(1000, 2), [3]string{"-1000", "", "2"}},
		{"cap", bucket.CapArgs(5, 60000000), [3]string{"0", "5", "60000000"}},
		{"rate charge", bucket.RateCharge(bucket.Limit{Interval: 0.5, Burst: 3, Cost: 1}, 1000000), [3]string{"0.5", "3", "1000000"}},
		{"quota charge", bucket.QuotaCharge(7, 3, []int64{1, 2, 3, 4}, 0), [3]string{"-7", "1 2 3 4 0", "3"}},
	} {
		if len(tc.args) != 3 || tc.args[0] != tc.want[0] || tc.args[1] != tc.want[1] || tc.args[2] != tc.want[2] {
			t.Errorf("%s: %q, want %q", tc.desc, tc.args, tc.want)
		}
	}
}
