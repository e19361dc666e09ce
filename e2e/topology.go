package e2e

import (
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gomodule/redigo/redis"
)

// startServer starts redis-server in its own directory under dir with pre
// arguments (a config file) and more arguments; password, when set, is
// what the helpers authenticate with.
func startServer(dir, password string, pre []string, args ...string) (*Redis, error) {
	return startServerTLS(dir, password, nil, pre, args...)
}

// startServerTLS is startServer for a TLS-only server; tlsConf is the
// helpers' client side and args must configure the server's certificates.
func startServerTLS(dir, password string, tlsConf *tls.Config, pre []string, args ...string) (*Redis, error) {
	r, err := newServer(dir, password, tlsConf, pre, args...)
	if err != nil {
		return nil, err
	}
	return r, r.startNew()
}

// newServer is startServerTLS's server, not started (startNew starts it).
func newServer(dir, password string, tlsConf *tls.Config, pre []string, args ...string) (*Redis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, ErrNoRedis
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Redis{Addr: "127.0.0.1", Password: password, dir: dir, bin: bin, pre: pre, extra: args, tls: tlsConf}, nil
}

// Cluster is a Redis Cluster of real redis-servers on loopback: primaries
// with one replica each, created by redis-cli --cluster create.
type Cluster struct {
	Nodes []*Redis
}

// StartCluster starts 2 x primaries servers and joins them in a cluster
// (node timeout 1 s, so that a replica takes over a dead primary within a
// few seconds).
func StartCluster(dir string, primaries int) (*Cluster, error) {
	return StartClusterTLS(dir, primaries, nil, nil, nil)
}

// StartClusterTLS is StartCluster with TLS everywhere when tlsConf (the
// helpers' client side) is set: serverArgs configure each node's
// certificates (clients, cluster bus, replication), cliArgs redis-cli's.
func StartClusterTLS(dir string, primaries int, tlsConf *tls.Config, serverArgs, cliArgs []string) (*Cluster, error) {
	c := &Cluster{}
	var addrs []string
	for i := 0; i < 2*primaries; i++ {
		r, err := newServer(filepath.Join(dir, fmt.Sprintf("node%d", i)), "", tlsConf, nil, append(append([]string{}, serverArgs...),
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000",
			// Replicas sync at once and may take over whatever their data's age.
			"--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0")...)
		if err != nil {
			c.Stop()
			return nil, err
		}
		// The bus port is a free port of its own, not port+10000.
		r.bus = -1
		if err := r.startNew(); err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, r)
		addrs = append(addrs, r.Addr)
	}
	args := append(append(append([]string{}, cliArgs...), "--cluster", "create"), addrs...)
	args = append(args, "--cluster-replicas", "1", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		c.Stop()
		return nil, fmt.Errorf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.WaitHealthy(20 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	if err := waitReplicasSynced(c.Nodes, 20*time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitReplicasSynced waits until every replica among nodes has its link to
// its primary up.
func waitReplicasSynced(nodes []*Redis, within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, n := range nodes {
		for {
			info, err := n.Info("replication")
			if err == nil && (info["role"] == "master" || info["master_link_status"] == "up") {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("replica %s not synced within %v: %v %v", n.Addr, within, info, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// Stop kills every node.
func (c *Cluster) Stop() {
	for _, n := range c.Nodes {
		n.Kill()
	}
}

// Alive returns the nodes that run.
func (c *Cluster) Alive() []*Redis {
	var out []*Redis
	for _, n := range c.Nodes {
		if n.cmd != nil {
			out = append(out, n)
		}
	}
	return out
}

// WaitHealthy waits until every running node reports cluster_state:ok and
// all slots are served by running primaries.
func (c *Cluster) WaitHealthy(within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		ok := true
		for _, n := range c.Alive() {
			info, err := redis.String(n.Do("CLUSTER", "INFO"))
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
				ok, last = false, fmt.Sprintf("%s: %v %q", n.Addr, err, info)
				break
			}
		}
		if ok {
			if owners, err := c.SlotOwners(); err == nil && len(owners) == 16384 {
				alive := map[string]bool{}
				for _, n := range c.Alive() {
					alive[n.Addr] = true
				}
				for _, o := range owners {
					if !alive[o] {
						ok, last = false, "a slot is owned by a stopped node "+o
						break
					}
				}
				if ok {
					return nil
				}
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("cluster not healthy within %v: %s", within, last)
}

// SlotOwners maps every slot to its primary's address, as a running node
// sees it (CLUSTER SLOTS).
func (c *Cluster) SlotOwners() (map[int]string, error) {
	alive := c.Alive()
	if len(alive) == 0 {
		return nil, errors.New("no node runs")
	}
	entries, err := redis.Values(alive[0].Do("CLUSTER", "SLOTS"))
	if err != nil {
		return nil, err
	}
	owners := map[int]string{}
	for _, e := range entries {
		f, _ := redis.Values(e, nil)
		first, _ := redis.Int(f[0], nil)
		last, _ := redis.Int(f[1], nil)
		n, _ := redis.Values(f[2], nil)
		host, _ := redis.String(n[0], nil)
		port, _ := redis.Int(n[1], nil)
		for s := first; s <= last; s++ {
			owners[s] = host + ":" + strconv.Itoa(port)
		}
	}
	return owners, nil
}

// Node returns the node at addr.
func (c *Cluster) Node(addr string) *Redis {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Primaries returns the running nodes whose role is master.
func (c *Cluster) Primaries() []*Redis {
	var out []*Redis
	for _, n := range c.Alive() {
		if role, err := redis.Values(n.Do("ROLE")); err == nil && len(role) > 0 {
			if r, _ := redis.String(role[0], nil); r == "master" {
				out = append(out, n)
			}
		}
	}
	return out
}

// Sentinels is a primary, its replica and three sentinels (quorum 2), all
// real redis-servers on loopback. The data nodes require DataPassword; the
// sentinels require SentinelPassword.
type Sentinels struct {
	Primary, Replica *Redis
	Sentinels        []*Redis
}

// Sentinel credentials used by StartSentinels.
const (
	DataPassword     = "data-s3cret"
	SentinelPassword = "sentinel-s3cret"
	MasterName       = "mymaster"
)

// StartSentinels starts the primary, the replica and the sentinels, and
// waits until every sentinel knows the replica and the other sentinels.
func StartSentinels(dir string) (*Sentinels, error) {
	s := &Sentinels{}
	var err error
	if s.Primary, err = startServer(filepath.Join(dir, "a"), DataPassword, nil, "--requirepass", DataPassword, "--masterauth", DataPassword, "--repl-diskless-sync-delay", "0"); err != nil {
		return nil, err
	}
	host, port, _ := strings.Cut(s.Primary.Addr, ":")
	if s.Replica, err = startServer(filepath.Join(dir, "b"), DataPassword, nil, "--requirepass", DataPassword, "--masterauth", DataPassword,
		"--replicaof", host, port); err != nil {
		s.Stop()
		return nil, err
	}
	if err := waitReplicasSynced([]*Redis{s.Replica}, 20*time.Second); err != nil {
		s.Stop()
		return nil, err
	}
	for i := 0; i < 3; i++ {
		sdir := filepath.Join(dir, fmt.Sprintf("sentinel%d", i))
		if err := os.MkdirAll(sdir, 0o755); err != nil {
			s.Stop()
			return nil, err
		}
		conf := filepath.Join(sdir, "sentinel.conf")
		text := fmt.Sprintf("sentinel monitor %s %s %s 2\n"+
			"sentinel auth-pass %s %s\n"+
			"sentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 5000\n"+
			"requirepass %s\nsentinel sentinel-pass %s\n",
			MasterName, host, port, MasterName, DataPassword, MasterName, MasterName, SentinelPassword, SentinelPassword)
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			s.Stop()
			return nil, err
		}
		r, err := startServer(sdir, SentinelPassword, []string{conf, "--sentinel"})
		if err != nil {
			s.Stop()
			return nil, err
		}
		s.Sentinels = append(s.Sentinels, r)
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		ready := true
		for _, sn := range s.Sentinels {
			m, err := redis.StringMap(sn.Do("SENTINEL", "MASTER", MasterName))
			if err != nil || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				ready = false
				break
			}
		}
		if ready {
			return s, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Stop()
	return nil, errors.New("the sentinels did not find the replica and each other within 20s")
}

// Addrs returns the sentinels' addresses.
func (s *Sentinels) Addrs() []interface{} {
	var out []interface{}
	for _, sn := range s.Sentinels {
		out = append(out, sn.Addr)
	}
	return out
}

// MasterAddr is the primary's address as the first sentinel sees it.
func (s *Sentinels) MasterAddr() (string, error) {
	hp, err := redis.Strings(s.Sentinels[0].Do("SENTINEL", "get-master-addr-by-name", MasterName))
	if err != nil || len(hp) != 2 {
		return "", fmt.Errorf("get-master-addr-by-name: %v %v", hp, err)
	}
	return hp[0] + ":" + hp[1], nil
}

// Stop kills every server.
func (s *Sentinels) Stop() {
	for _, r := range append([]*Redis{s.Primary, s.Replica}, s.Sentinels...) {
		if r != nil {
			r.Kill()
		}
	}
}
