package tollgate

import (
	"testing"

	"github.com/tollgate-dev/tollgate/internal/config"
)

// TestTLSEnabledUsesTheSystemRoots: tls.enabled alone turns TLS on, the
// server verified against the system's roots (no ca, no way around the
// verification).
func TestTLSEnabledUsesTheSystemRoots(t *testing.T) {
	cfg := CreateConfig()
	cfg.Average = 1
	cfg.Redis.Endpoints = []string{"redis.example:6380"}
	cfg.Redis.TLS.Enabled = true
	s, err := config.Compile(cfg, "api")
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
