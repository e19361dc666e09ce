package e2e

// Composite keys (sourceCriterion.requestHeaderNames: a bucket per tuple
// of header values) as Traefik reads and runs them: decoded from YAML,
// TOML and Docker labels (one comma-separated string), and one budget per
// tuple across three real Traefik replicas, and across pods of the plugin
// compiled and interpreted in-process. Options are plain maps and label
// strings; the decoded Config is compared with the root's types.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"

	tollgate "github.com/tollgate-dev/tollgate"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/traefik/paerser/file"
	"github.com/traefik/paerser/parser"
)

// tupleBurst is the burst of the tests' limit: 3 an hour, so no token is
// earned during a test.
const tupleBurst = 3

// tupleOpts is the tests' middleware on redisAddr: 3 an hour, burst 3,
// keyed by X-Tenant and X-User together.
func tupleOpts(redisAddr string) map[string]interface{} {
	return limitOpts(redisAddr, "average", 3, "period", "1h", "burst", tupleBurst, "class", "api",
		"decisionHeader", decisionHdr, "redis.timeout", "1s",
		"sourceCriterion", map[string]interface{}{"requestHeaderNames": []interface{}{"X-Tenant", "X-User"}})
}

// tupleSend sends one request for tenant and user to pod or replica i and
// returns its status and who decided it (X-Tollgate-Decision).
type tupleSend func(t *testing.T, i int, tenant, user string) (status int, decision string)

// checkTuples is the scenario on n pods or replicas: tenant A's user 1
// spends its burst, one request per pod in turn, and is then refused by
// every pod, while A/2 and B/1 still have their whole bursts; a tenant
// "a|b" with user "c" and a tenant "a" with user "b|c" (one string if
// the values were joined by a bar) have a bucket each. Redis decides
// every request (or its refusal is cached).
func checkTuples(t *testing.T, n int, send tupleSend) {
	t.Helper()
	step := 0
	expect := func(i int, tenant, user string, want int) {
		t.Helper()
		step++
		status, how := send(t, i%n, tenant, user)
		if status != want || how != "redis" && how != "cache" {
			t.Fatalf("step %d, pod %d, X-Tenant %q X-User %q: %d decided by %q, want %d by redis or cache",
				step, i%n, tenant, user, status, how, want)
		}
	}
	for i := 0; i < tupleBurst; i++ {
		expect(i, "A", "1", http.StatusOK)
	}
	for i := 0; i < n; i++ {
		expect(i, "A", "1", http.StatusTooManyRequests)
	}
	for i := 0; i < tupleBurst; i++ {
		expect(i, "A", "2", http.StatusOK)
		expect(i+1, "B", "1", http.StatusOK)
	}
	expect(0, "A", "2", http.StatusTooManyRequests)
	expect(1, "B", "1", http.StatusTooManyRequests)
	for i := 0; i < tupleBurst; i++ {
		expect(i, "a|b", "c", http.StatusOK)
	}
	expect(0, "a|b", "c", http.StatusTooManyRequests)
	for i := 0; i < tupleBurst; i++ {
		expect(i+2, "a", "b|c", http.StatusOK)
	}
	expect(0, "a", "b|c", http.StatusTooManyRequests)
}

// TestFleetCompositeKeys: three Traefik replicas, one Redis, a middleware
// keyed by X-Tenant and X-User: one budget per tuple across the fleet.
// Requests are sent one after another, each answered before the next.
func TestFleetCompositeKeys(t *testing.T) {
	fe := startFleet(t, 3, func(addr string) map[string]interface{} {
		return dynamicConf(route{"api", "PathPrefix(`/`)", tupleOpts(addr)})
	}, "api@file")
	checkTuples(t, len(fe.fleet.Replicas), func(t *testing.T, i int, tenant, user string) (int, string) {
		req, err := http.NewRequest("GET", fe.fleet.Replicas[i].URL("/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Tenant", tenant)
		req.Header.Set("X-User", user)
		resp, err := fleetClient.Do(req)
		if err != nil {
			t.Fatalf("replica %d: %v", i, err)
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get(decisionHdr)
	})
}

// TestCompositeKeysAcrossPods is TestFleetCompositeKeys in-process: three
// pods on one Redis, the plugin compiled, then each pod a Yaegi
// interpreter of its own.
func TestCompositeKeysAcrossPods(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		var pods []http.Handler
		for i := 0; i < 3; i++ {
			pods = append(pods, e.handler(e.pod(), "api@file", tupleOpts(e.redis.Addr)))
		}
		checkTuples(t, len(pods), func(t *testing.T, i int, tenant, user string) (int, string) {
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-Tenant", tenant)
			req.Header.Set("X-User", user)
			rec := httptest.NewRecorder()
			pods[i].ServeHTTP(rec, req)
			return rec.Code, rec.Header().Get(decisionHdr)
		})
	})
}

// tupleLabel is the label prefix of the middleware "tuples"' options.
const tupleLabel = "traefik.http.middlewares.tuples.plugin.tollgate."

// TestCompositeKeysDecodeAlike: requestHeaderNames, at the top level and
// in a rule, decodes from a YAML list, a TOML array and a label's
// comma-separated string into one Config; built compiled and under
// Yaegi with Redis down (failure mode open), the local fallback keys by
// the tuple: tenant A's user 1 spends its burst of 1, user 2 still
// passes. A label with an empty item, or a misspelt word, is refused.
func TestCompositeKeysDecodeAlike(t *testing.T) {
	want := tollgate.CreateConfig()
	want.Average, want.Period = 10, "1h"
	want.SourceCriterion = &config.SourceCriterion{RequestHeaderNames: []string{"X-Tenant", "X-User"}, IPStrategy: &config.IPStrategy{Depth: 1}}
	want.Rules = []config.Rule{{Name: "export", PathPrefix: "/export", Average: 5,
		SourceCriterion: &config.SourceCriterion{RequestHeaderNames: []string{"X-Tenant", "X-User"}}}}
	want.Redis.Endpoints = []string{"127.0.0.1:1"}

	const yamlDoc = `
http:
  middlewares:
    tuples:
      plugin:
        tollgate:
          average: 10
          period: 1h
          sourceCriterion:
            requestHeaderNames: [X-Tenant, X-User]
            ipStrategy: {depth: 1}
          rules:
            - name: export
              pathPrefix: /export
              average: 5
              sourceCriterion:
                requestHeaderNames: [X-Tenant, X-User]
          redis:
            endpoints: ["127.0.0.1:1"]
`
	const tomlDoc = `
[http.middlewares.tuples.plugin.tollgate]
  average = 10
  period = "1h"
  [http.middlewares.tuples.plugin.tollgate.sourceCriterion]
    requestHeaderNames = ["X-Tenant", "X-User"]
    [http.middlewares.tuples.plugin.tollgate.sourceCriterion.ipStrategy]
      depth = 1
  [[http.middlewares.tuples.plugin.tollgate.rules]]
    name = "export"
    pathPrefix = "/export"
    average = 5
    [http.middlewares.tuples.plugin.tollgate.rules.sourceCriterion]
      requestHeaderNames = ["X-Tenant", "X-User"]
  [http.middlewares.tuples.plugin.tollgate.redis]
    endpoints = ["127.0.0.1:1"]
`
	labels := map[string]string{
		tupleLabel + "average":                                     "10",
		tupleLabel + "period":                                      "1h",
		tupleLabel + "sourcecriterion.requestheadernames":          "X-Tenant,X-User",
		tupleLabel + "sourcecriterion.ipstrategy.depth":            "1",
		tupleLabel + "rules[0].name":                               "export",
		tupleLabel + "rules[0].pathprefix":                         "/export",
		tupleLabel + "rules[0].average":                            "5",
		tupleLabel + "rules[0].sourcecriterion.requestheadernames": "X-Tenant,X-User",
		tupleLabel + "redis.endpoints":                             "127.0.0.1:1",
	}
	fromFile := func(doc, ext string) map[string]interface{} {
		var d dynamic
		if err := file.DecodeContent(doc, ext, &d); err != nil {
			t.Fatalf("decoding %s: %v", ext, err)
		}
		return d.options(t, "tuples")
	}
	fromLabels := func(labels map[string]string) map[string]interface{} {
		var d dynamic
		if err := parser.Decode(labels, &d, parser.DefaultRootName, "traefik.http"); err != nil {
			t.Fatalf("decoding labels: %v", err)
		}
		return d.options(t, "tuples")
	}
	y, err := NewYaegi(goPath, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	factories := []Factory{Compiled{}, y}
	for _, tc := range []struct {
		desc string
		opts map[string]interface{}
	}{
		{desc: "yaml", opts: fromFile(yamlDoc, ".yaml")},
		{desc: "toml", opts: fromFile(tomlDoc, ".toml")},
		{desc: "labels", opts: fromLabels(labels)},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			got := tollgate.CreateConfig()
			if err := decode(tc.opts, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("decoded config:\n got %+v\nwant %+v", got, want)
			}
			for _, f := range factories {
				h, err := f.New(context.Background(), okHandler, tc.opts, "tuples@file")
				if err != nil {
					t.Fatalf("%T: New: %v", f, err)
				}
				for i, s := range []struct {
					user string
					want int
				}{{"1", 200}, {"1", 429}, {"2", 200}} {
					req := httptest.NewRequest("GET", "/", nil)
					req.Header.Set("X-Forwarded-For", "198.51.100.7")
					req.Header.Set("X-Tenant", tc.desc+"-A")
					req.Header.Set("X-User", s.user)
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, req)
					if rec.Code != s.want {
						t.Fatalf("%T: request %d, user %s, with Redis down: %d, want %d (the local fallback, by tuple)", f, i, s.user, rec.Code, s.want)
					}
				}
			}
		})
	}

	for _, tc := range []struct {
		desc, key, value, err string
	}{
		{desc: "an empty item", key: "sourcecriterion.requestheadernames", value: "X-Tenant,,X-User",
			err: "sourceCriterion.requestHeaderNames[1]: empty"},
		{desc: "a name twice", key: "rules[0].sourcecriterion.requestheadernames", value: "X-User,x-user",
			err: `rules[0].sourceCriterion.requestHeaderNames[1]: "x-user" is also requestHeaderNames[0]`},
		{desc: "a misspelt word", key: "sourcecriterion.requestheadernamez", value: "X-Tenant,X-User",
			err: `sourceCriterion.requestheadernamez: unknown option (did you mean "requestHeaderName`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			bad := map[string]string{}
			for k, v := range labels {
				bad[k] = v
			}
			delete(bad, tupleLabel+"sourcecriterion.requestheadernames")
			bad[tupleLabel+tc.key] = tc.value
			opts := fromLabels(bad)
			for _, f := range factories {
				if _, err := f.New(context.Background(), okHandler, opts, "tuples@file"); err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%T: New error = %v, want one containing %q", f, err, tc.err)
				}
			}
		})
	}
}
