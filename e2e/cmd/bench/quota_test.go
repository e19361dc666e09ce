package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/gomodule/redigo/redis"
	"github.com/tollgate-dev/tollgate/e2e"
	"github.com/traefik/paerser/file"
	"github.com/traefik/traefik/v3/pkg/config/dynamic"
	"gopkg.in/yaml.v3"
)

// traefikOptions is the bench's configuration written as the fleet writes
// it (YAML) and decoded as Traefik's file provider does: the options of
// each middleware of the tollgate plugin.
func traefikOptions(t *testing.T, conf map[string]interface{}) map[string]map[string]interface{} {
	t.Helper()
	d := decodeDynamic(t, conf)
	out := map[string]map[string]interface{}{}
	for name, mw := range d.HTTP.Middlewares {
		if p, ok := mw.Plugin["tollgate"]; ok {
			out[name] = p
		}
	}
	return out
}

// decodeDynamic is the bench's configuration written as the fleet writes
// it (YAML) and decoded as Traefik's file provider does.
func decodeDynamic(t *testing.T, conf map[string]interface{}) *dynamic.Configuration {
	t.Helper()
	b, err := yaml.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	var d dynamic.Configuration
	if err := file.DecodeContent(string(b), ".yaml", &d); err != nil {
		t.Fatal(err)
	}
	return &d
}

// TestQuotaConf: the bench's /quota middleware, decoded as Traefik does,
// is /tollgate's plus a monthly quota of 10^12; built compiled, it admits
// every request, sends the quota's policy, and charges the rate and the
// quota in one script call per request, the quota's counter counting each.
func TestQuotaConf(t *testing.T) {
	r, err := e2e.StartRedis(t.TempDir())
	if err != nil {
		if e2e.NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer r.Kill()
	opts := traefikOptions(t, dynamicConf(sameRedis(r.Addr), admitAll))
	options := opts["quota-limit"]
	if options == nil || options["quotas"] == nil {
		t.Fatalf("quota-limit: no quotas in %v", options)
	}
	without := map[string]interface{}{}
	for k, v := range options {
		if k != "quotas" {
			without[k] = v
		}
	}
	if !reflect.DeepEqual(without, opts["tollgate-limit"]) {
		t.Errorf("quota-limit without its quotas: %v, want tollgate-limit's %v", without, opts["tollgate-limit"])
	}
	// A Redis slower than the default timeout on a busy machine would
	// fall back, and skip script calls, once the breaker opens.
	options["redis"].(map[string]interface{})["timeout"] = "1s"
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
	h, err := e2e.Compiled{}.New(context.Background(), next, options, "quota-limit")
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 10, 20
	s0, err := r.ScriptCalls()
	if err != nil {
		t.Fatal(err)
	}
	policy := `"month";q=` + strconv.FormatInt(quotaLimit, 10) + ";"
	for i := 0; i < keys*perKey; i++ {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", "k"+strconv.Itoa(i%keys))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, rec.Code)
		}
		if p := rec.Header().Get("RateLimit-Policy"); !strings.Contains(p, policy) {
			t.Fatalf("request %d: RateLimit-Policy %q, want %s in it", i, p, policy)
		}
	}
	s1, err := r.ScriptCalls()
	if err != nil {
		t.Fatal(err)
	}
	if n := s1 - s0; n != keys*perKey {
		t.Errorf("%d script calls for %d requests, want one each", n, keys*perKey)
	}
	counters, err := redis.Strings(r.Do("KEYS", "*:month@*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(counters) != keys {
		t.Fatalf("quota counters %v, want one per key (%d)", counters, keys)
	}
	for _, k := range counters {
		if n, err := redis.Int64(r.Do("GET", k)); err != nil || n != perKey {
			t.Errorf("counter %s: %d (%v), want %d", k, n, err, perKey)
		}
	}
}

// TestAdmitOrder: in the admitted pass /capped runs right next to
// /tollgate, after it in odd reps and before it in even ones, then /quota,
// /leased as TestWithLeased says; the hot-key pass has neither /quota nor
// /capped.
func TestAdmitOrder(t *testing.T) {
	rts := []string{"none", "redis", "tollgate", "minimal"}
	if got, want := admitOrder(rts, 1), []string{"none", "redis", "tollgate", capped, quota, leased, "minimal"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rep 1: %v, want %v", got, want)
	}
	if got, want := admitOrder(rts, 2), []string{"none", "redis", leased, quota, capped, "tollgate", "minimal"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rep 2: %v, want %v", got, want)
	}
	if got, want := admitOrder(rts, 3), admitOrder(rts, 1); !reflect.DeepEqual(got, want) {
		t.Errorf("rep 3: %v, want rep 1's %v", got, want)
	}
	for _, rep := range []int{1, 2} {
		for _, rt := range hotOrder(rep) {
			if rt == quota || rt == capped {
				t.Errorf("hot, rep %d: %v has %s", rep, hotOrder(rep), rt)
			}
		}
	}
}

// TestOneScriptEach: a run makes one script call per request when Redis
// counted one per completed request and at most one per connection more;
// a quota charged in a call of its own (two per request) is not.
func TestOneScriptEach(t *testing.T) {
	for _, c := range []struct {
		requests, scripts int64
		want              bool
	}{
		{1000, 1000, true},
		{1000, 1064, true},
		{1000, 1065, false},
		{1000, 999, false},
		{1000, 2000, false},
	} {
		if got := oneScriptEach(wrkResult{requests: c.requests, redisScripts: c.scripts}, 64); got != c.want {
			t.Errorf("%d requests, %d script calls: %v, want %v", c.requests, c.scripts, got, c.want)
		}
	}
}
