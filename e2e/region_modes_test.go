package e2e

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
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
		class := "regional"
		other := startRedis(t)
		eu, us := clusterRegions(c, other, class)
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

// TestRegionOnAClusterSeveralSlots: a Cluster region whose hot keys lie in
// several slots, some on one node. Their shares are written (one
// transaction per slot: a node refuses one over two slots, CROSSSLOT),
// and what the region publishes is what Redis holds: after the client
// moves to the standalone region and then spreads over both, the regions'
// shares add up to at most the limit (sampled every 100 ms) and the
// admitted requests to at most the limit's burst and rate. (With one
// transaction per node nothing was written, the exchange counted as done
// and the other region grew into room never given up: 1.3 x the limit.)
func TestRegionOnAClusterSeveralSlots(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		c := startCluster(t)
		class := "regional"
		other := startRedis(t)
		eu, us := clusterRegions(c, other, class)
		he := e.handler(e.pod(), "eu@file", eu)
		hu := e.handler(e.pod(), "us@file", us)
		waitDecidedByRedis(t, he, 5*time.Second)
		waitDecidedByRedis(t, hu, 5*time.Second)
		// Six keys, six slots over three primaries: some node holds two.
		var keys []string
		owners := map[string]*Redis{}
		perNode := map[*Redis]int{}
		slots := map[int]bool{}
		for i := 0; len(keys) < 6; i++ {
			key := fmt.Sprintf("%s-hot-%d", t.Name(), i)
			slot, owner := slotOf(t, c, bucketKey(class, key)+"}s")
			if slots[slot] {
				continue
			}
			slots[slot] = true
			keys = append(keys, key)
			owners[key] = owner
			perNode[owner]++
		}
		shares := func(key string) (eus, uss int64) {
			bk := bucketKey(class, key) + "}s"
			eus, uss = 500000, 500000 // absent: static
			if v, err := redis.Int64(owners[key].Do("HGET", bk, "s")); err == nil {
				eus = v
			}
			if v, err := redis.Int64(other.Do("HGET", bk, "s")); err == nil {
				uss = v
			}
			return eus, uss
		}
		drive := func(h http.Handler, d time.Duration) int {
			n := 0
			for end := time.Now().Add(d); time.Now().Before(end); {
				for _, key := range keys {
					rec := do(h, "GET", "/", key)
					if dd := decided(rec); dd != "redis" && dd != "cache" {
						t.Errorf("decided by %q (%d), want redis", dd, rec.Code)
						return n
					}
					if rec.Code == 200 {
						n++
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
			return n
		}
		drive(he, 2500*time.Millisecond) // all in eu
		for _, key := range keys {
			if eus, uss := shares(key); eus < 940000 || uss != 50000 {
				t.Errorf("all in eu: %s (slot of %s, %d of the keys there) shares eu=%d us=%d, want 0.95 and 0.05 written", key, owners[key].Addr, perNode[owners[key]], eus, uss)
			}
		}
		drive(hu, 2500*time.Millisecond) // the client moves to us
		for _, key := range keys {
			if eus, uss := shares(key); eus > 60000 || uss < 940000 {
				t.Errorf("all in us: %s shares eu=%d us=%d, want 0.05 and 0.95 written", key, eus, uss)
			}
		}
		// Then in both regions, 3 s, more than the limit in each.
		done := make(chan struct{})
		var worst int64
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
				for _, key := range keys {
					if eus, uss := shares(key); eus+uss > worst {
						worst = eus + uss
					}
				}
			}
		}()
		start := time.Now()
		var ne, nu int
		wg.Add(2)
		go func() { defer wg.Done(); ne = drive(he, 3*time.Second) }()
		go func() { defer wg.Done(); nu = drive(hu, 3*time.Second) }()
		time.Sleep(3 * time.Second)
		close(done)
		wg.Wait()
		elapsed := time.Since(start).Seconds()
		bound := float64(len(keys)) * (50 + 50*elapsed)
		t.Logf("both regions, %d keys over %.2f s: eu %d, us %d admitted (bound %.0f: %.3f x); shares' largest sum %d ppm",
			len(keys), elapsed, ne, nu, bound, float64(ne+nu)/bound, worst)
		if float64(ne+nu) > bound+float64(len(keys)) {
			t.Errorf("both regions admitted %d of %d keys in %.2f s, more than the limit's burst and rate (%.0f)", ne+nu, len(keys), elapsed, bound)
		}
		if worst > 1000000 {
			t.Errorf("a key's shares added up to %d ppm, more than the limit", worst)
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

// clusterRegions are the options of two regions' middlewares of class,
// 50 a second: eu on the Cluster c, us on the server other, each the
// other's peer, exchanging every 200 ms.
func clusterRegions(c *Cluster, other *Redis, class string) (eu, us map[string]interface{}) {
	limit := []interface{}{"class", class, "average", 50, "period", "1s", "burst", 50}
	eu = topoOpts(map[string]interface{}{"mode": "cluster", "endpoints": []interface{}{c.Nodes[0].Addr}, "timeout": "1s"},
		append(limit, "region", map[string]interface{}{"name": "eu", "interval": "200ms",
			"peers": []interface{}{map[string]interface{}{"name": "us", "endpoints": []interface{}{other.Addr}}}})...)
	us = topoOpts(map[string]interface{}{"endpoints": []interface{}{other.Addr}, "timeout": "1s"},
		append(limit, "region", map[string]interface{}{"name": "us", "interval": "200ms",
			"peers": []interface{}{map[string]interface{}{"name": "eu", "mode": "cluster", "endpoints": []interface{}{c.Nodes[0].Addr}}}})...)
	return eu, us
}
