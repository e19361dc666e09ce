package main

import (
	_ "embed"
	"os"
	"path/filepath"
)

// minimalModule is the reference limiter's module (minimal/), a second
// local plugin of the same Traefik.
const minimalModule = "github.com/tollgate-dev/minimal"

//go:embed minimal/minimal.go
var minimalSource []byte

const minimalManifest = `displayName: Minimal
type: middleware
import: github.com/tollgate-dev/minimal
summary: The smallest one-round-trip Redis rate limiter, the bench's reference.
testData:
  average: 100
  period: 1s
  burst: 100
  redis: 127.0.0.1:6379
`

// installMinimal writes the reference limiter where Traefik's local mode
// wants it, dir/plugins-local/src/<module>/.
func installMinimal(dir string) error {
	dst := filepath.Join(dir, "plugins-local", "src", filepath.FromSlash(minimalModule))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	files := map[string][]byte{
		".traefik.yml": []byte(minimalManifest),
		"go.mod":       []byte("module " + minimalModule + "\n\ngo 1.22\n"),
		"minimal.go":   minimalSource,
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// pluginsStatic adds the reference limiter to Traefik's local plugins, next
// to Tollgate, and with before the earlier revision (StartFleetWith merges
// it into the static configuration).
func pluginsStatic(before bool) map[string]interface{} {
	local := map[string]interface{}{"minimal": map[string]interface{}{"moduleName": minimalModule}}
	if before {
		local[beforePlugin] = map[string]interface{}{"moduleName": beforeModule}
	}
	return map[string]interface{}{"experimental": map[string]interface{}{"localPlugins": local}}
}
