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

// TestRegionOnACluster: a region whose own Redis is a Cluster (the other
// standalone) moves a hot key's shares like any other: the script reads
// the share beside the bucket, on the bucket's slot, and the exchange
// writes it there, node by node. Every request is decided by Redis.
func TestRegionOnACluster(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		c := startCluster(t)
		other := startRedis(t)
		class := "regional"
		limit := []interface{}{"class", class, "average", 50, "period", "1s", "burst", 50}
		eu := topoOpts(map[string]interface{}{"mode": "cluster", "endpoints": []interface{}{c.Nodes[0].Addr}, "timeout": "1s"},
			append(limit, "region", map[string]interface{}{"name": "eu", "interval": "200ms",
				"peers": []interface{}{map[string]interface{}{"name": "us", "endpoints": []interface{}{other.Addr}}}})...)
		us := topoOpts(map[string]interface{}{"endpoints": []interface{}{other.Addr}, "timeout": "1s"},
			append(limit, "region", map[string]interface{}{"name": "us", "interval": "200ms",
				"peers": []interface{}{map[string]interface{}{"name": "eu", "mode": "cluster", "endpoints": []interface{}{c.Nodes[0].Addr}}}})...)
		h := e.handler(e.pod(), "eu@file", eu)
		e.handler(e.pod(), "us@file", us)
		waitDecidedByRedis(t, h, 5*time.Second)
		key := fmt.Sprintf("%s-hot", t.Name())
		admitted := map[int64]int{} // by second
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-API-Key", key)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if d := decided(rec); d != "redis" && d != "cache" {
				t.Fatalf("decided by %q (%d), want redis", d, rec.Code)
			}
			if rec.Code == 200 {
				admitted[time.Now().Unix()]++
			}
		}
		sum := sha256.Sum256([]byte(class + "\x00h:" + key))
		bucket := "tg{" + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}"
		slot, owner := slotOf(t, c, bucket+"!r")
		eus, err := redis.Int(owner.Do("HGET", bucket+"!r", "s"))
		if err != nil || eus < 940000 || eus > 950000 {
			t.Errorf("eu's share of the hot key on %s (slot %d): %d, %v; want 940000-950000", owner.Addr, slot, eus, err)
		}
		uss, err := redis.Int(other.Do("HGET", bucket+"!r", "s"))
		if err != nil || uss != 50000 {
			t.Errorf("us's share of the hot key: %d, %v; want 50000", uss, err)
		}
		last := admitted[time.Now().Unix()-1]
		t.Logf("eu admitted %d in its last whole second (limit 50/s, share 0.95)", last)
		if last < 40 || last > 50 {
			t.Errorf("eu admitted %d in its last whole second, want 40-50", last)
		}
	})
}
