package e2e

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"reflect"
	"testing"

	tollgate "github.com/tollgate-dev/tollgate"
	"github.com/tollgate-dev/tollgate/internal/config"
)

// TestConcurrencyConfigDecodesAlike decodes a middleware with a class cap
// alone at the top level and a rule's client cap from YAML, TOML and
// labels (all strings) into one Config, and builds it compiled and under
// Yaegi: with Redis down (open) a request is admitted locally with both
// caps in RateLimit-Policy.
func TestConcurrencyConfigDecodesAlike(t *testing.T) {
	want := tollgate.CreateConfig()
	want.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key"}
	want.Concurrency = &config.Concurrency{Max: 10, Key: "class", MaxDuration: "30s", Name: "reports"}
	want.Rules = []config.Rule{{Name: "sms", PathPrefix: "/sms", Average: 5, Concurrency: &config.Concurrency{Max: 2, Key: "client"}}}
	want.Redis.Endpoints = []string{"127.0.0.1:1"}
	y, err := NewYaegi(goPath, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc, maxDuration string
		d                 *dynamic
	}{
		{desc: "yaml", maxDuration: "30s", d: decodeFile(t, testdata("config", "dynamic.yaml"))},
		{desc: "toml", maxDuration: "30s", d: decodeFile(t, testdata("config", "dynamic.toml"))},
		{desc: "labels", maxDuration: "30", d: decodeLabels(t, testdata("config", "labels.txt"))},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			opts := tc.d.options(t, "cap-limit")
			got := tollgate.CreateConfig()
			if err := decode(opts, got); err != nil {
				t.Fatal(err)
			}
			w := *want
			c := *want.Concurrency
			c.MaxDuration = tc.maxDuration
			w.Concurrency = &c
			if !reflect.DeepEqual(got, &w) {
				t.Fatalf("decoded config:\n got %+v\nwant %+v", got, &w)
			}
			for _, f := range []Factory{Compiled{}, y} {
				h, err := f.New(context.Background(), okHandler, opts, "cap-limit@file")
				if err != nil {
					t.Fatalf("%T: New: %v", f, err)
				}
				req := httptest.NewRequest("GET", "/sms/1", nil)
				req.Header.Set("X-API-Key", fmt.Sprintf("%s-%T", tc.desc, f))
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				p := rec.Header().Get("RateLimit-Policy")
				if wantP := `"reports";q=10;qu="concurrent-requests", "sms";q=5;w=1, "sms-concurrency";q=2;qu="concurrent-requests"`; rec.Code != 200 || p != wantP {
					t.Fatalf("%T: GET /sms with Redis down: %d %q, want 200 (open) and %q", f, rec.Code, p, wantP)
				}
			}
		})
	}
}
