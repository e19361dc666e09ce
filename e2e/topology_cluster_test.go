package e2e

// A Redis Cluster in steady state: each key on its slot's primary, a hot
// client spread over shards, a slot migrating (ASK and MOVED), TLS.

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// TestClusterRoutesEachKeyToItsSlot: each check goes straight to its
// slot's primary. Each client's bucket must be on the node that owns its
// slot, and no primary may have answered MOVED (errorstats), so a build
// that sends every key to one node (e.g. route reading slots[0]: every
// key to slot 0's owner) fails here even though following MOVED puts the
// buckets in the right place.
func TestClusterRoutesEachKeyToItsSlot(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		c := startCluster(t)
		h := e.handler(e.pod(), "api@file", clusterOpts(c, "class", "api", "average", 60, "period", "1h", "burst", 5))
		waitDecidedByRedis(t, h, 5*time.Second)
		owners, err := c.SlotOwners()
		if err != nil {
			t.Fatal(err)
		}
		before := map[string]int64{}
		for _, p := range c.Primaries() {
			if before[p.Addr], err = p.ScriptCalls(); err != nil {
				t.Fatal(err)
			}
		}
		want := map[string]int{} // owner: clients
		for i := 0; i < 30; i++ {
			key := fmt.Sprintf("%s-client-%d", t.Name(), i)
			if n := hammer(t, h, key, 7); n != 5 {
				t.Fatalf("%s: %d of 7 admitted, want the burst, 5", key, n)
			}
			slot, owner := slotOf(t, c, bucketKey("api", key))
			if owner == nil || owner.Addr != owners[slot] {
				t.Fatalf("%s: slot %d owned by %v, want %s (the map changed under the test)", key, slot, owner, owners[slot])
			}
			if n, err := redis.Int(owner.Do("EXISTS", bucketKey("api", key))); err != nil || n != 1 {
				t.Fatalf("%s: its bucket is not on %s, the owner of its slot %d (%d, %v)", key, owner.Addr, slot, n, err)
			}
			want[owner.Addr]++
		}
		for _, p := range c.Primaries() {
			// The buckets are spread over the three primaries...
			if n, err := redis.Int(p.Do("DBSIZE")); err != nil || n < 3 || want[p.Addr] < 3 {
				t.Fatalf("primary %s holds %d keys (%v) of %d clients, want its share of 30 clients", p.Addr, n, err, want[p.Addr])
			}
			// ...each reached directly: no MOVED was needed.
			if m, err := p.Info("errorstats"); err != nil || m["errorstat_MOVED"] != "" || m["errorstat_ASK"] != "" {
				t.Fatalf("primary %s errorstats %v (%v), want no redirection: a check went to a node that does not own its slot", p.Addr, m, err)
			}
			// At least 6 checks per client (5 admitted, one refused; the
			// 7th may be the deny cache's) ran on the owner of its slot.
			if n, err := p.ScriptCalls(); err != nil || n-before[p.Addr] < int64(6*want[p.Addr]) {
				t.Fatalf("primary %s ran %d scripts (%v) for its %d clients, want at least %d", p.Addr, n-before[p.Addr], err, want[p.Addr], 6*want[p.Addr])
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
// startMigration starts migrating key's slot from its owner to another
// primary (IMPORTING on it, MIGRATING on the owner) and returns the slot,
// both nodes and the importing node's id.
func startMigration(t *testing.T, c *Cluster, key string) (slot int, from, to *Redis, toID string) {
	t.Helper()
	slot, from = slotOf(t, c, key)
	to = otherPrimary(t, c, from)
	fromID := nodeID(t, from)
	toID = nodeID(t, to)
	if _, err := to.Do("CLUSTER", "SETSLOT", slot, "IMPORTING", fromID); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Do("CLUSTER", "SETSLOT", slot, "MIGRATING", toID); err != nil {
		t.Fatal(err)
	}
	return slot, from, to, toID
}

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
		// The slot starts migrating: a key not on its owner yet is asked
		// for on the importing node (ASK, then ASKING).
		slot, from, to, toID := startMigration(t, c, bucketKey("api", client))
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
