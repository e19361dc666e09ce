package e2e

// Unknown config words as operators meet them: Docker labels decoded by
// Traefik's own label parser, and a real Traefik v3.6.12 loading a dynamic
// file whose routers carry a misspelled option. mapstructure alone would
// drop a word that names no field, and the route would run with another
// limit or another key; Tollgate refuses the middleware instead, naming
// the word and the nearest option. Options are plain maps and label
// strings here: no root type is named.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// uwLabel is the label prefix of the middleware "bad"'s Tollgate options.
const uwLabel = "traefik.http.middlewares.bad.plugin.tollgate."

// uwDecodeLabels writes labels (name without uwLabel, value) as a labels
// file and decodes it with Traefik's label parser (decodeLabels), returning
// the options of the middleware "bad". Every set also gets
// redis.endpoints=127.0.0.1:1, as labels.txt has: a set that builds dials
// no Redis of the host.
func uwDecodeLabels(t *testing.T, labels [][2]string) map[string]interface{} {
	t.Helper()
	labels = append(labels[:len(labels):len(labels)], [2]string{"redis.endpoints", "127.0.0.1:1"})
	var b strings.Builder
	for _, l := range labels {
		fmt.Fprintf(&b, "%s%s=%s\n", uwLabel, l[0], l[1])
	}
	path := filepath.Join(t.TempDir(), "labels.txt")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return decodeLabels(t, path).options(t, "bad")
}

// TestUnknownWordsFromLabels: a misspelled option in Docker labels (every
// value a string), at the top, in sourceCriterion and in a rule, makes New
// fail, compiled and under Yaegi, with an error naming the word as the
// label wrote it, where it was written, and the option meant; the same
// labels with the word spelled right build (the error is the word's), and
// so does every middleware of testdata/config/labels.txt.
func TestUnknownWordsFromLabels(t *testing.T) {
	y, err := NewYaegi(goPath, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	factories := []Factory{Compiled{}, y}
	for _, tc := range []struct {
		desc       string
		bad, fixed [][2]string
		want       string // the whole error
	}{
		{
			desc:  "top",
			bad:   [][2]string{{"average", "10"}, {"burts", "3"}},
			fixed: [][2]string{{"average", "10"}, {"burst", "3"}},
			want:  `tollgate bad@docker: burts: unknown option (did you mean "burst"?)`,
		},
		{
			// Label keys keep the case they are written in; the labels
			// of testdata/config/labels.txt are all lower case.
			desc:  "sourceCriterion",
			bad:   [][2]string{{"average", "10"}, {"sourcecriterion.requestheadernme", "X-API-Key"}},
			fixed: [][2]string{{"average", "10"}, {"sourcecriterion.requestheadername", "X-API-Key"}},
			want:  `tollgate bad@docker: sourceCriterion.requestheadernme: unknown option (did you mean "requestHeaderName"?)`,
		},
		{
			desc:  "sourceCriterion camel case",
			bad:   [][2]string{{"average", "10"}, {"sourceCriterion.requestHeaderNme", "X-API-Key"}},
			fixed: [][2]string{{"average", "10"}, {"sourceCriterion.requestHeaderName", "X-API-Key"}},
			want:  `tollgate bad@docker: sourceCriterion.requestHeaderNme: unknown option (did you mean "requestHeaderName"?)`,
		},
		{
			desc:  "rule",
			bad:   [][2]string{{"average", "10"}, {"rules[0].name", "login"}, {"rules[0].average", "5"}, {"rules[0].pathprefx", "/login"}},
			fixed: [][2]string{{"average", "10"}, {"rules[0].name", "login"}, {"rules[0].average", "5"}, {"rules[0].pathprefix", "/login"}},
			want:  `tollgate bad@docker: rules[0].pathprefx: unknown option (did you mean "pathPrefix"?)`,
		},
		{
			// The only limit misspelled: the word is named, not "no limit".
			desc:  "only limit",
			bad:   [][2]string{{"averge", "10"}},
			fixed: [][2]string{{"average", "10"}},
			want:  `tollgate bad@docker: averge: unknown option (did you mean "average"?)`,
		},
		{
			desc:  "no limit",
			bad:   [][2]string{{"period", "60"}, {"burst", "20"}, {"sourcecriterion.requestheadername", "X-API-Key"}},
			fixed: [][2]string{{"average", "10"}, {"period", "60"}, {"burst", "20"}, {"sourcecriterion.requestheadername", "X-API-Key"}},
			want:  `tollgate bad@docker: no limit: set average, rules, plans, quotas or concurrency`,
		},
	} {
		tc := tc
		t.Run(tc.desc, func(t *testing.T) {
			bad, fixed := uwDecodeLabels(t, tc.bad), uwDecodeLabels(t, tc.fixed)
			for _, f := range factories {
				h, err := f.New(context.Background(), okHandler, bad, "bad@docker")
				if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
					t.Fatalf("%T: New(%v) = %v, %v; want the error %q", f, bad, h, err, tc.want)
				}
				if _, err := f.New(context.Background(), okHandler, fixed, "bad@docker"); err != nil {
					t.Fatalf("%T: New(%v) with the word spelled right: %v", f, fixed, err)
				}
			}
		})
	}

	t.Run("labels.txt", func(t *testing.T) {
		d := decodeLabels(t, testdata("config", "labels.txt"))
		if d.HTTP == nil || len(d.HTTP.Middlewares) == 0 {
			t.Fatal("no middleware in testdata/config/labels.txt")
		}
		var names []string
		for name := range d.HTTP.Middlewares {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			opts := d.options(t, name)
			if len(opts) == 0 {
				t.Fatalf("middleware %s: no Tollgate options", name)
			}
			for _, f := range factories {
				if _, err := f.New(context.Background(), okHandler, opts, name+"@docker"); err != nil {
					t.Fatalf("%T: New(%s): %v", f, name, err)
				}
			}
		}
	})
}

// uwInfo is what Traefik's API says of a router or middleware.
type uwInfo struct {
	Status string   `json:"status"`
	Error  []string `json:"error"`
}

// uwAPI returns Traefik's API view of /api/http/<kind>/<name>, or the
// HTTP status when it answers other than 200.
func uwAPI(tr *Traefik, kind, name string) (uwInfo, error) {
	var info uwInfo
	resp, err := http.Get("http://" + tr.API + "/api/http/" + kind + "/" + name)
	if err != nil {
		return info, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return info, err
	}
	if resp.StatusCode != http.StatusOK {
		return info, fmt.Errorf("GET /api/http/%s/%s: %d %s", kind, name, resp.StatusCode, b)
	}
	return info, json.Unmarshal(b, &info)
}

// TestUnknownWordsInTraefik: a real Traefik v3.6.12 loads a dynamic file
// with three routers to the backend, each with its own Tollgate middleware:
// "good" (average 10) is enabled and serves; "typo" (burts: 3) and "header"
// (sourceCriterion.requestHeaderNme) are disabled, their middlewares too,
// their paths answer 404 and never reach the backend, and Traefik logs,
// at ERROR, each router's error naming the word and the option meant.
// Were the word silently dropped, "typo" would be enabled and answer 200.
func TestUnknownWordsInTraefik(t *testing.T) {
	dir, r := fleetRedis(t)
	// Keyed by X-API-Key (burst 1 by default: each request below has a
	// key of its own).
	opts := func(kv ...interface{}) map[string]interface{} {
		return withOptions(map[string]interface{}{
			"average":         10,
			"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
			"redis":           map[string]interface{}{"endpoints": []interface{}{r.Addr}},
		}, kv...)
	}
	conf := dynamicConf(
		route{name: "good", rule: "PathPrefix(`/good`)", opts: opts()},
		route{name: "typo", rule: "PathPrefix(`/typo`)", opts: opts("burts", 3)},
		route{name: "header", rule: "PathPrefix(`/header`)", opts: opts("sourceCriterion", map[string]interface{}{"requestHeaderNme": "X-API-Key"})},
	)
	fe := fleetIn(t, dir, 1, conf, "good@file")
	tr := fe.fleet.Replicas[0]

	// good: enabled, and a request through the web entrypoint reaches the
	// backend through the middleware (which answers with its headers).
	if rep := fe.mustSend(0, "GET", "/good", "k1"); rep.status != http.StatusOK || rep.body != "ok\n" || rep.header.Get("RateLimit-Policy") == "" {
		t.Fatalf("GET /good: %d %q %v, want 200 ok from the backend with RateLimit-Policy", rep.status, rep.body, rep.header)
	}
	if hits := fe.fleet.Backend.Hits(); hits != 1 {
		t.Fatalf("backend hits after GET /good: %d, want 1", hits)
	}

	for _, tc := range []struct {
		router, middleware, path string
		want                     string // the plugin's error
		logWant                  string // the same, as Traefik's console log quotes it
	}{
		{
			router: "typo@file", middleware: "typo-limit@file", path: "/typo",
			want:    `tollgate typo-limit@file: burts: unknown option (did you mean "burst"?)`,
			logWant: `error="tollgate typo-limit@file: burts: unknown option (did you mean \"burst\"?)"`,
		},
		{
			router: "header@file", middleware: "header-limit@file", path: "/header",
			want:    `tollgate header-limit@file: sourceCriterion.requestHeaderNme: unknown option (did you mean "requestHeaderName"?)`,
			logWant: `error="tollgate header-limit@file: sourceCriterion.requestHeaderNme: unknown option (did you mean \"requestHeaderName\"?)"`,
		},
	} {
		// The file provider hands Traefik the three routers at once, and
		// good is enabled: the others' status is settled. The waits are
		// bounded all the same.
		deadline := time.Now().Add(10 * time.Second)
		var rt, mw uwInfo
		var err error
		for {
			rt, err = uwAPI(tr, "routers", tc.router)
			if err == nil && rt.Status == "disabled" || time.Now().After(deadline) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil || rt.Status != "disabled" || len(rt.Error) != 1 || rt.Error[0] != tc.want {
			t.Fatalf("router %s: %+v (%v), want status disabled with the one error %q", tc.router, rt, err, tc.want)
		}
		if mw, err = uwAPI(tr, "middlewares", tc.middleware); err != nil || mw.Status != "disabled" || len(mw.Error) != 1 || mw.Error[0] != tc.want {
			t.Fatalf("middleware %s: %+v (%v), want status disabled with the one error %q", tc.middleware, mw, err, tc.want)
		}
		if st := tr.RouterStatus(tc.router); st != "disabled" {
			t.Fatalf("RouterStatus(%s) = %q, want disabled", tc.router, st)
		}

		// No router serves the path: Traefik's 404, not the backend.
		before := fe.fleet.Backend.Hits()
		if rep := fe.mustSend(0, "GET", tc.path, "k"); rep.status != http.StatusNotFound || rep.body != "404 page not found\n" || rep.header.Get("RateLimit-Policy") != "" {
			t.Fatalf("GET %s: %d %q %v, want Traefik's 404 page not found", tc.path, rep.status, rep.body, rep.header)
		}
		if hits := fe.fleet.Backend.Hits(); hits != before {
			t.Fatalf("GET %s reached the backend (%d hits, was %d)", tc.path, hits, before)
		}

		// Traefik's log (level ERROR) has the router's error line.
		var line string
		for deadline := time.Now().Add(10 * time.Second); line == "" && time.Now().Before(deadline); {
			for _, l := range strings.Split(tr.Log(), "\n") {
				if strings.Contains(l, " ERR ") && strings.Contains(l, tc.logWant) && strings.Contains(l, "routerName="+tc.router) {
					line = l
					break
				}
			}
			if line == "" {
				time.Sleep(20 * time.Millisecond)
			}
		}
		if line == "" {
			t.Fatalf("%s: no ERR line with %s and routerName=%s in Traefik's log:\n%s", tc.router, tc.logWant, tc.router, tr.Log())
		}
		t.Logf("%s: %s", tc.router, line)
	}

	// Still good after: the bad routers took nothing from it.
	if st := tr.RouterStatus("good@file"); st != "enabled" {
		t.Fatalf("router good@file: %q, want enabled", st)
	}
	before := fe.fleet.Backend.Hits()
	if rep := fe.mustSend(0, "GET", "/good", "k2"); rep.status != http.StatusOK || rep.body != "ok\n" {
		t.Fatalf("GET /good: %d %q, want 200 ok", rep.status, rep.body)
	}
	if hits := fe.fleet.Backend.Hits(); hits != before+1 {
		t.Fatalf("backend hits after the second GET /good: %d, want %d", hits, before+1)
	}
}
