package tollgate

// Plans, exemptions, identity per rule and rotation at their edges: each
// test was written by an independent review against a defect it found (it
// failed then) and says which.

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// TestExtraKeyLinesGainNothing: a client holding one valid API
// key sends it as the first X-API-Key line (what Go's Header.Get, Node's
// and Traefik's own rateLimit read) and a fresh junk line after it: the
// backend authenticates the first line, Tollgate keys "valid, junk-N", a
// fresh bucket per request. Burst 2: 20 requests should get 2.
func TestExtraKeyLinesGainNothing(t *testing.T) {
	var h http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = uniqueName("keylines")
		c.Average, c.Period, c.Burst = 2, "1h", 2
	})
	key := uniqueName("valid")
	if got := admitted(h, 20, "GET", "/", "X-API-Key", key, "X-API-Key", "junk-%d"); got != 2 {
		t.Errorf("one valid key plus a fresh second line: %d of 20 admitted, want 2 (the key's burst)", got)
	}
	key = uniqueName("valid")
	if got := admitted(h, 20, "GET", "/", "X-API-Key", key, "X-API-Key", "", "X-API-Key", "%d"); got != 2 {
		t.Errorf("one valid key plus an empty and a fresh line: %d of 20 admitted, want 2", got)
	}
}

// TestShardsLeaveARuleKeyedItsOwnWayWhole: shards split every
// policy's limit by N (compile.go: split on every rule), but a rule keyed
// its own way is charged on one unsharded key (ownCall/ownKeys): its
// clients get 1/N of the limit the rule and its RateLimit-Policy state,
// while the local fallback gives the whole limit. Login 4 per hour, burst
// 4, shards 4: from one IP, 10 logins should get 4 (they get 1).
func TestShardsLeaveARuleKeyedItsOwnWayWhole(t *testing.T) {
	addr := redistest.Start(t)
	var h http.Handler = handlerOn(t, addr, func(c *config.Config) {
		c.Class = uniqueName("shardlogin")
		c.Average, c.Period, c.Burst = 400, "1h", 400
		c.Shards = 4
		c.Redis.Timeout = "1s"
		c.Rules = []config.Rule{{Name: "login", PathPrefix: "/login", Average: 4, Period: "1h", Burst: 4,
			SourceCriterion: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}}}}
	})
	if got := admitted(h, 10, "POST", "/login", "X-API-Key", "k-%d", "X-Forwarded-For", "198.51.100.9"); got != 4 {
		t.Errorf("10 logins from one IP, rule burst 4 on an unsharded key: %d admitted, want 4", got)
	}
}

// TestShardsAcceptARuleKeyedItsOwnWay: the same defect at New: a rule
// keyed its own way is never sharded, yet shards 8 with its burst 5 is
// refused ("5 split over 8 shards leaves 0.625 tokens per shard").
func TestShardsAcceptARuleKeyedItsOwnWay(t *testing.T) {
	cfg := CreateConfig()
	cfg.Class = uniqueName("shardrefuse")
	cfg.Average, cfg.Period, cfg.Burst = 800, "1h", 800
	cfg.Shards = 8
	cfg.Redis.Endpoints = []string{"127.0.0.1:1"}
	cfg.Rules = []config.Rule{{Name: "login", PathPrefix: "/login", Average: 5, Period: "1m", Burst: 5,
		SourceCriterion: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}}}}
	if _, err := New(nil, http.NotFoundHandler(), cfg, "api"); err != nil {
		t.Errorf("a login rule keyed by IP (one unsharded key) under shards 8: %v, want accepted", err)
	}
}

// TestClusterShadowRuleLeavesTheTopLevelEnforced: in Cluster mode a set
// with a rule keyed its own way is charged group by group; passShadow then
// skips charging the enforcing policies ("each enforcing group admitted
// and was charged"). But a group may hold an enforcing policy AND a shadow
// one of the same identity: when the shadow one refuses, that group's
// script (or local take) charges neither, and the request passes with the
// enforcing top level never charged. The client exhausts the shadow rule
// itself, then has no top-level limit on those paths. Standalone (the
// control) admits the top level's 2; Cluster admits all 10.
func TestClusterShadowRuleLeavesTheTopLevelEnforced(t *testing.T) {
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var h http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
				c.Class = uniqueName("clshadow")
				c.Average, c.Period, c.Burst = 2, "1h", 2
				c.Redis.Mode = mode
				c.Rules = []config.Rule{
					{Name: "trial", PathPrefix: "/", Average: 1, Period: "1h", Burst: 1, Shadow: "true"},
					{Name: "login", PathPrefix: "/login", Average: 100, Period: "1h", Burst: 100,
						SourceCriterion: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}}},
				}
			})
			key := uniqueName("k")
			if got := admitted(h, 10, "POST", "/login", "X-API-Key", key, "X-Forwarded-For", "198.51.100.10"); got != 2 {
				t.Errorf("%s: 10 logins of one API key, top level burst 2 enforcing, a shadow rule: %d admitted, want 2", mode, got)
			}
		})
	}
}

// TestClusterFailClosedShadowDecidesEveryGroup: decideGroups returns
// at the first group that is unavailable (a shadow policy failing closed
// while Redis is down) without deciding the groups after it; the shadow
// refusal then passes and passShadow charges nothing, so an enforcing rule
// keyed its own way (fail open: the local fallback should decide it) is
// not applied at all. Standalone (the control) applies it.
func TestClusterFailClosedShadowDecidesEveryGroup(t *testing.T) {
	for _, mode := range []string{"standalone", "cluster"} {
		t.Run(mode, func(t *testing.T) {
			var h http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
				c.Class = uniqueName("clclosed")
				c.Average, c.Period, c.Burst = 100, "1h", 100
				c.Shadow = true
				c.FailureMode = "closed"
				c.Redis.Mode = mode
				c.Rules = []config.Rule{{Name: "login", PathPrefix: "/login", Average: 2, Period: "1h", Burst: 2,
					Shadow: "false", FailureMode: "open", SourceCriterion: &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}}}}
			})
			if got := admitted(h, 10, "POST", "/login", "X-API-Key", "k-%d", "X-Forwarded-For", "198.51.100.11"); got != 2 {
				t.Errorf("%s: 10 logins from one IP, enforcing login burst 2 (fail open, Redis down): %d admitted, want 2", mode, got)
			}
		})
	}
}

// TestForwardedEntryWithAPortIsTheClient: under excludedIPs, an
// X-Forwarded-For entry that is not a bare IP is skipped and the walk goes
// on to the left, into what the client wrote. A proxy that writes the
// client's address with its port (Azure Application Gateway:
// "198.51.100.7:4711") or bracketed IPv6 thus hands the identity to the
// client: a fresh forged entry per request, a fresh bucket. And a forged
// entry inside excludedIPs falls through to the connection's address (the
// proxy), which exemptSourceRange may hold: exempt.
func TestForwardedEntryWithAPortIsTheClient(t *testing.T) {
	var h http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = uniqueName("xffport")
		c.Average, c.Period, c.Burst = 2, "1h", 2
		c.SourceCriterion = &config.SourceCriterion{IPStrategy: &config.IPStrategy{ExcludedIPs: []string{"10.0.0.0/8"}}}
		c.ExemptSourceRange = []string{"10.0.0.0/8"}
	})
	for _, tc := range []struct{ desc, xff string }{
		{"IPv4 with a port", "203.0.113.%d, 198.51.100.7:4711"},
		{"bracketed IPv6 with a port", "203.0.113.%d, [2001:db8:7::1]:4711"},
		{"forged internal entry: exempt", "10.9.9.9, 198.51.100.8:4711"},
	} {
		got := 0
		for i := 0; i < 20; i++ {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = "10.0.0.5:8080" // the proxy
			xff := tc.xff
			if strings.Contains(xff, "%d") {
				xff = fmt.Sprintf(xff, i)
			}
			req.Header.Set("X-Forwarded-For", xff)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code == 200 {
				got++
			}
		}
		if got != 2 {
			t.Errorf("%s: %d of 20 admitted, want 2 (the real client's bucket)", tc.desc, got)
		}
	}
	// depth 1: the proxy's own entry "198.51.100.7:4711" is "not an IP",
	// so the connection's address (the proxy, 10.0.0.5) is keyed, and
	// exempt: every client of that proxy passes unlimited (without the
	// exemption, they would all share one bucket).
	var hd http.Handler = handlerOn(t, "127.0.0.1:1", func(c *config.Config) {
		c.Class = uniqueName("xffportdepth")
		c.Average, c.Period, c.Burst = 2, "1h", 2
		c.SourceCriterion = &config.SourceCriterion{IPStrategy: &config.IPStrategy{Depth: 1}}
		c.ExemptSourceRange = []string{"10.0.0.0/8"}
	})
	got := 0
	for i := 0; i < 20; i++ {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = "10.0.0.5:8080"
		req.Header.Set("X-Forwarded-For", "198.51.100.7:4711")
		rec := httptest.NewRecorder()
		hd.ServeHTTP(rec, req)
		if rec.Code == 200 {
			got++
		}
	}
	if got != 2 {
		t.Errorf("depth 1, the proxy writing ip:port: %d of 20 admitted, want 2 (exempted as the proxy)", got)
	}
}

// TestPasswordFileOutsideAllowedDirsIsNeverSent: whoever writes the
// configuration also names the endpoint, so a passwordFile pointing at any
// one-line file of the pod (a service-account token, a mounted secret of
// another tenant) was read and sent in AUTH to that endpoint (the review's
// finding). A file outside TOLLGATE_SECRET_DIRS is refused by New; were it
// accepted, the fake Redis would record the file's content in AUTH.
func TestPasswordFileOutsideAllowedDirsIsNeverSent(t *testing.T) {
	dir := t.TempDir()
	secret := "eyJhbGciOiJSUzI1NiJ9.not-the-redis-password.sig"
	path := filepath.Join(dir, "token") // e.g. /var/run/secrets/kubernetes.io/serviceaccount/token
	if err := os.WriteFile(path, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	f := redistest.StartFake(t, "+1 4 0 1000\r\n") // a listener the configuration names, recording AUTH
	cfg := CreateConfig()
	cfg.Class = uniqueName("exfil")
	cfg.Average = 1
	cfg.Redis.Endpoints = []string{f.Addr()}
	cfg.Redis.PasswordFile = path
	cfg.Redis.Username = uniqueName("u")
	_, err := New(nil, http.NotFoundHandler(), cfg, "api")
	if err != nil {
		if !strings.Contains(err.Error(), "not in a directory the operator allows") {
			t.Fatalf("refused for another reason: %v", err)
		}
		return // refused: nothing is dialled
	}
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		f.Mu.Lock()
		sent := len(f.Auths) > 0 && f.Auths[0] == secret
		f.Mu.Unlock()
		if sent {
			t.Fatalf("the endpoint named by the dynamic configuration received the content of %s in AUTH", path)
		}
	}
	t.Fatal("a password file outside the allowed directories was accepted")
}
