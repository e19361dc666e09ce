package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// TestClusterLoginKeyedByIP: in a Redis Cluster a rule keyed its own way
// (a login limit by client IP, the top level by API key) is charged in a
// script of its own, on its own identity's slot: 50 logins with a fresh
// API key each from one IP get the rule's 5 through, decided by Redis,
// and the login bucket lives on the owner of its slot. (The plugin refused
// this configuration in cluster mode before; a rule keyed by the top
// level's identity would admit all 50.)
func TestClusterLoginKeyedByIP(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		c := startCluster(t)
		opts := topoOpts(map[string]interface{}{"mode": "cluster", "endpoints": []interface{}{c.Nodes[0].Addr}, "timeout": "1s"},
			"class", "api", "average", 100, "period", "1h", "burst", 100,
			"rules", []interface{}{map[string]interface{}{
				"name": "login", "pathPrefix": "/login", "methods": []interface{}{"POST"},
				"average": 5, "period": "1h", "burst": 5, "failureMode": "closed",
				"sourceCriterion": map[string]interface{}{"ipStrategy": map[string]interface{}{"depth": 1}},
			}})
		h := e.handler(e.pod(), "api@file", opts)
		waitDecidedByRedis(t, h, 5*time.Second)
		for _, ip := range []string{"198.51.100.7", "198.51.100.8"} {
			ok := 0
			for i := 0; i < 50; i++ {
				req := httptest.NewRequest("POST", "/login", nil)
				req.RemoteAddr = "192.0.2.1:1234"
				req.Header.Set("X-API-Key", fmt.Sprintf("%s-fresh-%s-%d", t.Name(), ip, i))
				req.Header.Set("X-Forwarded-For", ip)
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				if d := decided(rec); d != "redis" && d != "cache" {
					t.Fatalf("login %d from %s: decided by %q (%d), want redis", i, ip, d, rec.Code)
				}
				if rec.Code == 200 {
					ok++
				}
			}
			if ok != 5 {
				t.Fatalf("50 logins from %s with fresh API keys: %d admitted, want the rule's 5", ip, ok)
			}
			sum := sha256.Sum256([]byte("api\x00ip:" + ip))
			key := "tg{" + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}:login"
			slot, owner := slotOf(t, c, key)
			if n, err := redis.Int(owner.Do("EXISTS", key)); err != nil || n != 1 {
				t.Fatalf("%s's login bucket %s is not on %s, the owner of its slot %d (%d, %v)", ip, key, owner.Addr, slot, n, err)
			}
		}
	})
}
