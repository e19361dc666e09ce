package e2e

// TLS verification, for real: a Redis whose certificate the plugin cannot
// verify is refused, whatever it would answer. failureMode open and the
// decision header say who decided: a refused Redis leaves every check to
// the local fallback and never sees a connection named tollgate, while the
// same configuration against a Redis with a good certificate is decided by
// Redis. In a cluster, every node named by CLUSTER SLOTS is verified by its
// own address: nodes on 127.0.0.1, 127.0.0.2 and 127.0.0.3 each present a
// certificate for one address only.
//
// Mutations they catch (each seen failing, compiled and interpreted):
//   - tlsConfig (redisconn.go) forcing InsecureSkipVerify true: the
//     foreign-CA and misnamed servers and the cluster's impostor node are
//     decided by Redis;
//   - the chain verified but not the name (InsecureSkipVerify with a
//     VerifyPeerCertificate that checks the chain only): the misnamed
//     server and the impostor node are decided by Redis;
//   - the seed's host as ServerName for every node, either for the
//     topology queries (registry.go keeping tlsConfig's ServerName) or for
//     every node's pool (tlsConfig taking endpoints[0]'s host): the
//     cluster's slot map is never learnt, or its nodes are refused.
// TestTLSWithClientCertificates and TestClusterOverTLS pass under all of
// them (one certificate for 127.0.0.1, every node on 127.0.0.1).

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
)

// helperTLS is the test helpers' own client side for servers whose
// certificate the plugin must refuse: the helpers (INFO, CLIENT LIST) are
// not under test and skip verification; they present the client
// certificate the servers require.
func helperTLS(t *testing.T, p *pki) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}
}

// pluginLogs returns what the plugin logs: under Yaegi its stderr, which
// the env captures; compiled, the process's log, copied until the test
// ends.
func pluginLogs(t *testing.T, e *env) *syncBuffer {
	if e.kind == "yaegi" {
		return e.logs
	}
	buf := &syncBuffer{}
	prev := log.Writer()
	log.SetOutput(io.MultiWriter(prev, buf))
	t.Cleanup(func() { log.SetOutput(prev) })
	return buf
}

func TestTLSRefusesAServerItCannotVerify(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		logs := pluginLogs(t, e)
		dir := t.TempDir()
		good := newPKI(t, dir)
		if err := os.Mkdir(filepath.Join(dir, "other"), 0o755); err != nil {
			t.Fatal(err)
		}
		other := newPKI(t, filepath.Join(dir, "other")) // another CA; its server certificate is for 127.0.0.1
		misCert, misKey := good.issue(t, "misnamed", x509.ExtKeyUsageServerAuth, []string{"127.0.0.2"}, "redis.example")
		cases := []struct {
			desc       string
			cert, key  string
			helper     *tls.Config
			refused    bool
			logPattern string // the refusal's reason, as the plugin logs it
		}{
			{desc: "good certificate", cert: good.serverCert, key: good.serverKey, helper: good.clientConfig(t)},
			{desc: "signed by another CA", cert: other.serverCert, key: other.serverKey, helper: helperTLS(t, good),
				refused: true, logPattern: `x509: certificate signed by unknown authority`},
			{desc: "for another name", cert: misCert, key: misKey, helper: helperTLS(t, good),
				refused: true, logPattern: `x509: certificate is valid for .*not 127\.0\.0\.1`},
		}
		pod := e.pod()
		for i, tc := range cases {
			i, tc := i, tc
			t.Run(tc.desc, func(t *testing.T) {
				// Every server trusts the good CA for client certificates:
				// only the server's own certificate differs.
				rdir := filepath.Join(dir, strconv.Itoa(i))
				if err := os.Mkdir(rdir, 0o755); err != nil {
					t.Fatal(err)
				}
				r, err := StartRedisWith(rdir, tc.helper,
					"--tls-cert-file", tc.cert, "--tls-key-file", tc.key,
					"--tls-ca-cert-file", good.ca, "--tls-auth-clients", "yes")
				if err != nil {
					if NeedRedis(err) {
						t.Skip(err)
					}
					t.Fatal(err)
				}
				t.Cleanup(r.Kill)
				h := e.handler(pod, fmt.Sprintf("tls%d@file", i), topoOpts(map[string]interface{}{
					"endpoints": []interface{}{r.Addr}, "timeout": "1s",
					"tls": map[string]interface{}{"ca": good.ca, "cert": good.clientCert, "key": good.clientKey},
				}, "class", fmt.Sprintf("tls%d", i), "average", 60, "period", "1h", "burst", 20))
				run := uniqueKey(t) // the compiled pod's local buckets outlive the test
				want := "redis"
				if tc.refused {
					want = "local"
				}
				// Two rounds, the second after the dials, the breaker and its
				// prober have had time to try again.
				for round := 0; round < 2; round++ {
					for j := 0; j < 5; j++ {
						rec := do(h, "GET", "/", fmt.Sprintf("%s-%d-%d", run, round, j))
						if rec.Code != 200 || decided(rec) != want {
							t.Fatalf("round %d, request %d: %d decided by %q, want 200 decided by %s", round, j, rec.Code, decided(rec), want)
						}
					}
					time.Sleep(300 * time.Millisecond)
				}
				named, _, err := r.ClientsNamed("tollgate")
				if err != nil {
					t.Fatal(err)
				}
				calls, err := r.ScriptCalls()
				if err != nil {
					t.Fatal(err)
				}
				if tc.refused && (named != 0 || calls != 0) {
					t.Fatalf("Redis has %d tollgate connections and ran %d scripts, want none", named, calls)
				}
				if !tc.refused && (named == 0 || calls < 10) {
					t.Fatalf("Redis has %d tollgate connections and ran %d scripts, want some and 10", named, calls)
				}
				if tc.refused && !regexpMatch(regexp.QuoteMeta(r.Addr)+` .*`+tc.logPattern, logs.String()) {
					t.Fatalf("the plugin's log has no failure for %s matching %q:\n%s", r.Addr, tc.logPattern, logs.String())
				}
			})
		}
	})
}

// startTLSPrimaries starts one TLS-only cluster node per host (clients,
// cluster bus over TLS), node i listening on hosts[i] and presenting
// certs[i] (certificate and key), and joins them as primaries only.
func startTLSPrimaries(t *testing.T, dir string, p *pki, hosts []string, certs [][2]string) *Cluster {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if NeedRedis(ErrNoRedis) {
			t.Skip(ErrNoRedis)
		}
		t.Fatal(ErrNoRedis)
	}
	c := &Cluster{}
	t.Cleanup(c.Stop)
	var addrs []string
	for i, host := range hosts {
		ndir := filepath.Join(dir, fmt.Sprintf("node%d", i))
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			t.Fatal(err)
		}
		// The later --bind replaces start's 127.0.0.1; the node announces
		// its own address, which CLUSTER SLOTS names.
		r := &Redis{Addr: host, bus: -1, dir: ndir, bin: bin, tls: helperTLS(t, p), extra: []string{
			"--bind", host, "--cluster-announce-ip", host,
			"--tls-cert-file", certs[i][0], "--tls-key-file", certs[i][1], "--tls-ca-cert-file", p.ca,
			"--tls-auth-clients", "yes", "--tls-cluster", "yes",
			"--tls-client-cert-file", p.clientCert, "--tls-client-key-file", p.clientKey,
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		}}
		if err := r.startNew(); err != nil {
			t.Fatal(err)
		}
		c.Nodes = append(c.Nodes, r)
		addrs = append(addrs, r.Addr)
	}
	args := append([]string{"--tls", "--cacert", p.ca, "--cert", p.clientCert, "--key", p.clientKey, "--cluster", "create"}, addrs...)
	if out, err := exec.Command("redis-cli", append(args, "--cluster-replicas", "0", "--cluster-yes")...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	if err := c.WaitHealthy(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClusterNodesVerifiedByTheirOwnAddress(t *testing.T) {
	forEachKindBare(t, func(t *testing.T, e *env) {
		logs := pluginLogs(t, e)
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the plugin's log:\n%s", logs)
			}
		})
		dir := t.TempDir()
		p := newPKI(t, dir)
		var second [2]string
		second[0], second[1] = p.issue(t, "node2", x509.ExtKeyUsageServerAuth, []string{"127.0.0.2"})
		// 127.0.0.1 and 127.0.0.2 present certificates for their own
		// address; 127.0.0.3 presents 127.0.0.1's, signed by the same CA but
		// valid for another node's address.
		c := startTLSPrimaries(t, dir, p, []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"},
			[][2]string{{p.serverCert, p.serverKey}, second, {p.serverCert, p.serverKey}})
		first, verified, impostor := c.Nodes[0], c.Nodes[1], c.Nodes[2]
		// Every connection the plugin completes names itself (CLIENT
		// SETNAME): the impostor must see none, not even a short-lived one
		// for CLUSTER SLOTS.
		setnames := func() int64 {
			n, err := impostor.Calls("client|setname")
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := setnames()
		// The impostor is the first seed: its CLUSTER SLOTS must be refused
		// and the map learnt from the next seed, verified by its own
		// address (verifying every node against the first seed's host
		// refuses both). A high breakerThreshold keeps the impostor's
		// failures from opening the deployment-wide breaker.
		h := e.handler(e.pod(), "api@file", topoOpts(map[string]interface{}{
			"mode": "cluster", "endpoints": []interface{}{impostor.Addr, first.Addr}, "timeout": "1s", "breakerThreshold": 1000000,
			"tls": map[string]interface{}{"ca": p.ca, "cert": p.clientCert, "key": p.clientKey},
		}, "class", "api", "average", 60, "period", "1h", "burst", 5))
		waitDecidedByRedis(t, h, 5*time.Second)
		// 4 clients per node, by the slot of their bucket.
		clients := map[*Redis][]string{}
		run := uniqueKey(t) // the compiled pod's local buckets outlive the test
		for i := 0; len(clients[first]) < 4 || len(clients[verified]) < 4 || len(clients[impostor]) < 4; i++ {
			k := fmt.Sprintf("%s-%d", run, i)
			_, owner := slotOf(t, c, bucketKey("api", k))
			clients[owner] = append(clients[owner], k)
		}
		for _, n := range []*Redis{first, verified} {
			for _, k := range clients[n][:4] {
				if got := hammer(t, h, k, 7); got != 5 {
					t.Fatalf("client %s on %s: %d of 7 admitted, want 5", k, n.Addr, got)
				}
			}
		}
		// Three rounds apart: failed checks read the map again (at most
		// every 250 ms), from the known nodes, the impostor among them.
		for round := 0; round < 3; round++ {
			for _, k := range clients[impostor][:4] {
				if rec := do(h, "GET", "/", k); rec.Code != 200 || decided(rec) != "local" {
					t.Fatalf("client %s on %s (a certificate for %s): %d decided by %q, want 200 from the local fallback",
						k, impostor.Addr, first.Addr, rec.Code, decided(rec))
				}
			}
			time.Sleep(300 * time.Millisecond)
		}
		for _, n := range []*Redis{first, verified, impostor} {
			keys, err := redis.Int(n.Do("DBSIZE"))
			if err != nil {
				t.Fatal(err)
			}
			named, _, err := n.ClientsNamed("tollgate")
			if err != nil {
				t.Fatal(err)
			}
			if n == impostor && (keys != 0 || named != 0) {
				t.Fatalf("%s presents a certificate for %s: it holds %d keys and %d tollgate connections, want none", n.Addr, first.Addr, keys, named)
			}
			if n != impostor && (keys == 0 || named == 0) {
				t.Fatalf("%s holds %d keys and %d tollgate connections: not reached over TLS", n.Addr, keys, named)
			}
		}
		if n := setnames() - before; n != 0 {
			t.Fatalf("%s presents a certificate for %s: %d connections of the plugin completed their handshake, want none", impostor.Addr, first.Addr, n)
		}
	})
}
