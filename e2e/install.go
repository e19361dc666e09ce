package e2e

import (
	"os"
	"path/filepath"
	"strings"
)

// InstallLocalPlugin copies the plugin as Traefik's local mode wants it:
// dir/plugins-local/src/<module>/ (see CopyPlugin). It is a copy, not a
// link, so that what Traefik loads is exactly what a user would install.
func InstallLocalPlugin(dir string) error {
	return CopyPlugin(PluginRoot(), filepath.Join(dir, "plugins-local", "src", filepath.FromSlash(ModuleName)))
}

// CopyPlugin copies the plugin's source at src to dst, as Yaegi loads it
// from a GOPATH: the manifest, go.mod and go.sum, the root package's
// non-test sources, those of every package under internal/ (at any depth),
// and vendor/. Tests, e2e/, scripts, testdata and the rest stay behind.
func CopyPlugin(src, dst string) error {
	return filepath.Walk(src, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if info.IsDir() {
			if !pluginDir(rel) {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !pluginFile(rel) {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
}

// pluginDir reports whether the directory rel (relative to the plugin's
// root) holds part of the plugin: the root, vendor/, and internal/ but for
// the folders the go tool ignores (testdata, names starting with . or _).
func pluginDir(rel string) bool {
	parts := strings.Split(filepath.ToSlash(rel), "/")
	switch parts[0] {
	case ".", "vendor":
		return true
	case "internal":
		for _, p := range parts[1:] {
			if p == "testdata" || strings.HasPrefix(p, ".") || strings.HasPrefix(p, "_") {
				return false
			}
		}
		return true
	}
	return false
}

// pluginFile reports whether the file rel, in a directory pluginDir keeps,
// is part of the plugin: anything in vendor/, else a non-test .go file, or
// at the root the manifest, go.mod and go.sum.
func pluginFile(rel string) bool {
	rel = filepath.ToSlash(rel)
	if strings.HasPrefix(rel, "vendor/") {
		return true
	}
	base := filepath.Base(rel)
	if rel == base && (base == ".traefik.yml" || base == "go.mod" || base == "go.sum") {
		return true
	}
	return strings.HasSuffix(base, ".go") && !strings.HasSuffix(base, "_test.go")
}
