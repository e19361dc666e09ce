package e2e

// Redis Cluster and Sentinel, for real: 3 primaries + 3 replicas created by
// redis-cli --cluster create; a primary, its replica and 3 sentinels. Each
// test runs compiled and through the Yaegi loader, on a fresh deployment.

import (
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// forEachKindBare runs body once per kind, with an env without a Redis.
func forEachKindBare(t *testing.T, body func(t *testing.T, e *env)) {
	for _, kind := range kinds {
		kind := kind
		t.Run(kind, func(t *testing.T) {
			body(t, &env{t: t, kind: kind, logs: &syncBuffer{}})
		})
	}
}

func startCluster(t *testing.T) *Cluster {
	t.Helper()
	c, err := StartCluster(t.TempDir(), 3)
	if err != nil {
		if NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

// topoOpts are options for a limit keyed by X-API-Key on a deployment.
func topoOpts(redisOpts map[string]interface{}, kv ...interface{}) map[string]interface{} {
	return withOptions(map[string]interface{}{
		"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
		"decisionHeader":  "X-Tollgate-Decision",
		"redis":           redisOpts,
	}, kv...)
}

func clusterOpts(c *Cluster, kv ...interface{}) map[string]interface{} {
	return topoOpts(map[string]interface{}{"mode": "cluster", "endpoints": []interface{}{c.Nodes[0].Addr}, "timeout": "50ms"}, kv...)
}

// bucketKey is the Redis key of an API key's top-level bucket in a class
// (the plugin's clientKey, written out: the format is part of the spec).
func bucketKey(class, apiKey string) string {
	sum := sha256.Sum256([]byte(class + "\x00h:" + apiKey))
	return "tg{" + base64.RawURLEncoding.EncodeToString(sum[:8])[:10] + "}"
}

// decided returns the decision header of a response.
func decided(rec interface{ Header() http.Header }) string {
	return rec.Header().Get("X-Tollgate-Decision")
}

// outcome is one request of steadyTraffic.
type outcome struct {
	at       time.Time
	code     int
	decision string
}

// steadyTraffic sends a request every 10 ms, for key(i), i = 0, 1, ...,
// until the returned stop is called, which returns what happened.
func steadyTraffic(h http.Handler, key func(i int) string) (stop func() []outcome) {
	var mu sync.Mutex
	var out []outcome
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			rec := do(h, "GET", "/", key(i))
			mu.Lock()
			out = append(out, outcome{time.Now(), rec.Code, decided(rec)})
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	return func() []outcome {
		close(done)
		wg.Wait()
		return out
	}
}

// waitDecidedByRedis sends requests for a throw-away key until Redis
// decides one (the topology is learnt off the request's clock).
func waitDecidedByRedis(t *testing.T, h http.Handler, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if decided(do(h, "GET", "/", fmt.Sprintf("warm-%d", time.Now().UnixNano()))) == "redis" {
			return
		}
	}
	t.Fatalf("no request decided by Redis within %v", within)
}

// hammer sends n requests for one key and returns how many passed; every
// decision must be Redis's (or its cached refusal).
func hammer(t *testing.T, h http.Handler, key string, n int) int {
	t.Helper()
	ok := 0
	for i := 0; i < n; i++ {
		rec := do(h, "GET", "/", key)
		if d := decided(rec); d != "redis" && d != "cache" {
			t.Fatalf("request %d for %s: decided by %q (%d), want redis", i, key, d, rec.Code)
		}
		if rec.Code == 200 {
			ok++
		}
	}
	return ok
}

func TestClusterRoutesEachKeyToItsSlot(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		c := startCluster(t)
		h := e.handler(e.pod(), "api@file", clusterOpts(c, "class", "api", "average", 60, "period", "1h", "burst", 5))
		waitDecidedByRedis(t, h, 5*time.Second)
		for i := 0; i < 30; i++ {
			key := fmt.Sprintf("%s-client-%d", t.Name(), i)
			if n := hammer(t, h, key, 7); n != 5 {
				t.Fatalf("%s: %d of 7 admitted, want the burst, 5", key, n)
			}
		}
		// The buckets are spread over the three primaries.
		for _, p := range c.Primaries() {
			if n, err := redis.Int(p.Do("DBSIZE")); err != nil || n < 3 {
				t.Fatalf("primary %s holds %d keys (%v), want its share of 30 clients", p.Addr, n, err)
			}
		}
	})
}

func TestClusterShardsSpreadAHotClient(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		c := startCluster(t)
		// 60 per hour, burst 60, over 6 shards of 10.
		h := e.handler(e.pod(), "hot@file", clusterOpts(c, "class", "hot", "average", 60, "period", "1h", "burst", 60, "shards", 6))
		waitDecidedByRedis(t, h, 5*time.Second)
		key := t.Name()
		if n := hammer(t, h, key, 300); n != 60 {
			t.Fatalf("a hot client hammering: %d admitted, want exactly the limit, 60", n)
		}
		// Its six sub-buckets live on several nodes.
		holders := 0
		for _, p := range c.Primaries() {
			keys, err := redis.Strings(p.Do("KEYS", bucketKey("hot", key)[:13]+":?}"))
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) > 0 {
				holders++
			}
		}
		if holders < 2 {
			t.Fatalf("the 6 shards of one client are on %d primary, want several", holders)
		}
	})
}

// nodeID returns a node's cluster id.
func nodeID(t *testing.T, r *Redis) string {
	t.Helper()
	id, err := redis.String(r.Do("CLUSTER", "MYID"))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// slotOf returns key's slot and its owner.
func slotOf(t *testing.T, c *Cluster, key string) (int, *Redis) {
	t.Helper()
	slot, err := redis.Int(c.Alive()[0].Do("CLUSTER", "KEYSLOT", key))
	if err != nil {
		t.Fatal(err)
	}
	owners, err := c.SlotOwners()
	if err != nil {
		t.Fatal(err)
	}
	return slot, c.Node(owners[slot])
}

// otherPrimary returns a primary other than p.
func otherPrimary(t *testing.T, c *Cluster, p *Redis) *Redis {
	t.Helper()
	for _, q := range c.Primaries() {
		if q != p {
			return q
		}
	}
	t.Fatal("no other primary")
	return nil
}

func TestClusterFollowsAskAndMoved(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		c := startCluster(t)
		h := e.handler(e.pod(), "api@file", clusterOpts(c, "class", "api", "average", 60, "period", "1h", "burst", 5))
		waitDecidedByRedis(t, h, 5*time.Second)
		client := t.Name()
		slot, from := slotOf(t, c, bucketKey("api", client))
		to := otherPrimary(t, c, from)
		fromID, toID := nodeID(t, from), nodeID(t, to)
		// The slot starts migrating: a key not on its owner yet is asked
		// for on the importing node (ASK, then ASKING).
		if _, err := to.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", fromID); err != nil {
			t.Fatal(err)
		}
		if _, err := from.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", toID); err != nil {
			t.Fatal(err)
		}
		if n := hammer(t, h, client, 1); n != 1 {
			t.Fatal("the first request during the migration was refused")
		}
		if n, err := redis.Int(to.Do("CLUSTER", "COUNTKEYSINSLOT", slot)); err != nil || n != 1 {
			t.Fatalf("importing node holds %d keys of slot %d (%v): the check did not follow ASK", n, slot, err)
		}
		// The migration ends: the old owner answers MOVED, the plugin
		// follows it and remembers; the bucket (on the new owner) holds.
		for _, p := range c.Primaries() {
			if _, err := p.Do("CLUSTER", "SETSLOT", slot, "NODE", toID); err != nil {
				t.Fatal(err)
			}
		}
		if n := hammer(t, h, client, 6); n != 4 {
			t.Fatalf("after MOVED: %d of 6 more admitted, want 4 (burst 5, 1 taken during the migration)", n)
		}
		// One ASK, one MOVED: the map was updated by the first MOVED.
		if m, err := from.Info("errorstats"); err != nil || m["errorstat_ASK"] != "count=1" || m["errorstat_MOVED"] != "count=1" {
			t.Fatalf("the old owner's errorstats %v (%v), want one ASK and one MOVED", m, err)
		}
	})
}

func TestClusterPrimaryKilledUnderTraffic(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		c := startCluster(t)
		pod := e.pod()
		h := e.handler(pod, "api@file", clusterOpts(c, "class", "api", "average", 6000, "period", "1m", "burst", 50))
		slow := e.handler(pod, "slow@file", clusterOpts(c, "class", "slow", "average", 50, "period", "1h", "burst", 50))
		waitDecidedByRedis(t, h, 5*time.Second)
		// Clients whose buckets live on the primary about to die.
		victim := c.Primaries()[0]
		before, err := c.SlotOwners()
		if err != nil {
			t.Fatal(err)
		}
		victimSlots := map[int]bool{}
		for slot, owner := range before {
			if owner == victim.Addr {
				victimSlots[slot] = true
			}
		}
		var clients []string
		for i := 0; len(clients) < 5; i++ {
			k := fmt.Sprintf("%s-%d", t.Name(), i)
			if _, owner := slotOf(t, c, bucketKey("api", k)); owner == victim {
				clients = append(clients, k)
			}
		}
		// 5 clients at 20 requests/s each: within 100/s.
		stop := steadyTraffic(h, func(i int) string { return clients[i%len(clients)] })
		time.Sleep(time.Second)
		killed := time.Now()
		victim.Kill()
		err = c.WaitHealthy(20 * time.Second)
		promoted := time.Now()
		time.Sleep(2 * time.Second)
		results := stop()
		if err != nil {
			t.Fatal(err)
		}
		var local, lateLocal int
		var back time.Time
		for _, r := range results {
			if r.code != 200 {
				t.Fatalf("%v: %d (%s): a client within its limit was refused around the failover", r.at, r.code, r.decision)
			}
			switch {
			case r.decision == "local":
				local++
				if r.at.After(promoted.Add(time.Second)) {
					lateLocal++
				}
			case r.decision == "redis" && r.at.After(killed) && back.IsZero():
				back = r.at
			}
		}
		t.Logf("primary killed; replica promoted after %v; %d requests decided locally (fail-open); Redis decided again %v after the kill",
			promoted.Sub(killed).Round(time.Millisecond), local, back.Sub(killed).Round(time.Millisecond))
		if local == 0 || back.IsZero() || lateLocal > 0 {
			t.Fatalf("%d local decisions (%d more than 1 s after the promotion), Redis back at %v: want fail-open during the gap only", local, lateLocal, back)
		}
		// The limit holds again, on the promoted replica: a fresh client
		// whose bucket is in the dead primary's slots.
		owners, err := c.SlotOwners()
		if err != nil {
			t.Fatal(err)
		}
		promotedAddr, fresh := "", ""
		for i := 0; fresh == ""; i++ {
			k := fmt.Sprintf("%s-after-%d", t.Name(), i)
			slot, _ := slotOf(t, c, bucketKey("slow", k))
			if victimSlots[slot] {
				fresh, promotedAddr = k, owners[slot]
			}
		}
		if promotedAddr == victim.Addr {
			t.Fatalf("slot still owned by the dead primary")
		}
		if n := hammer(t, slow, fresh, 70); n != 50 {
			t.Fatalf("after the failover a fresh client got %d of 70, want the burst, 50", n)
		}
	})
}

func startSentinels(t *testing.T) *Sentinels {
	t.Helper()
	s, err := StartSentinels(t.TempDir())
	if err != nil {
		if NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func TestSentinelFailoverUnderTraffic(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		s := startSentinels(t)
		h := e.handler(e.pod(), "api@file", topoOpts(map[string]interface{}{
			"mode": "sentinel", "endpoints": s.Addrs(), "masterName": MasterName,
			"sentinelPassword": SentinelPassword, "password": DataPassword, "timeout": "50ms",
		}, "class", "api", "average", 600, "period", "1m", "burst", 20))
		waitDecidedByRedis(t, h, 5*time.Second)
		if n := hammer(t, h, t.Name()+"-before", 30); n != 20 {
			t.Fatalf("before the failover: %d of 30 admitted, want 20", n)
		}
		if n, _ := s.Primary.ScriptCalls(); n == 0 {
			t.Fatal("the primary ran no script")
		}
		stop := steadyTraffic(h, func(i int) string { return fmt.Sprintf("steady-%d", i%5) })
		time.Sleep(500 * time.Millisecond)
		start := time.Now()
		if _, err := s.Sentinels[0].Do("SENTINEL", "FAILOVER", MasterName); err != nil {
			t.Fatal(err)
		}
		var switched time.Duration
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if n, _ := s.Replica.ScriptCalls(); n > 0 {
				switched = time.Since(start)
				break
			}
		}
		time.Sleep(time.Second)
		codes := map[string]int{}
		for _, o := range stop() {
			codes[fmt.Sprintf("%d %s", o.code, o.decision)]++
		}
		if switched == 0 {
			t.Fatalf("the promoted replica ran no script within 20 s of SENTINEL FAILOVER (decisions %v)", codes)
		}
		for k := range codes {
			if !strings.HasPrefix(k, "200 ") {
				t.Fatalf("decisions around the failover %v: a client within its limit was refused", codes)
			}
		}
		t.Logf("SENTINEL FAILOVER: the new primary ran its first check %v later; decisions %v", switched.Round(time.Millisecond), codes)
		if addr, err := s.MasterAddr(); err != nil || addr != s.Replica.Addr {
			t.Fatalf("sentinels name %s (%v) as primary, want the replica %s", addr, err, s.Replica.Addr)
		}
		if n := hammer(t, h, t.Name()+"-after", 30); n != 20 {
			t.Fatalf("after the failover: %d of 30 admitted, want 20", n)
		}
	})
}

func TestClusterOverTLS(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		dir := t.TempDir()
		pki := newPKI(t, dir)
		certs := []string{"--tls-cert-file", pki.serverCert, "--tls-key-file", pki.serverKey, "--tls-ca-cert-file", pki.ca,
			"--tls-auth-clients", "yes", "--tls-cluster", "yes", "--tls-replication", "yes",
			"--tls-client-cert-file", pki.clientCert, "--tls-client-key-file", pki.clientKey}
		c, err := StartClusterTLS(dir, 3, pki.clientConfig(t), certs,
			[]string{"--tls", "--cacert", pki.ca, "--cert", pki.clientCert, "--key", pki.clientKey})
		if err != nil {
			if NeedRedis(err) {
				t.Skip(err)
			}
			t.Fatal(err)
		}
		t.Cleanup(c.Stop)
		// Every node (named by CLUSTER SLOTS, not configured) is verified
		// against the CA by its own address, with the client certificate.
		h := e.handler(e.pod(), "api@file", topoOpts(map[string]interface{}{
			"mode": "cluster", "endpoints": []interface{}{c.Nodes[0].Addr}, "timeout": "50ms",
			"tls": map[string]interface{}{"ca": pki.ca, "cert": pki.clientCert, "key": pki.clientKey},
		}, "class", "api", "average", 60, "period", "1h", "burst", 5))
		waitDecidedByRedis(t, h, 5*time.Second)
		for i := 0; i < 15; i++ {
			if n := hammer(t, h, fmt.Sprintf("%s-%d", t.Name(), i), 7); n != 5 {
				t.Fatalf("client %d over TLS: %d of 7 admitted, want 5", i, n)
			}
		}
		for _, p := range c.Primaries() {
			if n, err := redis.Int(p.Do("DBSIZE")); err != nil || n == 0 {
				t.Fatalf("primary %s holds %d keys (%v): not every node was reached over TLS", p.Addr, n, err)
			}
		}
	})
}
