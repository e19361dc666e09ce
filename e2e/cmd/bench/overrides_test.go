package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"github.com/tollgate-dev/tollgate/e2e"
	"github.com/tollgate-dev/tollgate/internal/config"
)

// TestOverrideConf: decoded as Traefik does, whatever the pass's limits
// and with -before, the override routes are routers of their own through
// <route>-limit to the backend, each middleware /tollgate's on the shared
// Redis plus its class (the route's name); the admin router's middleware,
// of the current plugin, is an admin endpoint naming exactly those
// classes; the earlier revision's middleware keeps its plugin.
func TestOverrideConf(t *testing.T) {
	a := sameRedis("127.0.0.1:1")
	a.refuse, a.before = "127.0.0.1:2", "127.0.0.1:3"
	for _, l := range []limits{admitAll, rejectMost, memory} {
		d := decodeDynamic(t, dynamicConf(a, l))
		opts := traefikOptions(t, dynamicConf(a, l))
		var classes []string
		for _, rt := range overrideRoutes {
			r := d.HTTP.Routers[rt]
			if r == nil || !reflect.DeepEqual(r.Middlewares, []string{rt + "-limit"}) || r.Service != "backend" || r.Rule != "PathPrefix(`/"+rt+"`)" {
				t.Fatalf("%+v: router %s: %+v", l, rt, r)
			}
			got := opts[rt+"-limit"]
			want := map[string]interface{}{"class": rt}
			for k, v := range opts["tollgate-limit"] {
				want[k] = v
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%+v: %s-limit %v, want /tollgate's with class %s: %v", l, rt, got, rt, want)
			}
			classes = append(classes, got["class"].(string))
		}
		r := d.HTTP.Routers[adminRoute]
		if r == nil || !reflect.DeepEqual(r.Middlewares, []string{adminRoute}) || r.Service != "noop@internal" || r.Rule != "PathPrefix(`/"+adminRoute+"`)" {
			t.Fatalf("%+v: router %s: %+v", l, adminRoute, r)
		}
		adm := opts[adminRoute]
		if adm == nil || adm["serveAdmin"] != "true" || !reflect.DeepEqual(adm["adminClasses"], []interface{}{ovr0, ovr10k}) || len(adm) != 2 {
			t.Errorf("%+v: middleware %s: %#v, want serveAdmin naming %v", l, adminRoute, adm, classes)
		}
		if !reflect.DeepEqual(classes, []string{ovr0, ovr10k}) {
			t.Errorf("%+v: the override routes' classes %v", l, classes)
		}
		if _, ok := d.HTTP.Middlewares["before-limit"].Plugin[beforePlugin]; !ok {
			t.Errorf("%+v: before-limit: %+v, want the %s plugin", l, d.HTTP.Middlewares["before-limit"], beforePlugin)
		}
	}
}

// TestLoadOverrides: the loader replaces the class's hash with exactly n
// fields, each the override of an API key not in the load, as Tollgate
// keys it (o: and the client key of X-API-Key's value), its value a valid
// override of the bench's rate expiring when asked; loading fewer, or
// none, leaves no more.
func TestLoadOverrides(t *testing.T) {
	r, err := e2e.StartRedis(t.TempDir())
	if err != nil {
		if e2e.NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer r.Kill()
	expires := time.Now().Add(overrideTTL).UnixMilli()
	load := map[string]bool{}
	for i := 0; i < shapeKeys; i++ {
		load[overrideField(ovr10k, "k"+strconv.Itoa(i))] = true
	}
	for _, n := range []int{2500, defaultOverrides, 7, 0} {
		if err := loadOverrides(r, ovr10k, n, expires); err != nil {
			t.Fatal(err)
		}
		h, err := redis.StringMap(r.Do("HGETALL", overridesKey(ovr10k)))
		if err != nil {
			t.Fatal(err)
		}
		if v := h["v"]; n > 0 && v == "" {
			t.Fatalf("n %d: no version field", n)
		}
		delete(h, "v")
		if len(h) != n {
			t.Fatalf("n %d: %d fields", n, len(h))
		}
		for i := 0; i < n; i++ {
			f := overrideField(ovr10k, overrideKey(i))
			v, ok := h[f]
			if !ok || load[f] || !strings.HasPrefix(f, "o:tg{") || len(f) != 2+14 {
				t.Fatalf("n %d: field %q of %s: present %v, a load key's %v", n, f, overrideKey(i), ok, load[f])
			}
			o, err := config.DecodeOverride(v)
			if want := (config.Override{Average: overrideRate, Burst: overrideRate, Period: time.Second, ExpiresMS: expires}); err != nil || o != want {
				t.Fatalf("n %d: %s = %q: %+v, %v; want %+v", n, f, v, o, err, want)
			}
		}
	}
	if n, err := redis.Int(r.Do("EXISTS", overridesKey(ovr10k))); err != nil || n != 0 {
		t.Errorf("0 overrides: the hash exists (%d, %v)", n, err)
	}
}

// TestOverridesCompiled: the bench's admin middleware and /ovr10k's,
// decoded as Traefik does and built compiled on one Redis holding the
// loader's overrides: a key given one is served under it, the load's keys
// under the class's limits.
func TestOverridesCompiled(t *testing.T) {
	r, err := e2e.StartRedis(t.TempDir())
	if err != nil {
		if e2e.NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer r.Kill()
	if err := loadOverrides(r, ovr10k, 100, time.Now().Add(overrideTTL).UnixMilli()); err != nil {
		t.Fatal(err)
	}
	opts := traefikOptions(t, dynamicConf(sameRedis(r.Addr), admitAll))
	ctx := context.Background()
	if _, err := (e2e.Compiled{}).New(ctx, http.NotFoundHandler(), opts[adminRoute], adminRoute); err != nil {
		t.Fatal(err)
	}
	options := opts[ovr10k+"-limit"]
	options["redis"].(map[string]interface{})["timeout"] = "1s" // no fallback on a busy machine
	h, err := e2e.Compiled{}.New(ctx, http.HandlerFunc(serveBackend), options, ovr10k+"-limit")
	if err != nil {
		t.Fatal(err)
	}
	policy := func(key string) string {
		req := httptest.NewRequest("GET", "/"+ovr10k, nil)
		req.Header.Set("X-API-Key", key)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("%s: status %d", key, rec.Code)
		}
		return rec.Header().Get("RateLimit-Policy")
	}
	for _, c := range []struct {
		key  string
		want int64
	}{{overrideKey(0), overrideRate}, {overrideKey(99), overrideRate}, {"k0", admitAll.burst}, {overrideKey(100), admitAll.burst}} {
		if got, want := policy(c.key), ";q="+strconv.FormatInt(c.want, 10)+";"; !strings.Contains(got, want) {
			t.Errorf("%s: RateLimit-Policy %q, want %s", c.key, got, want)
		}
	}
}
