package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
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
		slot, owner := slotOf(t, c, bucket+"}s")
		eus, err := redis.Int(owner.Do("HGET", bucket+"}s", "s"))
		if err != nil || eus < 940000 || eus > 950000 {
			t.Errorf("eu's share of the hot key on %s (slot %d): %d, %v; want 940000-950000", owner.Addr, slot, eus, err)
		}
		uss, err := redis.Int(other.Do("HGET", bucket+"}s", "s"))
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

// readmeRegionACL returns the README's region ACL lines (the fenced block
// after "With `region`"), as ACL SETUSER arguments, >PASSWORD replaced.
func readmeRegionACL(t *testing.T, password string) [][]interface{} {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(b), "With `region` (see *Regions*)")
	if i < 0 {
		t.Fatal("README.md has no region ACL paragraph")
	}
	var out [][]interface{}
	fence := 0
	for _, line := range strings.Split(string(b[i:]), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if fence++; fence == 2 {
				break
			}
			continue
		}
		if fence == 1 && strings.HasPrefix(line, "ACL SETUSER ") {
			var args []interface{}
			for _, f := range strings.Fields(line)[2:] {
				if f == "+@all" || f == "~*" || f == "nopass" {
					t.Fatalf("README's region ACL %q grants %s", line, f)
				}
				if f == ">PASSWORD" {
					f = ">" + password
				}
				args = append(args, f)
			}
			out = append(out, args)
		}
	}
	if len(out) != 2 {
		t.Fatalf("README's region ACL: %d lines, want 2", len(out))
	}
	return out
}

// TestRegionReadmeACL: two regions whose Redis hold only the README's
// users (the smallest one, the region's additions, the peer's reader)
// move a hot key's shares, and no command is refused.
func TestRegionReadmeACL(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		ra, rb := startRedis(t), startRedis(t)
		user, base := readmeACL(t, aclPassword)
		extra := readmeRegionACL(t, aclPassword)
		for _, r := range []*Redis{ra, rb} {
			for _, args := range [][]interface{}{base, extra[0], extra[1]} {
				if _, err := r.Do("ACL", append([]interface{}{"SETUSER"}, args...)...); err != nil {
					t.Fatalf("ACL SETUSER %v: %v", args, err)
				}
			}
		}
		peerUser := fmt.Sprint(extra[1][0])
		opts := func(own, name, peer string, peerR *Redis) map[string]interface{} {
			return topoOpts(map[string]interface{}{"endpoints": []interface{}{own}, "username": user, "password": aclPassword, "timeout": "1s"},
				"class", "regional", "average", 50, "period", "1s", "burst", 50,
				"region", map[string]interface{}{"name": name, "interval": "200ms",
					"peers": []interface{}{map[string]interface{}{"name": peer, "endpoints": []interface{}{peerR.Addr}, "username": peerUser, "password": aclPassword}}})
		}
		h := e.handler(e.pod(), "eu@file", opts(ra.Addr, "eu", "us", rb))
		e.handler(e.pod(), "us@file", opts(rb.Addr, "us", "eu", ra))
		waitDecidedByRedis(t, h, 5*time.Second)
		key := t.Name() + "-hot"
		for end := time.Now().Add(2 * time.Second); time.Now().Before(end); time.Sleep(5 * time.Millisecond) {
			do(h, "GET", "/", key)
		}
		sum := sha256.Sum256([]byte("regional\x00h:" + key))
		bucket := "tg{" + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}"
		if s, err := redis.Int(ra.Do("HGET", bucket+"}s", "s")); err != nil || s < 940000 {
			t.Errorf("eu's share: %d, %v; want 0.95 (ACL LOG eu %v, us %v)", s, err, aclDenials(t, ra), aclDenials(t, rb))
		}
		if s, err := redis.Int(rb.Do("HGET", bucket+"}s", "s")); err != nil || s != 50000 {
			t.Errorf("us's share: %d, %v; want 0.05", s, err)
		}
		noDenials(t, []*Redis{ra, rb}, "checks and exchanges")
	})
}
