package tollgate

import (
	"math"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
)

func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{in: "1m", want: time.Minute},
		{in: "60", want: time.Minute},
		{in: "0.5", want: 500 * time.Millisecond},
		{in: " 250ms ", want: 250 * time.Millisecond},
		{in: "-1s", err: "negative"},
		{in: "NaN", err: "not a number of seconds"},
		{in: "nan", err: "not a number of seconds"},
		{in: "-3", err: "is negative"},
		{in: "1e10", err: "out of range"},
		{in: "1e400", err: "out of range"},
		{in: "Inf", err: "out of range"},
		{in: "+Inf", err: "out of range"},
		{in: "-Inf", err: "is negative"},
		{in: "-0.001", err: "is negative"},
		{in: "soon", err: "not a duration"},
		{in: "", err: "not a duration"},
	} {
		got, err := config.ParseDuration("period", tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), "period") {
				t.Fatalf("parseDuration(%q) error = %v, want one naming period and %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Fatalf("parseDuration(%q) = %v, %v, want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestCompileDefaults(t *testing.T) {
	if _, err := config.Compile(CreateConfig(), "api@file"); err == nil || !strings.Contains(err.Error(), "no limit") {
		t.Fatalf("compile(defaults) error = %v, want one saying there is no limit", err)
	}
	cfg := CreateConfig()
	cfg.Average = 10
	s, err := config.Compile(cfg, "api@file")
	if err != nil {
		t.Fatal(err)
	}
	if s.Top == nil || s.Top.Lim.Burst != 1 || s.Class != "api@file" || s.Headers != config.HeadersIETF {
		t.Fatalf("defaults: %+v, want burst 1, class from the name, ietf headers", s)
	}
	if s.Redis.Addr != "127.0.0.1:6379" || s.Redis.Timeout != 5*time.Millisecond || s.Redis.PoolSize != 64 ||
		s.Redis.BreakerThreshold != 3 || s.Redis.ProbeInterval != 3*time.Second {
		t.Fatalf("redis defaults: %+v", s.Redis)
	}
}

func TestCompileLocalShare(t *testing.T) {
	for _, tc := range []struct {
		desc                     string
		average, burst, replicas int64
		seen                     int64 // pods counted by the heartbeat; 0: none yet
		watched                  bool  // the pod has watched a full window of heartbeats
		wantLocalBurst           float64
		wantLocalIntervalSeconds float64
	}{
		{desc: "100/min burst 20 over 3 pods", average: 100, burst: 20, replicas: 3, wantLocalBurst: 6, wantLocalIntervalSeconds: 1.8},
		{desc: "more pods than burst: at least one request", average: 100, burst: 20, replicas: 100, wantLocalBurst: 1, wantLocalIntervalSeconds: 60},
		{desc: "replicas 0 means 1", average: 60, burst: 10, replicas: 0, wantLocalBurst: 10, wantLocalIntervalSeconds: 1},
		{desc: "a count watched for a full window wins over replicas", average: 100, burst: 20, replicas: 3, seen: 2, watched: true, wantLocalBurst: 10, wantLocalIntervalSeconds: 1.2},
		{desc: "a count not yet watched for a full window never lowers replicas", average: 100, burst: 20, replicas: 3, seen: 1, wantLocalBurst: 6, wantLocalIntervalSeconds: 1.8},
		{desc: "a count not yet watched for a full window may raise replicas", average: 100, burst: 20, replicas: 1, seen: 4, wantLocalBurst: 5, wantLocalIntervalSeconds: 2.4},
		{desc: "the heartbeat's count may exceed replicas", average: 100, burst: 20, replicas: 1, seen: 4, watched: true, wantLocalBurst: 5, wantLocalIntervalSeconds: 2.4},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := CreateConfig()
			cfg.Average, cfg.Period, cfg.Burst, cfg.Replicas = tc.average, "1m", tc.burst, tc.replicas
			s, err := config.Compile(cfg, "api")
			if err != nil {
				t.Fatal(err)
			}
			// The first count at 1 s, 3 heartbeats of 5 s: the window is
			// watched from 16 s on.
			var hb *heartbeat
			now := int64(2 * time.Second)
			if tc.seen > 0 {
				hb = &heartbeat{seen: tc.seen, first: int64(time.Second), ttlMS: 15000}
			}
			if tc.watched {
				now = int64(16 * time.Second)
			}
			l := localShare(s.Top, replicasSeen(hb, s.Replicas, now))
			if l.Burst != tc.wantLocalBurst || math.Abs(l.Interval/1e6-tc.wantLocalIntervalSeconds) > 1e-9 {
				t.Fatalf("local share: burst %v, %v s per token; want %v, %v", l.Burst, l.Interval/1e6, tc.wantLocalBurst, tc.wantLocalIntervalSeconds)
			}
		})
	}
}

func TestRulesInheritFromTheTopLevel(t *testing.T) {
	cfg := CreateConfig()
	cfg.Average, cfg.Period, cfg.Cost, cfg.Burst, cfg.FailureMode = 100, "1m", 2, 10, "closed"
	cfg.Rules = []config.Rule{{Name: "search", Average: 10, Burst: 4, Methods: []string{"get", " post "}}}
	s, err := config.Compile(cfg, "api")
	if err != nil {
		t.Fatal(err)
	}
	r := s.Rules[0]
	if r.Lim.Cost != 2 || r.PeriodSecs != 60 || !r.FailClosed || r.KeySuffix != ":search" ||
		strings.Join(r.Methods, ",") != "GET,POST,HEAD" {
		t.Fatalf("rule: %+v, want cost 2, period 60s, fail closed, methods GET,POST,HEAD (a GET rule covers HEAD)", r)
	}
}

func TestSanitizeName(t *testing.T) {
	if got := config.SanitizeName(`my "api"@file`); got != "my__api_@file" {
		t.Fatalf("sanitizeName = %q", got)
	}
	if got := config.SanitizeName(""); got != "default" {
		t.Fatalf("sanitizeName(\"\") = %q", got)
	}
}

// TestPathPrefixMatching pins what the README says of rules[].pathPrefix:
// a case-sensitive string prefix of the decoded path, not a path segment.
func TestPathPrefixMatching(t *testing.T) {
	cfg := CreateConfig()
	cfg.Rules = []config.Rule{{Name: "login", PathPrefix: "/login", Average: 1}}
	s, err := config.Compile(cfg, "api@file")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		target string
		want   bool
	}{
		{"/login", true},
		{"/login/reset", true},
		{"/login-help", true}, // a string prefix, not a segment
		{"/%6Cogin", true},    // matched decoded
		{"/Login", false},     // case-sensitive
		{"/LOGIN", false},
		{"/api/login", false},
	} {
		if got := matches(s.Rules[0], httptest.NewRequest("POST", tc.target, nil)); got != tc.want {
			t.Errorf("%s: matched %t, want %t", tc.target, got, tc.want)
		}
	}
}

// An endpoint goes into logs: one with a control character or a space is
// refused, so that whoever writes the dynamic config cannot forge a log
// line through it.
func TestEndpointsArePrintable(t *testing.T) {
	for _, e := range []string{"127.0.0.1:6379\nforged:1", "a b:6379", "127.0.0.1:6379\x00", "h\u00e9:6379"} {
		cfg := CreateConfig()
		cfg.Average = 10
		cfg.Redis.Endpoints = []string{e}
		if _, err := config.Compile(cfg, "api"); err == nil || !strings.Contains(err.Error(), "redis.endpoints[0]") {
			t.Errorf("endpoint %q: %v, want refused", e, err)
		}
	}
	cfg := CreateConfig()
	cfg.Average = 10
	cfg.Redis.Endpoints = []string{"redis-0.redis.svc:6379"}
	if _, err := config.Compile(cfg, "api"); err != nil {
		t.Errorf("a plain endpoint refused: %v", err)
	}
}
