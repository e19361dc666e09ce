package tollgate

// The plugin's binding to its Redis client (internal/redis): a backend's
// deployment made from the compiled settings, its hooks wired to the
// backend's breaker and logs, and the bucket script's prepared call.

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"strconv"

	"github.com/tollgate-dev/tollgate/internal/redis"
)

// The scripts as the client loads and names them.
var (
	bucket      = redis.NewScript(bucketScript)
	leaseBucket = redis.NewScript(leaseScript)
	giveBack    = redis.NewScript(giveBackScript)
)

// connect makes b's deployment for set (TLS files read now) and starts
// it: the first connection (standalone) or the topology (Sentinel,
// Cluster) sought off the caller's clock. A failed dial counts against b's
// breaker (dialFailed), a topology change lets its next probe through, a
// failed refresh is logged as a failure.
func connect(b *backend, set redisSettings) error {
	opts := redis.Options{
		Mode: set.mode, Addr: set.addr, Endpoints: set.endpoints, MasterName: set.masterName,
		SentinelUser: set.sentinelUser, SentinelPass: set.sentinelPass,
		Username: set.username, Password: set.password, DB: set.db,
		Timeout: set.timeout, PoolSize: set.poolSize, Script: bucket,
	}
	if set.useTLS {
		conf, err := tlsConfig(set)
		if err != nil {
			return err
		}
		if set.mode != redis.Standalone {
			conf.ServerName = "" // each node is verified by its own address
		}
		opts.TLS = conf
	}
	b.rc = redis.New(opts, redis.Hooks{
		DialFailed:    func(err error) { b.dialFailed(err) },
		Changed:       func() { b.breaker.probeSoon() },
		RefreshFailed: func(err error) { b.logFailure(b.now(), err, &b.base) },
	})
	b.pool = b.rc.Pool()
	b.rc.Start()
	return nil
}

// cmdParts is the shape of a script call over policies: each key's
// length (keyLen; clientKeyLen for a rule keyed its own way, never
// sharded) and suffix, and the interval, burst and cost of every bucket
// (a quota's: -limit, its windows, cost; quota.go) (then, with regions,
// each bucket's static share).
type cmdParts struct {
	lens     []int
	suffixes []string
	args     []string
}

// commandParts returns the call's shape over ps for client keys of keyLen.
func commandParts(ps []*policy, keyLen int) cmdParts {
	var c cmdParts
	for _, p := range ps {
		n := keyLen
		if p.source != nil {
			n = clientKeyLen
		}
		if p.conc != nil { // key#member (heldCall), the cap, maxDuration
			if p.conc.class != "" {
				n = len(p.conc.class)
			}
			c.lens = append(c.lens, n+1+memberLen)
			c.suffixes = append(c.suffixes, p.keySuffix)
			c.args = append(c.args, "0", strconv.FormatInt(p.conc.max, 10), strconv.FormatInt(p.conc.durUS, 10))
			continue
		}
		c.lens = append(c.lens, n)
		c.suffixes = append(c.suffixes, p.keySuffix)
		if p.quota != nil { // -limit, the windows (quotaViewAt), cost
			c.args = append(c.args, strconv.FormatInt(-p.quota.limit, 10), "", strconv.FormatFloat(p.lim.cost, 'g', -1, 64))
			continue
		}
		c.args = append(c.args, strconv.FormatFloat(p.shard.interval, 'g', -1, 64),
			strconv.FormatFloat(p.shard.burst, 'g', -1, 64), strconv.FormatFloat(p.shard.cost, 'g', -1, 64))
	}
	if ps[0].regionPPM != 0 {
		for _, p := range ps {
			c.args = append(c.args, strconv.FormatInt(p.regionPPM, 10))
		}
	}
	return c
}

// newCommand prepares the bucket script's call for policies ps, whose
// keys are a client key of keyLen bytes plus each policy's keySuffix.
func newCommand(ps []*policy, keyLen int) *redis.Command {
	c := commandParts(ps, keyLen)
	return redis.NewCommand(bucket, c.lens, c.suffixes, c.args, checkDecision)
}

// leaseCommand prepares the lease script's call of shape c (lease.go):
// this pod's lease field, max requests per lease, its ttl in µs, the pods
// counted, and whether it asks for a lease (its reply then ends with the
// requests granted and the lease's end).
func leaseCommand(c cmdParts, field string, max, ttlUS, pods int64, ask bool) *redis.Command {
	flag := "0"
	if ask {
		flag = "1"
	}
	args := append(append([]string(nil), c.args...), field, strconv.FormatInt(max, 10), strconv.FormatInt(ttlUS, 10), strconv.FormatInt(pods, 10), flag)
	verify := checkDecision
	if ask {
		verify = func(d []int64) error { return checkDecision(d[:len(d)-2]) } // the grant's numbers are not a bucket's
	}
	return redis.NewCommand(leaseBucket, c.lens, c.suffixes, args, verify)
}

// tlsConfig builds the TLS configuration of set: the server verified by
// set.addr's host against tls.ca, or the system's roots when ca is empty,
// and the client certificate when cert and key are set.
func tlsConfig(set redisSettings) (*tls.Config, error) {
	conf := &tls.Config{InsecureSkipVerify: set.tls.InsecureSkipVerify, MinVersion: tls.VersionTLS12}
	if host, _, err := net.SplitHostPort(set.addr); err == nil {
		conf.ServerName = host
	}
	if set.tls.CA != "" {
		pem, err := readConfigFile("redis.tls.ca", set.tls.CA, maxPEMFile)
		if err != nil {
			return nil, err
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis.tls.ca: %q holds no PEM certificate", set.tls.CA)
		}
		conf.RootCAs = pool
	}
	if set.tls.Cert != "" {
		cert, err := readConfigFile("redis.tls.cert", set.tls.Cert, maxPEMFile)
		if err != nil {
			return nil, err
		}
		key, err := readConfigFile("redis.tls.key", set.tls.Key, maxPEMFile)
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("redis.tls.cert/key: loading %q and %q: %w", set.tls.Cert, set.tls.Key, err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf, nil
}
