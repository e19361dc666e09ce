package tollgate

// The exchange's writes of shares: what Redis refuses is neither counted
// as applied nor published as applied.

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startOneNodeCluster starts a redis-server in cluster mode that serves
// every slot, and returns its address: it refuses a transaction over keys
// of two slots (CROSSSLOT) like any Cluster.
func startOneNodeCluster(t *testing.T) string {
	t.Helper()
	bin, err := lookRedisServer()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	for attempt := 0; attempt < 3; attempt++ {
		port := freePort(t)
		logf, err := os.Create(filepath.Join(dir, "redis-"+port+".log"))
		if err != nil {
			t.Fatal(err)
		}
		proc, err := os.StartProcess(bin, []string{bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes-" + port + ".conf",
			"--dir", dir, "--daemonize", "no", "--loglevel", "warning"}, &os.ProcAttr{Dir: dir, Files: []*os.File{nil, logf, logf}})
		logf.Close()
		if err != nil {
			t.Fatalf("starting redis-server: %v", err)
		}
		addr := "127.0.0.1:" + port
		if !liveReady(addr, proc.Pid) {
			_ = proc.Kill()
			_, _ = proc.Wait()
			continue
		}
		t.Cleanup(func() {
			_ = proc.Kill()
			_, _ = proc.Wait()
		})
		redisCmd(t, addr, "CLUSTER", "ADDSLOTSRANGE", "0", strconv.Itoa(clusterSlots-1))
		for i := 0; i < 250; i++ {
			if v := redisCmd(t, addr, "CLUSTER", "INFO"); len(v) == 1 && strings.Contains(v[0], "cluster_state:ok") {
				return addr
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatal("the one-node cluster never reached cluster_state:ok")
	}
	t.Fatal("redis-server (cluster mode) did not start")
	return ""
}

// lookRedisServer finds redis-server on PATH.
func lookRedisServer() (string, error) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, "redis-server")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", os.ErrNotExist
}

// freePort is a loopback port free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	nc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	a := nc.Addr().String()
	return a[strings.LastIndex(a, ":")+1:]
}

// shrinkWorld is region a (on own, in mode) holding 0.95 of keys, each
// tracked in its report with no demand, and its peer b pressing on them
// at its floor: a's next exchange shrinks every key to its floor. It
// returns an exchanger of a (its loop's sleeps to the hour), its
// settings with a 200 ms interval, and the slot to exchange.
func shrinkWorld(t *testing.T, own, mode string, keys []string) (*exchanger, *regionSettings, int64) {
	t.Helper()
	rb := startLiveRedis(t)
	a := handlerOn(t, own, func(c *Config) {
		c.Class = uniqueName("region")
		c.Average, c.Period, c.Burst = 20, "1s", 20
		c.Redis.Username = ""
		c.Redis.Mode = mode
		c.Region = &RegionConfig{Name: "a", Interval: "1h", Peers: []PeerConfig{{Name: "b", Endpoints: []string{rb}}}}
	})
	if mode == "cluster" {
		if err := a.be.loadSlots(); err != nil {
			t.Fatal(err)
		}
	}
	rs := *exchangerOf(a).settings()
	rs.interval = 200 * time.Millisecond
	x := &exchanger{own: a.be, peers: exchangerOf(a).peers, peerUp: make([]int32, len(rs.peers))}
	s := time.Now().UnixNano()/int64(rs.interval) + 1
	seq := strconv.FormatInt(s-1, 10)
	mine, theirs := "tollgate-region 1 a "+seq+"\n", "tollgate-region 1 b "+seq+"\nack a "+seq+"\n"
	for _, k := range keys {
		redisCmd(t, own, "HSET", k+"}s", "s", "950000")
		mine += "k " + k + " 0 950000 20000\n"
		theirs += "k " + k + " 40000 50000 20000\n" // 40/s asked: twice the limit
	}
	redisCmd(t, own, "SET", reportKeyOf("a"), mine)
	redisCmd(t, rb, "SET", reportKeyOf("b"), theirs)
	return x, &rs, s
}

// publishedShares reads region a's report from own.
func publishedShares(t *testing.T, own string) map[string]reportKey {
	t.Helper()
	v := redisCmd(t, own, "GET", reportKeyOf("a"))
	if len(v) != 1 {
		t.Fatal("region a published no report")
	}
	r, err := parseReport([]byte(v[0]))
	if err != nil {
		t.Fatal(err)
	}
	return r.keys
}

// A region on a Cluster tracks keys of several slots on one node: their
// shares are written, one transaction per slot. (In one transaction per
// node, the node refused it whole, CROSSSLOT, the refusal was read as a
// reply, the exchange counted as done, and the report published shares
// never applied: a peer grew into room this region never gave up.)
func TestRegionClusterWritesSharesOfSeveralSlots(t *testing.T) {
	own := startOneNodeCluster(t)
	keys := []string{hashKey("slots\x00one"), hashKey("slots\x00two"), hashKey("slots\x00three")}
	if keySlot(keys[0]) == keySlot(keys[1]) {
		t.Fatal("the test's keys share a slot")
	}
	x, rs, s := shrinkWorld(t, own, "cluster", keys)
	ok := x.exchange(rs, s, monotonic())
	pub := publishedShares(t, own)
	for _, k := range keys {
		if got := shareIn(t, own, k); got != rs.floor || pub[k].share != rs.floor {
			t.Errorf("slot %d: share %d in Redis, %d published; want both the floor, %d", keySlot(k), got, pub[k].share, rs.floor)
		}
	}
	if !ok {
		t.Errorf("the exchange counted as failed")
	}
}

// A write refused inside the transaction (here another type at one key's
// share hash) fails that write: the exchange counts as failed, and the
// report publishes that key's share as it still is, not as decided; the
// other keys' writes stand. (The refusal inside EXEC was read as a reply.)
func TestRegionRefusedShareWriteIsNotPublished(t *testing.T) {
	own := startLiveRedis(t)
	good, bad := hashKey("refused\x00good"), hashKey("refused\x00bad")
	x, rs, s := shrinkWorld(t, own, "", []string{good, bad})
	redisCmd(t, own, "DEL", bad+"}s")
	redisCmd(t, own, "SET", bad+"}s", "not a hash")
	ok := x.exchange(rs, s, monotonic())
	pub := publishedShares(t, own)
	if got := shareIn(t, own, good); got != rs.floor || pub[good].share != rs.floor {
		t.Errorf("the key written: share %d in Redis, %d published; want the floor, %d", got, pub[good].share, rs.floor)
	}
	if pub[bad].share != 950000 {
		t.Errorf("the key whose write Redis refused: published at %d, want 950000 (its share before: the shrink was not applied)", pub[bad].share)
	}
	if ok {
		t.Errorf("an exchange whose write Redis refused counted as done")
	}
}
