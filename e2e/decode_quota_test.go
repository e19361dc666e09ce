package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"

	tollgate "github.com/tollgate-dev/tollgate"
	"github.com/tollgate-dev/tollgate/internal/config"
)

// TestQuotaConfigDecodesAlike decodes a middleware with quotas (top level
// and a rule's) from YAML, TOML and labels (all strings) into one Config,
// and builds it compiled and under Yaegi: with Redis down (open) a
// request is admitted with every policy in RateLimit-Policy.
func TestQuotaConfigDecodesAlike(t *testing.T) {
	want := tollgate.CreateConfig()
	want.Average = 100
	want.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key"}
	want.Quotas = []config.Quota{{Name: "month", Limit: 10000, Window: "month", Timezone: "Europe/Berlin"}}
	want.Rules = []config.Rule{{Name: "export", PathPrefix: "/export", Average: 10, Quotas: []config.Quota{{Name: "exports", Limit: 50, Window: "day"}}}}
	want.Redis.Endpoints = []string{"127.0.0.1:1"}
	y, err := NewYaegi(goPath, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc, period string
		d            *dynamic
	}{
		{desc: "yaml", period: "1m", d: decodeFile(t, testdata("config", "dynamic.yaml"))},
		{desc: "toml", period: "1m", d: decodeFile(t, testdata("config", "dynamic.toml"))},
		{desc: "labels", period: "60", d: decodeLabels(t, testdata("config", "labels.txt"))},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			opts := tc.d.options(t, "quota-limit")
			got := tollgate.CreateConfig()
			if err := decode(opts, got); err != nil {
				t.Fatal(err)
			}
			w := *want
			w.Period = tc.period
			if !reflect.DeepEqual(got, &w) {
				t.Fatalf("decoded config:\n got %+v\nwant %+v", got, &w)
			}
			for _, f := range []Factory{Compiled{}, y} {
				h, err := f.New(context.Background(), okHandler, opts, "quota-limit@file")
				if err != nil {
					t.Fatalf("%T: New: %v", f, err)
				}
				req := httptest.NewRequest("GET", "/export/1", nil)
				req.Header.Set("X-API-Key", fmt.Sprintf("%s-%T", tc.desc, f)) // burst 1: a client each
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				p := rec.Header().Get("RateLimit-Policy")
				if rec.Code != 200 || !strings.HasPrefix(p, `"quota-limit@file";q=100;w=60, "month";q=10000;w=`) || !strings.HasSuffix(p, `"export";q=10;w=60, "exports";q=50;w=86400`) {
					t.Fatalf("%T: GET /export with Redis down: %d %q, want 200 (open) and the rates with their quotas", f, rec.Code, p)
				}
			}
		})
	}
}
