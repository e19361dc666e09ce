package e2e

// Fault drills (fleet_fault_test.go) on Sentinel and Cluster deployments:
// the primary holding the drill's keys is killed and its replica promoted,
// or a manual failover (SENTINEL FAILOVER, CLUSTER FAILOVER) hands its role
// over; then, drillSettle after the new primary answers the test's PING,
// the burst for a fresh key, checked exactly as on one redis-server. The
// fleet is the user's (userConf) with the deployment's endpoints.

import (
	"fmt"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// startFleetOn starts the user's fleet (userReplicas replicas) serving conf
// and the metrics router on a Redis deployment the test started itself.
func startFleetOn(t *testing.T, conf map[string]interface{}, routers ...string) *fleetEnv {
	t.Helper()
	if _, err := TraefikBinary(); err != nil {
		if NeedTraefik(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	return fleetIn(t, t.TempDir(), userReplicas, withMetricsRouter(conf), append(routers, drillMetrics)...)
}

// waitReplicaOf waits until r replicates primary, its link up.
func waitReplicaOf(t *testing.T, r, primary *Redis, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		info, err := r.Info("replication")
		if err == nil && info["role"] == "slave" && info["master_link_status"] == "up" &&
			info["master_host"]+":"+info["master_port"] == primary.Addr {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not a synced replica of %s within %v: %v %v", r.Addr, primary.Addr, within, info, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestFleetFaultSentinelFailover(t *testing.T) {
	// mode sentinel: the primary killed and the replica promoted by the
	// sentinels (down-after 1 s), or SENTINEL FAILOVER. After each run the
	// old primary is a synced replica again, known as such by every
	// sentinel, so that the next run can fail over back.
	s := startSentinels(t)
	fe := startFleetOn(t, userConf(s.Primary.Addr, "redis.mode", "sentinel", "redis.endpoints", s.Addrs(), "redis.masterName", MasterName,
		"redis.sentinelPassword", SentinelPassword, "redis.password", DataPassword), "api@file")
	primary := func() *Redis {
		if addr, err := s.MasterAddr(); err == nil && addr == s.Replica.Addr {
			return s.Replica
		}
		return s.Primary
	}
	other := func(r *Redis) *Redis {
		if r == s.Primary {
			return s.Replica
		}
		return s.Primary
	}
	var old, heir *Redis
	// promoted waits until every sentinel names heir, and heir says it is
	// a primary.
	promoted := func(t *testing.T) time.Time {
		deadline := time.Now().Add(30 * time.Second)
		for {
			agree := true
			for _, sn := range s.Sentinels {
				hp, err := redis.Strings(sn.Do("SENTINEL", "get-master-addr-by-name", MasterName))
				if err != nil || len(hp) != 2 || hp[0]+":"+hp[1] != heir.Addr {
					agree = false
				}
			}
			if role, err := redis.Values(heir.Do("ROLE")); agree && err == nil && len(role) > 0 {
				if r, _ := redis.String(role[0], nil); r == "master" {
					return answering(t, heir, time.Second)
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s not promoted within 30 s", heir.Addr)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// rejoined waits until old replicates heir and every sentinel lists
	// it as a replica in good standing.
	rejoined := func(t *testing.T) {
		waitReplicaOf(t, old, heir, 30*time.Second)
		deadline := time.Now().Add(30 * time.Second)
		for _, sn := range s.Sentinels {
			for !sentinelKnowsReplica(sn, old.Addr) {
				if time.Now().After(deadline) {
					t.Fatalf("sentinel %s does not list %s as a replica in good standing within 30 s", sn.Addr, old.Addr)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
	}
	t.Run("kill", func(t *testing.T) {
		drill{node: primary,
			fault: func(t *testing.T, run int) time.Time {
				old = primary()
				heir = other(old)
				old.Kill()
				return promoted(t)
			},
			after: func(t *testing.T) {
				if err := old.Restart(); err != nil {
					t.Fatal(err)
				}
				rejoined(t)
			}}.run(t, fe)
	})
	t.Run("failover", func(t *testing.T) {
		drill{node: primary,
			fault: func(t *testing.T, run int) time.Time {
				old = primary()
				heir = other(old)
				if _, err := s.Sentinels[0].Do("SENTINEL", "FAILOVER", MasterName); err != nil {
					t.Fatal(err)
				}
				at := promoted(t)
				// As after CLUSTER FAILOVER: the burst starts once the
				// demoted primary has synced from the heir (the sync's
				// fork and load leave a node unanswering for a moment,
				// from which the pods rightly fall back).
				waitReplicaOf(t, old, heir, 30*time.Second)
				return at
			},
			after: rejoined}.run(t, fe)
	})
}

// sentinelKnowsReplica reports whether sentinel sn lists addr as a replica
// of MasterName, flagged "slave" alone (not down, not disconnected).
func sentinelKnowsReplica(sn *Redis, addr string) bool {
	list, err := redis.Values(sn.Do("SENTINEL", "REPLICAS", MasterName))
	if err != nil {
		return false
	}
	for _, e := range list {
		m, err := redis.StringMap(e, nil)
		if err == nil && m["ip"]+":"+m["port"] == addr {
			return m["flags"] == "slave"
		}
	}
	return false
}

func TestFleetFaultClusterFailover(t *testing.T) {
	// mode cluster (3 primaries, a replica each, node timeout 1 s), every
	// drill key in the slots of one primary: that primary killed and its
	// replica promoted, or CLUSTER FAILOVER run on its replica. After a
	// kill the node is started again (it rejoins as the heir's replica
	// from its nodes.conf), so that the next run can fail over back.
	c := startCluster(t)
	var eps []interface{}
	for _, n := range c.Nodes {
		eps = append(eps, n.Addr)
	}
	fe := startFleetOn(t, userConf(c.Nodes[0].Addr, "class", "api", "redis.mode", "cluster", "redis.endpoints", eps), "api@file")
	anchor, _ := slotOf(t, c, bucketKey("api", "anchor"))
	owner := func() *Redis {
		owners, err := c.SlotOwners()
		if err != nil {
			t.Fatal(err)
		}
		return c.Node(owners[anchor])
	}
	// key returns a fresh client key whose bucket the anchor's owner
	// holds (a third of the keys are: a few tries).
	key := func(t *testing.T, suffix string) string {
		base, target := fleetKey(t, suffix), owner()
		for i := 0; i < 1000; i++ {
			k := fmt.Sprintf("%s-%d", base, i)
			if _, o := slotOf(t, c, bucketKey("api", k)); o == target {
				return k
			}
		}
		t.Fatalf("no key of 1000 in the slots of %s", target.Addr)
		return ""
	}
	var victim, heir *Redis
	healthy := func(t *testing.T) time.Time {
		if err := c.WaitHealthy(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		if heir = owner(); heir == victim {
			t.Fatalf("the anchor's slot is still owned by %s", victim.Addr)
		}
		return answering(t, heir, time.Second)
	}
	t.Run("kill", func(t *testing.T) {
		drill{node: owner, key: key,
			fault: func(t *testing.T, run int) time.Time {
				victim = owner()
				victim.Kill()
				return healthy(t)
			},
			after: func(t *testing.T) {
				if err := victim.Restart(); err != nil {
					t.Fatal(err)
				}
				waitReplicaOf(t, victim, heir, 30*time.Second)
				if err := c.WaitHealthy(30 * time.Second); err != nil {
					t.Fatal(err)
				}
			}}.run(t, fe)
	})
	t.Run("failover", func(t *testing.T) {
		drill{node: owner, key: key,
			fault: func(t *testing.T, run int) time.Time {
				victim = owner()
				r := replicaOf(t, c, victim)
				if _, err := r.Do("CLUSTER", "FAILOVER"); err != nil {
					t.Fatal(err)
				}
				// The old primary is a replica once the new one has the
				// slots: every node agrees on the new owner.
				deadline := time.Now().Add(30 * time.Second)
				for owner() != r {
					if time.Now().After(deadline) {
						t.Fatalf("CLUSTER FAILOVER on %s: not the anchor's owner within 30 s", r.Addr)
					}
					time.Sleep(20 * time.Millisecond)
				}
				at := healthy(t)
				// The demoted primary, which the pods' map still names,
				// syncs from its heir; a sync that loads a dataset blocks
				// it for tens of ms (seen: 60 ms unanswered at the burst,
				// and a pod falling back, as it should from a Redis that
				// does not answer). The drill is about the pods: its burst
				// starts once the old primary serves again.
				waitReplicaOf(t, victim, heir, 30*time.Second)
				return at
			},
			after: func(t *testing.T) { waitReplicaOf(t, victim, heir, 30*time.Second) }}.run(t, fe)
	})
}

// replicaOf returns the running node that replicates primary.
func replicaOf(t *testing.T, c *Cluster, primary *Redis) *Redis {
	t.Helper()
	for _, n := range c.Alive() {
		info, err := n.Info("replication")
		if err == nil && info["role"] == "slave" && info["master_host"]+":"+info["master_port"] == primary.Addr {
			return n
		}
	}
	t.Fatalf("no replica of %s", primary.Addr)
	return nil
}
