package e2e

// Configuration as Traefik reads it: paerser decodes the file provider's
// YAML/TOML and Docker labels into the plugin's options map, and the loader
// decodes that with mapstructure over CreateConfig, as Traefik does.

import (
	"bufio"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/traefik/paerser/file"
	"github.com/traefik/paerser/parser"
	"gopkg.in/yaml.v3"
)

// dynamic is the part of Traefik's dynamic configuration a plugin sees.
type dynamic struct {
	HTTP *struct {
		Middlewares map[string]*struct {
			Plugin map[string]map[string]interface{} `json:"plugin,omitempty" toml:"plugin,omitempty" yaml:"plugin,omitempty" export:"true"`
		} `json:"middlewares,omitempty" toml:"middlewares,omitempty" yaml:"middlewares,omitempty" export:"true"`
	} `json:"http,omitempty" toml:"http,omitempty" yaml:"http,omitempty" export:"true"`
}

func (d *dynamic) options(t *testing.T, middleware string) map[string]interface{} {
	t.Helper()
	if d.HTTP == nil || d.HTTP.Middlewares[middleware] == nil {
		t.Fatalf("no middleware %q in the decoded configuration", middleware)
	}
	return d.HTTP.Middlewares[middleware].Plugin["tollgate"]
}

func testdata(parts ...string) string {
	return filepath.Join(append([]string{RepoRoot(), "testdata"}, parts...)...)
}

// decodeFile decodes a file provider config (by extension).
func decodeFile(t *testing.T, path string) *dynamic {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d dynamic
	if err := file.DecodeContent(string(b), filepath.Ext(path), &d); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return &d
}

// decodeLabels decodes a file of name=value Docker labels.
func decodeLabels(t *testing.T, path string) *dynamic {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	labels := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		labels[k] = v
	}
	var d dynamic
	if err := parser.Decode(labels, &d, parser.DefaultRootName, "traefik.http"); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return &d
}

// TestConfigFormatsDecodeAlike decodes the same middleware from YAML, TOML
// and labels (all strings) and requires the same Config, then builds it
// under Yaegi and checks the headers it answers with.
func TestConfigFormatsDecodeAlike(t *testing.T) {
	want := tollgate.CreateConfig()
	want.Average, want.Period, want.Burst, want.Cost, want.Class = 100, "1m", 20, 1, "api"
	want.SourceCriterion = &config.SourceCriterion{RequestHeaderName: "X-API-Key"}
	want.Rules = []config.Rule{{Name: "login", PathPrefix: "/login", Methods: []string{"POST"}, Average: 5, Period: "1m", Burst: 5, FailureMode: "closed"}}
	want.FailureMode, want.Replicas, want.Headers, want.Shards = "open", 3, "both", 2
	want.Redis.Mode, want.Redis.Pipeline = "standalone", 2
	want.Redis.Endpoints = []string{"127.0.0.1:1"}
	want.Redis.DB, want.Redis.Timeout, want.Redis.PoolSize, want.Redis.BreakerThreshold, want.Redis.ProbeInterval = 2, "5ms", 16, 3, "3s"

	y, err := NewYaegi(goPath, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc string
		d    *dynamic
		// labels spell durations as bare seconds
		period, timeout, probe, heartbeat, interval, peerTimeout, leaseTTL string
	}{
		{desc: "yaml", d: decodeFile(t, testdata("config", "dynamic.yaml")), period: "1m", timeout: "5ms", probe: "3s", heartbeat: "10s", interval: "5s", peerTimeout: "1s", leaseTTL: "2s"},
		{desc: "toml", d: decodeFile(t, testdata("config", "dynamic.toml")), period: "1m", timeout: "5ms", probe: "3s", heartbeat: "10s", interval: "5s", peerTimeout: "1s", leaseTTL: "2s"},
		{desc: "labels", d: decodeLabels(t, testdata("config", "labels.txt")), period: "60", timeout: "0.005", probe: "3", heartbeat: "10", interval: "5", peerTimeout: "1", leaseTTL: "2"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			opts := tc.d.options(t, "api-limit")
			got := tollgate.CreateConfig()
			if err := decode(opts, got); err != nil {
				t.Fatal(err)
			}
			w := *want
			w.Period, w.Redis.Timeout, w.Redis.ProbeInterval, w.Redis.Heartbeat = tc.period, tc.timeout, tc.probe, tc.heartbeat
			w.Lease = config.Lease{Max: 10, TTL: tc.leaseTTL}
			w.Region = &config.RegionConfig{Name: "eu-west", Weight: 2, Interval: tc.interval,
				Peers: []config.PeerConfig{{Name: "us-east", Weight: 1, Endpoints: []string{"127.0.0.1:2"}, Timeout: tc.peerTimeout}}}
			if !reflect.DeepEqual(got, &w) {
				t.Fatalf("decoded config:\n got %+v\nwant %+v", got, &w)
			}
			for _, f := range []Factory{Compiled{}, y} {
				h, err := f.New(context.Background(), okHandler, opts, "api-limit@file")
				if err != nil {
					t.Fatalf("%T: New: %v", f, err)
				}
				// Redis at 127.0.0.1:1 refuses: the fallback answers, with
				// the configured policies in the headers.
				req := httptest.NewRequest("POST", "/login", nil)
				req.Header.Set("X-API-Key", "k")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if rec.Code != 503 || rec.Header().Get("RateLimit-Policy") != `"api";q=100;w=60, "login";q=5;w=60` {
					t.Fatalf("%T: POST /login with Redis down: %d %q, want 503 (login fails closed) and both policies", f, rec.Code, rec.Header().Get("RateLimit-Policy"))
				}
			}
		})
	}
}

// TestMetricsEndpointDecodesAlike: a metrics endpoint's metricsClasses
// from YAML, TOML and labels (one comma-separated string) is one list, and
// the endpoint built from it, compiled and under Yaegi, serves no series
// of the process (Redis's, the deny caches').
func TestMetricsEndpointDecodesAlike(t *testing.T) {
	want := tollgate.CreateConfig()
	want.ServeMetrics, want.MetricsClasses = true, []string{"api", "web"}
	y, err := NewYaegi(goPath, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc string
		d    *dynamic
	}{
		{desc: "yaml", d: decodeFile(t, testdata("config", "dynamic.yaml"))},
		{desc: "toml", d: decodeFile(t, testdata("config", "dynamic.toml"))},
		{desc: "labels", d: decodeLabels(t, testdata("config", "labels.txt"))},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			opts := tc.d.options(t, "tollgate-metrics")
			got := tollgate.CreateConfig()
			if err := decode(opts, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded config:\n got %+v\nwant %+v", got, want)
			}
			for _, f := range []Factory{Compiled{}, y} {
				h, err := f.New(context.Background(), okHandler, opts, "tollgate-metrics@file")
				if err != nil {
					t.Fatalf("%T: New: %v", f, err)
				}
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
				body := rec.Body.String()
				if rec.Code != 200 || !strings.Contains(body, "# TYPE tollgate_requests_total counter") ||
					strings.Contains(body, "tollgate_redis_") || strings.Contains(body, "tollgate_deny_cache_entries") {
					t.Fatalf("%T: %d, the process's series served or the classes' missing:\n%s", f, rec.Code, body)
				}
			}
		})
	}
}

// TestInvalidConfigs builds every fixture in testdata/invalid, compiled and
// under Yaegi: New must fail with the error its "# want:" line names.
func TestInvalidConfigs(t *testing.T) {
	paths, err := filepath.Glob(testdata("invalid", "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	y, err := NewYaegi(goPath, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		path := path
		t.Run(strings.TrimSuffix(filepath.Base(path), ".yaml"), func(t *testing.T) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			first, body, _ := strings.Cut(string(b), "\n")
			want := strings.TrimSpace(strings.TrimPrefix(first, "# want:"))
			doc := "http:\n  middlewares:\n    bad:\n      plugin:\n        tollgate:\n" +
				indent(body, "          ")
			var d dynamic
			if err := file.DecodeContent(doc, ".yaml", &d); err != nil {
				t.Fatalf("decoding: %v", err)
			}
			opts := d.options(t, "bad")
			for _, f := range []Factory{Compiled{}, y} {
				_, err := f.New(context.Background(), okHandler, opts, "bad@file")
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("%T: New error = %v, want one containing %q", f, err, want)
				}
			}
		})
	}
}

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = prefix + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestManifestTestData builds the middleware from .traefik.yml's testData,
// as the plugin catalog does, compiled and under Yaegi.
func TestManifestTestData(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), ".traefik.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest struct {
		DisplayName string                 `yaml:"displayName"`
		Type        string                 `yaml:"type"`
		Import      string                 `yaml:"import"`
		Summary     string                 `yaml:"summary"`
		TestData    map[string]interface{} `yaml:"testData"`
	}
	if err := yaml.Unmarshal(b, &manifest); err != nil {
		t.Fatal(err)
	}
	if manifest.Type != "middleware" || manifest.Import != ModuleName || manifest.DisplayName == "" || manifest.Summary == "" {
		t.Fatalf("manifest: %+v", manifest)
	}
	y, err := NewYaegi(goPath, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []Factory{Compiled{}, y} {
		if _, err := f.New(context.Background(), okHandler, manifest.TestData, "catalog@file"); err != nil {
			t.Fatalf("%T: New(testData): %v", f, err)
		}
	}
}
