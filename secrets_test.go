package tollgate

import (
	"os"
	"strings"
	"testing"
)

// TestTLSEnabledUsesTheSystemRoots: tls.enabled alone turns TLS on, the
// server verified against the system's roots (no ca, no way around the
// verification).
func TestTLSEnabledUsesTheSystemRoots(t *testing.T) {
	cfg := CreateConfig()
	cfg.Average = 1
	cfg.Redis.Endpoints = []string{"redis.example:6380"}
	cfg.Redis.TLS.Enabled = true
	s, err := Compile(cfg, "api")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Redis.UseTLS {
		t.Fatal("tls.enabled: TLS off")
	}
	conf, err := tlsConfig(s.Redis)
	if err != nil {
		t.Fatal(err)
	}
	if conf.RootCAs != nil || conf.InsecureSkipVerify || conf.ServerName != "redis.example" {
		t.Fatalf("roots %v, insecure %t, server name %q; want the system's roots, verified, redis.example", conf.RootCAs, conf.InsecureSkipVerify, conf.ServerName)
	}
}

// TestConfigFilesAreBounded: a file the dynamic configuration names is
// read up to its bound, never further.
func TestConfigFilesAreBounded(t *testing.T) {
	path := t.TempDir() + "/big.pem"
	if err := os.WriteFile(path, []byte(strings.Repeat("x", maxPEMFile+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := readConfigFile("redis.tls.ca", path, maxPEMFile)
	if err == nil || !strings.Contains(err.Error(), "is larger than") {
		t.Fatalf("a file over the bound: %v, want refused", err)
	}
}
