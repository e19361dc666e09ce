package e2e

// The smallest ACL user the README documents, read from README.md itself
// and given to the data nodes of every mode (standalone, Sentinel,
// Cluster): with it, checks are decided by Redis, a slot being migrated is
// followed (ASKING), the heartbeat runs, and the breaker's probe (PING on
// a fresh connection) closes the breaker by itself once Redis takes the
// user again. Nothing the plugin sends may be refused (ACL LOG).
//
// Mutations it catches (each seen failing): the README's ACL before the
// fix (no +cluster|slots, +asking, +ping: the cluster never learns its
// slots; the probe's PING is refused and the breaker stays open), and that
// ACL with any one of +cluster|slots, +asking, +ping removed; a README
// whose block is moved or reworded so the line cannot be found.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// readmeACL returns the user and the ACL SETUSER arguments of the smallest
// ACL user README.md documents: the one line of the fenced block after
// "the smallest ACL user", with >PASSWORD replaced by >password.
func readmeACL(t *testing.T, password string) (user string, args []interface{}) {
	t.Helper()
	path := filepath.Join(RepoRoot(), "README.md")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const anchor = "the smallest ACL user"
	i := strings.Index(string(b), anchor)
	if i < 0 {
		t.Fatalf("%s has no %q: this test runs the ACL documented in the fenced block after it", path, anchor)
	}
	var block []string
	fence := 0
	for _, line := range strings.Split(string(b[i:]), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			if fence++; fence == 2 {
				break
			}
			continue
		}
		if fence == 1 && strings.TrimSpace(line) != "" {
			block = append(block, strings.TrimSpace(line))
		}
	}
	if fence != 2 || len(block) != 1 || !strings.HasPrefix(block[0], "ACL SETUSER ") {
		t.Fatalf("%s: the fenced block after %q is %q, want one line \"ACL SETUSER <user> ... >PASSWORD ...\"", path, anchor, block)
	}
	fields := strings.Fields(block[0])[2:]
	user = fields[0]
	hasPassword := false
	for _, f := range fields {
		switch {
		case strings.ContainsAny(f, `"'`):
			t.Fatalf("README's ACL %q: quoted argument %s; this parser splits on spaces", block[0], f)
		case f == "+@all" || f == "allcommands" || f == "allkeys" || f == "~*" || f == "nopass":
			t.Fatalf("README's ACL %q grants %s: not the smallest ACL user", block[0], f)
		case f == ">PASSWORD":
			hasPassword = true
			f = ">" + password
		}
		args = append(args, f)
	}
	if !hasPassword {
		t.Fatalf("README's ACL %q has no >PASSWORD", block[0])
	}
	return user, args
}

// aclDeployment is a deployment whose data nodes are to hold the ACL user.
type aclDeployment struct {
	data   []*Redis               // the data nodes (each gets the user)
	redis  map[string]interface{} // the plugin's redis options, but the user's
	holder func(key string) *Redis
	c      *Cluster // cluster mode
}

const aclPassword = "acl-s3cret"

func TestReadmeACLInEveryMode(t *testing.T) {
	modes := []struct {
		desc  string
		start func(t *testing.T) aclDeployment
	}{
		{"standalone", func(t *testing.T) aclDeployment {
			r := startRedis(t)
			return aclDeployment{data: []*Redis{r}, holder: func(string) *Redis { return r },
				redis: map[string]interface{}{"endpoints": []interface{}{r.Addr}}}
		}},
		{"sentinel", func(t *testing.T) aclDeployment {
			s := startSentinels(t)
			return aclDeployment{data: []*Redis{s.Primary, s.Replica}, holder: func(string) *Redis { return s.Primary },
				redis: map[string]interface{}{"mode": "sentinel", "endpoints": s.Addrs(), "masterName": MasterName,
					"sentinelPassword": SentinelPassword}}
		}},
		{"cluster", func(t *testing.T) aclDeployment {
			c := startCluster(t)
			return aclDeployment{data: c.Nodes, c: c,
				holder: func(key string) *Redis { _, owner := slotOf(t, c, key); return owner },
				redis:  map[string]interface{}{"mode": "cluster", "endpoints": []interface{}{c.Nodes[0].Addr}}}
		}},
	}
	for _, m := range modes {
		m := m
		t.Run(m.desc, func(t *testing.T) {
			forEachKindBare(t, func(t *testing.T, e *env) {
				d := m.start(t)
				user, acl := readmeACL(t, aclPassword)
				setUser := func(args ...interface{}) {
					t.Helper()
					for _, n := range d.data {
						if _, err := n.Do("ACL", append([]interface{}{"SETUSER", user}, args...)...); err != nil {
							t.Fatalf("ACL SETUSER %s %v on %s: %v", user, args, n.Addr, err)
						}
					}
				}
				setUser(acl[1:]...)
				logs := pluginLogs(t, e)
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("ACL LOG: %v; the plugin's log:\n%s", aclDenialsAll(t, d.data), logs)
					}
				})
				o := d.redis
				// A generous timeout: a check that took long on a loaded
				// machine must not pass for a refusal.
				o["username"], o["password"], o["timeout"] = user, aclPassword, "1s"
				o["heartbeat"], o["probeInterval"], o["breakerThreshold"] = "200ms", "3s", 3
				run := uniqueKey(t) // the compiled pod's local buckets outlive the test
				h := e.handler(e.pod(), "acl@file", topoOpts(o, "class", "acl", "average", 60, "period", "1h", "burst", 5))

				// Checks decided by Redis: a client gets the burst, then
				// Redis's refusals.
				waitDecidedByRedis(t, h, 5*time.Second)
				if n := hammer(t, h, run+"-first", 7); n != 5 {
					t.Fatalf("%d of 7 admitted, want the burst, 5", n)
				}
				if d.c != nil {
					aclFollowAsk(t, d.c, h, run+"-ask")
				}
				// The heartbeat (TIME, ZADD, ZREMRANGEBYSCORE, PEXPIRE, ZCARD
				// on tg{hb:acl}) ran and was not refused.
				hb := d.holder("tg{hb:acl}")
				for _, cmd := range []string{"zadd", "zremrangebyscore", "pexpire", "zcard"} {
					var n int64
					for deadline := time.Now().Add(3 * time.Second); n == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
						n, _ = hb.Calls(cmd)
					}
					if n == 0 {
						t.Fatalf("the heartbeat's %s never ran on %s (ACL LOG %v)", strings.ToUpper(cmd), hb.Addr, aclDenials(t, hb))
					}
				}
				noDenials(t, d.data, "checks and heartbeats")

				// A concurrency cap's take (SREM, ZREMRANGEBYSCORE, ZCARD,
				// ZADD, PEXPIRE in the script) and give-back (ZREM).
				hc := e.handler(e.pod(), "aclcap@file", topoOpts(o, "class", "aclcap", "average", 60, "period", "1h", "burst", 5,
					"concurrency", map[string]interface{}{"max": 2}))
				waitDecidedByRedis(t, hc, 5*time.Second)
				if n := hammer(t, hc, run+"-cap", 3); n != 3 {
					t.Fatalf("%d of 3 sequential requests under a cap of 2 admitted, want 3 (each gives its slot back)", n)
				}
				var zrems int64
				for deadline := time.Now().Add(3 * time.Second); zrems == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
					zrems = 0
					for _, n := range d.data {
						c, _ := n.Calls("zrem")
						zrems += c
					}
				}
				if zrems == 0 {
					t.Fatalf("no give-back ran (ZREM) (ACL LOG %v)", aclDenialsAll(t, d.data))
				}
				noDenials(t, d.data, "a concurrency cap's takes and give-backs")

				// The breaker: the user is refused for a while (AUTH fails,
				// its connections are killed), checks fall back and open the
				// breaker; the user comes back, and the prober's PING closes
				// the breaker with no traffic at all. 20 failures open it
				// whatever the successes counted in the same second.
				setUser("off")
				for _, n := range d.data {
					if _, err := n.Do("CLIENT", "KILL", "USER", user); err != nil {
						t.Fatal(err)
					}
				}
				for i := 0; i < 20; i++ {
					if rec := do(h, "GET", "/", fmt.Sprintf("%s-breaker-%d", run, i)); decided(rec) != "local" || rec.Code != 200 {
						t.Fatalf("user refused, request %d: %d decided by %q, want 200 from the local fallback", i, rec.Code, decided(rec))
					}
				}
				opened := time.Now() // the breaker opened before this
				setUser("on")
				for _, n := range d.data {
					if _, err := n.Do("ACL", "LOG", "RESET"); err != nil {
						t.Fatal(err)
					}
				}
				// Still open (no probe due for 3 s): the fallback decides.
				if rec := do(h, "GET", "/", run+"-open"); decided(rec) != "local" {
					t.Fatalf("right after the user came back: decided by %q, want local (the breaker open)", decided(rec))
				}
				// The prober's attempt is due 3 s after the breaker opened;
				// a refused probe would push the next one (and any request's
				// turn) 3 s later. The request comes in the middle of that
				// window, 1.5 s after the attempt: the probe's connection
				// was in the pool 1 to 71 ms after it was due (12 runs, every
				// mode, on a 2-core machine shared with other test runs),
				// and a refused probe leaves 1.5 s before the next turn.
				time.Sleep(time.Until(opened.Add(3*time.Second + 1500*time.Millisecond)))
				if rec := do(h, "GET", "/", run+"-after"); decided(rec) != "redis" {
					t.Fatalf("%v after the breaker opened: decided by %q, want redis: the probe did not close it (ACL LOG %v)",
						time.Since(opened).Round(time.Millisecond), decided(rec), aclDenialsAll(t, d.data))
				}
				if n := hammer(t, h, run+"-last", 7); n != 5 {
					t.Fatalf("after the breaker closed: %d of 7 admitted, want 5", n)
				}
				noDenials(t, d.data, "the probe and the checks after it")
			})
		})
	}
}

// aclFollowAsk migrates a fresh client's slot by hand: the check is asked
// for on the importing node (ASK, then ASKING and EVAL), decided by Redis.
func aclFollowAsk(t *testing.T, c *Cluster, h http.Handler, client string) {
	t.Helper()
	slot, _, to, toID := startMigration(t, c, bucketKey("acl", client))
	if rec := do(h, "GET", "/", client); rec.Code != 200 || decided(rec) != "redis" {
		t.Fatalf("slot migrating: %d decided by %q, want 200 by Redis (ASK followed with ASKING)", rec.Code, decided(rec))
	}
	if n, err := redis.Int(to.Do("CLUSTER", "COUNTKEYSINSLOT", slot)); err != nil || n != 1 {
		t.Fatalf("importing node holds %d keys of slot %d (%v): the check did not follow ASK", n, slot, err)
	}
	for _, p := range c.Primaries() {
		if _, err := p.Do("CLUSTER", "SETSLOT", slot, "NODE", toID); err != nil {
			t.Fatal(err)
		}
	}
}

// aclDenials returns ACL LOG on r, one "reason object user" per entry.
func aclDenials(t *testing.T, r *Redis) []string {
	t.Helper()
	entries, err := redis.Values(r.Do("ACL", "LOG"))
	if err != nil {
		t.Fatalf("ACL LOG on %s: %v", r.Addr, err)
	}
	var out []string
	for _, e := range entries {
		f, _ := redis.Values(e, nil)
		m := map[string]string{}
		for i := 0; i+1 < len(f); i += 2 {
			k, _ := redis.String(f[i], nil)
			m[k] = fmt.Sprint(f[i+1])
			if v, err := redis.String(f[i+1], nil); err == nil {
				m[k] = v
			}
		}
		out = append(out, m["reason"]+" "+m["object"]+" "+m["username"])
	}
	return out
}

// aclDenialsAll is aclDenials of every node, by address.
func aclDenialsAll(t *testing.T, nodes []*Redis) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, n := range nodes {
		if d := aclDenials(t, n); len(d) > 0 {
			out[n.Addr] = d
		}
	}
	return out
}

// noDenials fails when a node refused anything (ACL LOG).
func noDenials(t *testing.T, nodes []*Redis, during string) {
	t.Helper()
	if d := aclDenialsAll(t, nodes); len(d) > 0 {
		t.Fatalf("during %s the README's ACL refused: %v", during, d)
	}
}
