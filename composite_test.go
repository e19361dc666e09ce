package tollgate

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// tenantUser is the composite key of these tests.
var tenantUser = &config.SourceCriterion{RequestHeaderNames: []string{"x-tenant", "X-User"}}

// tupleRequest is a GET / from 192.0.2.1 with the X-Tenant and X-User
// lines given (nil: no line).
func tupleRequest(tenant, user []string) *http.Request {
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "192.0.2.1:1234"
	for _, v := range tenant {
		req.Header.Add("X-Tenant", v)
	}
	for _, v := range user {
		req.Header.Add("X-User", v)
	}
	return req
}

// TestHeadersIdentity: a composite key is its headers' first lines, each
// length-prefixed, under its own tag; without one of them (or with its
// first line empty) the request is its client IP's by the IP strategy.
func TestHeadersIdentity(t *testing.T) {
	withDepth := &config.SourceCriterion{RequestHeaderNames: tenantUser.RequestHeaderNames, IPStrategy: &config.IPStrategy{Depth: 1}}
	for _, tc := range []struct {
		desc         string
		sc           *config.SourceCriterion
		tenant, user []string
		xff          string
		want         string
	}{
		{desc: "both", sc: tenantUser, tenant: []string{"a"}, user: []string{"1"}, want: "hs:1:a1:1"},
		{desc: "in the configured order", sc: &config.SourceCriterion{RequestHeaderNames: []string{"X-User", "X-Tenant"}},
			tenant: []string{"a"}, user: []string{"1"}, want: "hs:1:11:a"},
		{desc: "a separator in the first value", sc: tenantUser, tenant: []string{"a|b"}, user: []string{"c"}, want: "hs:3:a|b1:c"},
		{desc: "a separator in the second value", sc: tenantUser, tenant: []string{"a"}, user: []string{"b|c"}, want: "hs:1:a3:b|c"},
		{desc: "digits and colons", sc: tenantUser, tenant: []string{"1:a"}, user: []string{"22:"}, want: "hs:3:1:a3:22:"},
		{desc: "the first line of each", sc: tenantUser, tenant: []string{"a", "junk"}, user: []string{"1", "2"}, want: "hs:1:a1:1"},
		{desc: "no X-User: the client IP", sc: tenantUser, tenant: []string{"a"}, want: "ip:192.0.2.1"},
		{desc: "no X-Tenant: the client IP", sc: tenantUser, user: []string{"1"}, want: "ip:192.0.2.1"},
		{desc: "neither: the client IP", sc: tenantUser, want: "ip:192.0.2.1"},
		{desc: "an empty first line: the client IP", sc: tenantUser, tenant: []string{"a"}, user: []string{"", "1"}, want: "ip:192.0.2.1"},
		{desc: "missing: the client IP by the IP strategy", sc: withDepth, tenant: []string{"a"}, xff: "198.51.100.7", want: "ip:198.51.100.7"},
		{desc: "the IP strategy changes nothing when both are there", sc: withDepth, tenant: []string{"a"}, user: []string{"1"},
			xff: "198.51.100.7", want: "hs:1:a1:1"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			s, err := config.CompileSource(tc.sc)
			if err != nil {
				t.Fatal(err)
			}
			req := tupleRequest(tc.tenant, tc.user)
			if tc.xff != "" {
				req.Header.Set("X-Forwarded-For", tc.xff)
			}
			if got := identity(&s, req); got != tc.want {
				t.Fatalf("identity = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCompositeIdentitiesNeverCollide: every pair of values of at most
// two characters over a letter, a digit, a colon and a bar (what a
// separator or a length prefix could confuse: ("a|", "b") and ("a", "|b")
// for a bar-joined key, ("1:", "a") and ("1", ":a") for a colon-joined
// one), every triple of one character, and a pair that a length prefix
// without its colon would confuse ("12aaaaaaaa", "abc" and "0",
// "aaaaaaaa3abc": both 1012aaaaaaaa3abc) has an identity of its own;
// and none is a single header's, a Host's or an address's identity,
// whatever value, Host or (non-IP) address those carry: every suffix of
// every composite identity is tried as one.
func TestCompositeIdentitiesNeverCollide(t *testing.T) {
	var values, short []string // the values; those of one character
	for _, c := range []string{"a", "1", ":", "|"} {
		short = append(short, c)
		for _, d := range []string{"", "a", "1", ":", "|"} {
			values = append(values, c+d)
		}
	}
	pair, err := config.CompileSource(&config.SourceCriterion{RequestHeaderNames: []string{"X-A", "X-B"}})
	if err != nil {
		t.Fatal(err)
	}
	triple, err := config.CompileSource(&config.SourceCriterion{RequestHeaderNames: []string{"X-A", "X-B", "X-C"}})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}                 // identity: the tuple it came from
	req := httptest.NewRequest("GET", "/", nil) // one request, its headers replaced
	keep := func(id, tuple string) {
		if prev, ok := seen[id]; ok {
			t.Fatalf("%s and %s share the identity %q", prev, tuple, id)
		}
		seen[id] = tuple
	}
	for _, a := range values {
		for _, b := range values {
			req.Header = http.Header{"X-A": {a}, "X-B": {b}}
			keep(identity(&pair, req), fmt.Sprintf("(%q, %q)", a, b))
		}
	}
	for _, p := range [][2]string{{"12aaaaaaaa", "abc"}, {"0", "aaaaaaaa3abc"}} {
		req.Header = http.Header{"X-A": {p[0]}, "X-B": {p[1]}}
		keep(identity(&pair, req), fmt.Sprintf("(%q, %q)", p[0], p[1]))
	}
	for _, a := range short {
		for _, b := range short {
			for _, c := range short {
				req.Header = http.Header{"X-A": {a}, "X-B": {b}, "X-C": {c}}
				keep(identity(&triple, req), fmt.Sprintf("(%q, %q, %q)", a, b, c))
			}
		}
	}
	if len(seen) != len(values)*len(values)+2+len(short)*len(short)*len(short) {
		t.Fatalf("%d identities, want one per tuple", len(seen))
	}
	single, err := config.CompileSource(&config.SourceCriterion{RequestHeaderName: "X-A"})
	if err != nil {
		t.Fatal(err)
	}
	host, err := config.CompileSource(&config.SourceCriterion{RequestHost: true})
	if err != nil {
		t.Fatal(err)
	}
	addr, err := config.CompileSource(nil)
	if err != nil {
		t.Fatal(err)
	}
	composite := make([]string, 0, len(seen))
	for id := range seen {
		composite = append(composite, id)
	}
	for _, id := range composite {
		for i := 0; i < len(id); i++ {
			v := id[i:]
			req.Header = http.Header{"X-A": {v}}
			req.Host = v
			req.RemoteAddr = v // not an IP: keyed as it is
			for _, other := range []struct {
				kind string
				s    *config.Source
			}{{"the single header", &single}, {"the Host", &host}, {"the address", &addr}} {
				if got := identity(other.s, req); seen[got] != "" {
					t.Fatalf("%s %q has the identity %q of %s", other.kind, v, got, seen[got])
				}
			}
		}
	}
	if bucket.ClientKey("api", "hs:3:a|b1:c") == bucket.ClientKey("api", "hs:1:a3:b|c") {
		t.Fatal("the two tuples of the separator case share a client key")
	}
}

// sendTuple serves a request for tenant and user ("": no line) with key
// as X-API-Key ("": none).
func sendTuple(h http.Handler, key, tenant, user string) *httptest.ResponseRecorder {
	req := tupleRequest(nil, nil)
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant", tenant)
	}
	if user != "" {
		req.Header.Set("X-User", user)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

// TestCompositeKeysLimitApart: on Redis, with a burst of 2, each tuple of
// X-Tenant and X-User has a bucket of its own (the separator case too),
// at the top level (through the request path's plain case) and in a rule
// keyed its own way under a top level keyed by X-API-Key; requests
// without one of the headers share their client IP's bucket.
func TestCompositeKeysLimitApart(t *testing.T) {
	addr := redistest.Start(t)
	for _, tc := range []struct {
		desc   string
		mutate func(c *config.Config)
		key    func(i int) string // X-API-Key of request i
		suffix string             // of the bucket's key in Redis
	}{
		{desc: "top level", mutate: func(c *config.Config) {
			c.Burst, c.SourceCriterion = 2, tenantUser
		}, key: func(int) string { return "" }},
		{desc: "a rule", mutate: func(c *config.Config) {
			c.Burst = 1000
			c.Rules = []config.Rule{{Name: "tuples", Average: 60, Period: "1m", Burst: 2, SourceCriterion: tenantUser}}
		}, key: func(i int) string { return fmt.Sprintf("key-%d", i) }, suffix: ":tuples"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			class := fmt.Sprintf("tuples-%d", atomic.AddInt64(&backendSeq, 1))
			h := handlerWith(t, addr, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), func(c *config.Config) {
				c.Class, c.DecisionHeader = class, "X-Decision"
				tc.mutate(c)
			})
			if h.conf.ByHeader && tc.suffix == "" {
				t.Fatal("ByHeader is set for a composite key")
			}
			n := 0
			for i, step := range []struct {
				tenant, user string
				want         int
			}{
				{"A", "1", 200}, {"A", "1", 200}, {"A", "1", 429},
				{"A", "2", 200}, {"B", "1", 200}, {"A", "2", 200}, {"A", "2", 429}, {"B", "1", 200}, {"B", "1", 429},
				{"a|b", "c", 200}, {"a|b", "c", 200}, {"a|b", "c", 429},
				{"a", "b|c", 200}, {"a", "b|c", 200}, {"a", "b|c", 429},
				// no X-User: the client IP's bucket, whatever the tenant
				{"A", "", 200}, {"B", "", 200}, {"C", "", 429}, {"", "1", 429},
			} {
				n++
				rec := sendTuple(h, tc.key(n), step.tenant, step.user)
				if rec.Code != step.want || rec.Header().Get("X-Decision") != "redis" && rec.Header().Get("X-Decision") != "cache" {
					t.Fatalf("step %d (X-Tenant %q, X-User %q): %d decided by %q, want %d by Redis",
						i, step.tenant, step.user, rec.Code, rec.Header().Get("X-Decision"), step.want)
				}
			}
			for _, id := range []string{"hs:1:A1:1", "hs:1:A1:2", "hs:1:B1:1", "hs:3:a|b1:c", "hs:1:a3:b|c", "ip:192.0.2.1"} {
				k := bucket.ClientKey(class, id) + tc.suffix
				if got := redistest.Do(t, addr, "EXISTS", k)[0]; got != "1" {
					t.Errorf("no bucket at %s, the key of %s", k, id)
				}
			}
		})
	}
}

// TestCompositeKeysCapPerTuple: a concurrency cap keyed by client counts
// each tuple's requests in flight apart: with max 1 and tenant A's user 1
// holding a slot, A/1 is refused and A/2 and B/1 are admitted, at the top
// level (serveCapped) and in a rule keyed its own way (the general path);
// the slot is held in Redis under the tuple's client key.
func TestCompositeKeysCapPerTuple(t *testing.T) {
	addr := redistest.Start(t)
	for _, tc := range []struct {
		desc   string
		mutate func(c *config.Config)
		suffix string // of the cap's key in Redis, after the client key
	}{
		{desc: "top level", mutate: func(c *config.Config) {
			c.SourceCriterion = tenantUser
			c.Concurrency = &config.Concurrency{Max: 1, Key: "client"}
		}, suffix: "}c"},
		{desc: "a rule", mutate: func(c *config.Config) {
			c.Average, c.Period, c.Burst = 1000, "1m", 1000
			c.Concurrency = nil
			c.Rules = []config.Rule{{Name: "tuples", Average: 1000, Period: "1m", Burst: 1000, SourceCriterion: tenantUser,
				Concurrency: &config.Concurrency{Max: 1, Key: "client"}}}
		}, suffix: ":tuples}c"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			g := newGate()
			h := capHandler(t, addr, g, config.Concurrency{Max: 1}, tc.mutate)
			var wg sync.WaitGroup
			admitted := make([]*httptest.ResponseRecorder, 3)
			hold := func(i int, tenant, user string) {
				wg.Add(1)
				go func() {
					defer wg.Done()
					admitted[i] = sendTuple(h, fmt.Sprintf("key-%d", i), tenant, user)
				}()
				waitArrived(t, g, 1)
			}
			hold(0, "A", "1")
			if rec := sendTuple(h, "key-again", "A", "1"); rec.Code != http.StatusTooManyRequests {
				t.Fatalf("A/1 again while A/1 holds its slot: %d, want 429", rec.Code)
			}
			hold(1, "A", "2")
			hold(2, "B", "1")
			zkey := bucket.ClientKey(h.conf.Class, "hs:1:A1:1") + tc.suffix
			if n := slots(t, addr, zkey); n != "1" {
				t.Errorf("%s holds %s slots, want A/1's one", zkey, n)
			}
			close(g.open)
			wg.Wait()
			settle(t, h)
			for i, rec := range admitted {
				if rec.Code != http.StatusOK {
					t.Errorf("held request %d: %d, want 200", i, rec.Code)
				}
			}
			if n := slots(t, addr, zkey); n != "0" {
				t.Errorf("%s holds %s slots once every request ended, want 0", zkey, n)
			}
		})
	}
}
