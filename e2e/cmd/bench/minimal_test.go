package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/mitchellh/mapstructure"
	"github.com/tollgate-dev/tollgate/e2e"
	"github.com/tollgate-dev/tollgate/e2e/cmd/bench/minimal"
	"github.com/traefik/yaegi/interp"
	"github.com/traefik/yaegi/stdlib"
)

// newMinimal builds the reference limiter compiled, or interpreted from
// what installMinimal writes (as Traefik loads it), with options decoded
// over CreateConfig as Traefik does.
func newMinimal(t *testing.T, kind string, next http.Handler, options map[string]interface{}) http.Handler {
	t.Helper()
	decode := func(cfg interface{}) {
		d, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{WeaklyTypedInput: true, Result: cfg})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Decode(options); err != nil {
			t.Fatal(err)
		}
	}
	if kind == "compiled" {
		cfg := minimal.CreateConfig()
		decode(cfg)
		h, err := minimal.New(context.Background(), next, cfg, "test")
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	dir := t.TempDir()
	if err := installMinimal(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{".traefik.yml", "go.mod"} {
		if _, err := os.Stat(filepath.Join(dir, "plugins-local", "src", minimalModule, f)); err != nil {
			t.Fatal(err)
		}
	}
	i := interp.New(interp.Options{GoPath: filepath.Join(dir, "plugins-local")})
	if err := i.Use(stdlib.Symbols); err != nil {
		t.Fatal(err)
	}
	if _, err := i.Eval(fmt.Sprintf("import %q", minimalModule)); err != nil {
		t.Fatal(err)
	}
	fnCreate, err := i.Eval("minimal.CreateConfig")
	if err != nil {
		t.Fatal(err)
	}
	fnNew, err := i.Eval("minimal.New")
	if err != nil {
		t.Fatal(err)
	}
	cfg := fnCreate.Call(nil)[0]
	decode(cfg.Interface())
	out := fnNew.Call([]reflect.Value{reflect.ValueOf(context.Background()), reflect.ValueOf(next), cfg, reflect.ValueOf("test")})
	if e := out[1].Interface(); e != nil {
		t.Fatal(e)
	}
	return out[0].Interface().(http.Handler)
}

func TestMinimal(t *testing.T) {
	r, err := e2e.StartRedis(t.TempDir())
	if e2e.NeedRedis(err) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.Kill()
	for i, kind := range []string{"compiled", "yaegi"} {
		t.Run(kind, func(t *testing.T) {
			next := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { rw.WriteHeader(http.StatusOK) })
			h := newMinimal(t, kind, next, map[string]interface{}{"average": 2, "period": "1m", "burst": 2, "redis": r.Addr})
			serve := func(key string) *httptest.ResponseRecorder {
				rw := httptest.NewRecorder()
				req := httptest.NewRequest("GET", "http://x/", nil)
				req.Header.Set("X-API-Key", key)
				h.ServeHTTP(rw, req)
				return rw
			}
			key := func(s string) string { return fmt.Sprintf("%s-%d", s, i) }
			// The first call loads the script (NOSCRIPT); the burst of 2
			// admits two, the third is refused; another key has its own.
			for step, want := range []int{200, 200, 429} {
				if rw := serve(key("a")); rw.Code != want {
					t.Fatalf("step %d: status %d, want %d", step, rw.Code, want)
				}
			}
			rw := serve(key("b"))
			if rw.Code != 200 || rw.Header().Get("RateLimit-Policy") != `"default";q=2;w=60` {
				t.Fatalf("other key: status %d, policy %q", rw.Code, rw.Header().Get("RateLimit-Policy"))
			}
			// After SCRIPT FLUSH, NOSCRIPT reloads it.
			if _, err := r.Do("SCRIPT", "FLUSH"); err != nil {
				t.Fatal(err)
			}
			if rw := serve(key("c")); rw.Code != 200 {
				t.Fatalf("after SCRIPT FLUSH: status %d", rw.Code)
			}
			// A connection the server closed is dropped: a later request
			// dials again.
			if _, err := r.Do("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"); err != nil {
				t.Fatal(err)
			}
			admitted := false
			for j := 0; j < 3 && !admitted; j++ {
				admitted = serve(key(fmt.Sprintf("d%d", j))).Code == 200
			}
			if !admitted {
				t.Fatal("not admitted after the connections were killed")
			}
			// Its connections are named for the bench.
			named, _, err := r.ClientsNamed("minimal")
			if err != nil || named != 1 {
				t.Fatalf("connections named minimal: %d (%v), want 1", named, err)
			}
		})
	}
}

// TestEmpty checks the empty middleware, compiled and interpreted: it
// calls next and adds nothing; with refuse it answers 429 without next.
func TestEmpty(t *testing.T) {
	for _, kind := range []string{"compiled", "yaegi"} {
		t.Run(kind, func(t *testing.T) {
			called := 0
			next := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
				called++
				rw.Header().Set("X-Next", "1")
				rw.WriteHeader(http.StatusOK)
			})
			for _, refuse := range []bool{false, true} {
				called = 0
				h := newMinimal(t, kind, next, map[string]interface{}{"empty": true, "refuse": refuse})
				rw := httptest.NewRecorder()
				req := httptest.NewRequest("GET", "http://x/", nil)
				req.Header.Set("X-API-Key", "a")
				h.ServeHTTP(rw, req)
				want, wantCalled, wantHeaders := http.StatusOK, 1, 1
				if refuse {
					want, wantCalled, wantHeaders = http.StatusTooManyRequests, 0, 0
				}
				if rw.Code != want || called != wantCalled || len(rw.Header()) != wantHeaders || rw.Body.Len() != 0 {
					t.Fatalf("refuse %v: status %d, next called %d times, headers %v, body %q", refuse, rw.Code, called,
						rw.Header(), rw.Body.String())
				}
			}
		})
	}
}
