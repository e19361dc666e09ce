package e2e

// Redis behind AUTH/ACL, a database number, and TLS with client
// certificates, started for real. failureMode closed turns any connection
// problem into a 503, so a 200 proves the check went through Redis.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestAuthUserPasswordFileAndDatabase(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		// The smallest ACL the README documents, read from README.md, plus
		// SELECT for db 3 as it says.
		user, acl := readmeACL(t, "s3cret")
		if _, err := e.redis.Do("ACL", append(append([]interface{}{"SETUSER"}, acl...), "+select")...); err != nil {
			t.Fatal(err)
		}
		secret := filepath.Join(t.TempDir(), "password")
		if err := os.WriteFile(secret, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		o := e.opts("average", 60, "period", "1m", "burst", 5, "failureMode", "closed",
			"redis.username", user, "redis.passwordFile", secret, "redis.db", 3)
		h := e.handler(e.pod(), "api@file", o)
		key := uniqueKey(t)
		for i := 0; i < 2; i++ {
			if rec := do(h, "GET", "/", key); rec.Code != 200 {
				t.Fatalf("request %d: %d %s, want 200 through the ACL user", i, rec.Code, rec.Body)
			}
		}
		clients, err := redisString(e.redis.Do("CLIENT", "LIST"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(clients, "name=tollgate") || !regexpMatch(`name=tollgate .*db=3 .*user=`+regexp.QuoteMeta(user)+` `, clients) {
			t.Fatalf("CLIENT LIST has no tollgate connection as user %s on db 3:\n%s", user, clients)
		}
		// The bucket and the pods' heartbeat set, in db 3; the ACL refused
		// nothing (ACL LOG).
		var ks map[string]string
		for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if ks, _ = e.redis.Info("keyspace"); strings.HasPrefix(ks["db3"], "keys=2,") {
				break
			}
		}
		if !strings.HasPrefix(ks["db3"], "keys=2,") {
			t.Fatalf("keyspace %v, want the bucket and the heartbeat set in db 3", ks)
		}
		if denied, err := e.redis.Do("ACL", "LOG"); err != nil || len(denied.([]interface{})) != 0 {
			t.Fatalf("ACL LOG = %v (%v): the documented ACL refused a command", denied, err)
		}
		// A wrong password is a failure like any other: 503 when closed.
		o = e.opts("average", 60, "period", "1m", "burst", 5, "failureMode", "closed",
			"redis.username", user, "redis.password", "wrong")
		if rec := do(e.handler(e.pod(), "bad@file", o), "GET", "/", key); rec.Code != 503 {
			t.Fatalf("wrong password: %d, want 503", rec.Code)
		}
	})
}

func TestTLSWithClientCertificates(t *testing.T) {
	for _, kind := range kinds {
		kind := kind
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			pki := newPKI(t, dir)
			r, err := StartRedisWith(dir, pki.clientConfig(t),
				"--tls-cert-file", pki.serverCert, "--tls-key-file", pki.serverKey,
				"--tls-ca-cert-file", pki.ca, "--tls-auth-clients", "yes")
			if err != nil {
				if NeedRedis(err) {
					t.Skip(err)
				}
				t.Fatal(err)
			}
			t.Cleanup(r.Kill)
			e := &env{t: t, kind: kind, redis: r, logs: &syncBuffer{}}
			h := e.handler(e.pod(), "api@file", e.opts("average", 60, "period", "1m", "burst", 5, "failureMode", "closed",
				"redis.tls", map[string]interface{}{"ca": pki.ca, "cert": pki.clientCert, "key": pki.clientKey}))
			key := uniqueKey(t)
			for i := 0; i < 3; i++ {
				rec := do(h, "GET", "/", key)
				if rec.Code != 200 || !strings.Contains(rec.Header().Get("RateLimit"), "r="+string(rune('4'-i))+";") {
					t.Fatalf("request %d over TLS: %d %q %s", i, rec.Code, rec.Header().Get("RateLimit"), rec.Body)
				}
			}
			// Without a client certificate the server refuses the handshake.
			noCert := e.handler(e.pod(), "nocert@file", e.opts("average", 60, "period", "1m", "burst", 5, "failureMode", "closed",
				"redis.tls", map[string]interface{}{"ca": pki.ca}))
			if rec := do(noCert, "GET", "/", key); rec.Code != 503 {
				t.Fatalf("TLS without a client certificate: %d, want 503", rec.Code)
			}
		})
	}
}

// pki is a CA with a server certificate for 127.0.0.1 and a client one;
// issue makes more certificates signed by the same CA.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string

	dir    string
	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	serial int64
}

// newPKI makes a CA and its first two certificates, with their files in
// dir (one PKI per directory).
func newPKI(t *testing.T, dir string) *pki {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tollgate test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	p := &pki{ca: filepath.Join(dir, "ca.pem"), dir: dir, caCert: caCert, caKey: caKey, serial: 1}
	writePEM(t, p.ca, "CERTIFICATE", caDER)
	p.serverCert, p.serverKey = p.issue(t, "server", x509.ExtKeyUsageServerAuth, []string{"127.0.0.1"})
	p.clientCert, p.clientKey = p.issue(t, "client", x509.ExtKeyUsageClientAuth, []string{"127.0.0.1"})
	return p
}

// issue makes a certificate signed by the CA, valid for exactly the IP
// addresses ips and the DNS names dnsNames, and returns the paths of its
// certificate and key (name.pem, name-key.pem in the PKI's directory).
func (p *pki) issue(t *testing.T, name string, usage x509.ExtKeyUsage, ips []string, dnsNames ...string) (certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(p.serial), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		DNSNames: dnsNames,
	}
	for _, ip := range ips {
		tmpl.IPAddresses = append(tmpl.IPAddresses, net.ParseIP(ip))
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, &key.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPath, keyPath = filepath.Join(p.dir, name+".pem"), filepath.Join(p.dir, name+"-key.pem")
	writePEM(t, certPath, "CERTIFICATE", der)
	writePEM(t, keyPath, "EC PRIVATE KEY", keyDER)
	return certPath, keyPath
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// clientConfig is the TLS config the test helpers use to talk to Redis.
func (p *pki) clientConfig(t *testing.T) *tls.Config {
	t.Helper()
	caPEM, err := os.ReadFile(p.ca)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cert, err := tls.LoadX509KeyPair(p.clientCert, p.clientKey)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, ServerName: "127.0.0.1"}
}

func redisString(v interface{}, err error) (string, error) {
	if err != nil {
		return "", err
	}
	switch s := v.(type) {
	case []byte:
		return string(s), nil
	case string:
		return s, nil
	}
	return "", fmt.Errorf("not a string: %v", v)
}

func regexpMatch(pattern, s string) bool { return regexp.MustCompile(pattern).MatchString(s) }
