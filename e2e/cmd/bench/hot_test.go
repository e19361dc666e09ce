package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"

	"github.com/tollgate-dev/tollgate/e2e"
)

// TestLeasedConf: the bench's /leased middleware, decoded as Traefik does
// and built compiled, admits the hot-key load's clients from leases, one
// script call per lease or so; /tollgate's makes one per request.
func TestLeasedConf(t *testing.T) {
	r, err := e2e.StartRedis(t.TempDir())
	if err != nil {
		if e2e.NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer r.Kill()
	conf := dynamicConf(sameRedis(r.Addr), admitAll)
	middlewares := conf["http"].(map[string]interface{})["middlewares"].(map[string]interface{})
	const keys, perKey = 10, 3 * leaseMax
	for _, c := range []struct {
		mw       string
		min, max int64 // script calls for keys x perKey requests
	}{
		{"leased-limit", keys, keys * perKey / 5}, // the target: 0.2 per request
		{"tollgate-limit", keys * perKey, keys * perKey},
	} {
		options := middlewares[c.mw].(map[string]interface{})["plugin"].(map[string]interface{})["tollgate"].(map[string]interface{})
		next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
		h, err := e2e.Compiled{}.New(context.Background(), next, options, c.mw)
		if err != nil {
			t.Fatalf("%s: %v", c.mw, err)
		}
		s0, err := r.ScriptCalls()
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < keys*perKey; i++ {
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-API-Key", "k"+strconv.Itoa(i%keys))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("%s: request %d: status %d", c.mw, i, rec.Code)
			}
		}
		s1, err := r.ScriptCalls()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d script calls for %d requests", c.mw, s1-s0, keys*perKey)
		if n := s1 - s0; n < c.min || n > c.max {
			t.Errorf("%s: %d script calls for %d requests on %d keys, want %d to %d", c.mw, n, keys*perKey, keys, c.min, c.max)
		}
	}
}

// TestWithLeased: /leased runs next to /tollgate, after it in odd reps and
// before it in even ones, and the hot-key pass runs the three routes it
// compares, interleaved alike.
func TestWithLeased(t *testing.T) {
	rts := []string{"none", "redis", "tollgate", "minimal"}
	if got, want := withLeased(rts, 1), []string{"none", "redis", "tollgate", leased, "minimal"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rep 1: %v, want %v", got, want)
	}
	if got, want := withLeased(rts, 2), []string{"none", "redis", leased, "tollgate", "minimal"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rep 2: %v, want %v", got, want)
	}
	if got, want := hotOrder(1), []string{"redis", "tollgate", leased}; !reflect.DeepEqual(got, want) {
		t.Errorf("hot, rep 1: %v, want %v", got, want)
	}
	if got, want := hotOrder(2), []string{"redis", leased, "tollgate"}; !reflect.DeepEqual(got, want) {
		t.Errorf("hot, rep 2: %v, want %v", got, want)
	}
}
