package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

// TestCappedConf: the bench's /capped middleware, decoded as Traefik
// does, is /tollgate's plus a cap of 10^6 per client; built compiled, it
// admits every request with one take's call each, and gives every slot
// back in a call of its own, as slotCalls and heldSlots count them.
func TestCappedConf(t *testing.T) {
	r, err := e2e.StartRedis(t.TempDir())
	if err != nil {
		if e2e.NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer r.Kill()
	opts := traefikOptions(t, dynamicConf(sameRedis(r.Addr), admitAll))
	options := opts["capped-limit"]
	if options == nil || options["concurrency"] == nil {
		t.Fatalf("capped-limit: no concurrency in %v", options)
	}
	without := map[string]interface{}{}
	for k, v := range options {
		if k != "concurrency" {
			without[k] = v
		}
	}
	if !reflect.DeepEqual(without, opts["tollgate-limit"]) {
		t.Errorf("capped-limit without its cap: %v, want tollgate-limit's %v", without, opts["tollgate-limit"])
	}
	options["redis"].(map[string]interface{})["timeout"] = "1s" // no fallback on a busy machine
	next := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})
	h, err := e2e.Compiled{}.New(context.Background(), next, options, "capped-limit")
	if err != nil {
		t.Fatal(err)
	}
	const keys, perKey = 10, 20
	s0, err := r.ScriptCalls()
	if err != nil {
		t.Fatal(err)
	}
	c0, err := slotCalls(r)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < keys*perKey; i++ {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", "k"+strconv.Itoa(i%keys))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			t.Fatalf("request %d: status %d", i, rec.Code)
		}
	}
	var c slotCounts
	for i := 0; i < 100; i++ { // the give-backs (a failed one is sent again off the response's path)
		c1, err := slotCalls(r)
		if err != nil {
			t.Fatal(err)
		}
		if c1.held, err = heldSlots(r); err != nil {
			t.Fatal(err)
		}
		if c = c1.sub(c0); c.givenBack == keys*perKey && c.held == 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s1, err := r.ScriptCalls()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d requests: %d script calls, slots %+v", keys*perKey, s1-s0, c)
	if c.takes != keys*perKey || c.givenBack != keys*perKey || c.tombstones != 0 || c.held != 0 {
		t.Errorf("slots %+v, want %d taken and given back, none before its take, none held", c, keys*perKey)
	}
	// One give-back call per request, sent when next returns; the first
	// may be an EVALSHA answered NOSCRIPT and its EVAL (the give-back's
	// script is loaded on first use).
	if gives := s1 - s0 - c.takes; gives < keys*perKey || gives > keys*perKey+2 {
		t.Errorf("%d script calls for %d takes: %d give-back calls, want %d to %d (one per request)", s1-s0, c.takes, gives, keys*perKey, keys*perKey+2)
	}
}
