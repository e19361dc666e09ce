package config

import (
	"os"
	"strings"
	"testing"
)

// TestConfigFilesAreBounded: a file the dynamic configuration names is
// read up to its bound, never further.
func TestConfigFilesAreBounded(t *testing.T) {
	path := t.TempDir() + "/big.pem"
	if err := os.WriteFile(path, []byte(strings.Repeat("x", MaxPEMFile+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := ReadConfigFile("redis.tls.ca", path, MaxPEMFile)
	if err == nil || !strings.Contains(err.Error(), "is larger than") {
		t.Fatalf("a file over the bound: %v, want refused", err)
	}
}
