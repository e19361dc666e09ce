package main

import (
	"testing"

	"github.com/tollgate-dev/tollgate/e2e"
)

// TestProbesLoad installs the probes into today's plugin, as costprobe
// does, and imports it under Yaegi: a probe that names what the plugin no
// longer has fails here, not in the middle of a benchmark.
func TestProbesLoad(t *testing.T) {
	for _, core := range []bool{true, false} {
		i, err := installProbes(e2e.RepoRoot(), t.TempDir(), core)
		if err != nil {
			t.Fatalf("core %t: %v", core, err)
		}
		for _, name := range []string{"tollgate.ProbeSetup", "tollgate.ProbeServeHTTP"} {
			if _, err := i.Eval(name); err != nil {
				t.Errorf("core %t: %s: %v", core, name, err)
			}
		}
	}
}
