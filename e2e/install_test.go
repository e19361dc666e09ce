package e2e

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func TestCopyPlugin(t *testing.T) {
	// What Yaegi needs to load the plugin from a GOPATH (the root package,
	// every package under internal/, vendor/, the manifest) and nothing
	// else: no tests, no e2e module, no testdata, no scripts.
	src := t.TempDir()
	files := []string{
		".traefik.yml", "go.mod", "go.sum", "plugin.go", "plugin_test.go", "README.md", "Makefile",
		"internal/redis/pool.go", "internal/redis/pool_test.go", "internal/redis/testdata/x.go",
		"internal/regions/shares/model.go", "internal/regions/shares/README.md", "internal/_old/a.go",
		"vendor/modules.txt", "vendor/github.com/gomodule/redigo/redis/redis.go", "vendor/github.com/gomodule/redigo/LICENSE",
		"e2e/go.mod", "e2e/loader.go", "scripts/yaegi-test.sh", "testdata/a.go", "bench/results.md", "patches/a.patch",
	}
	for _, f := range files {
		p := filepath.Join(src, filepath.FromSlash(f))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dst := filepath.Join(t.TempDir(), "src", "github.com", "tollgate-dev", "tollgate")
	if err := CopyPlugin(src, dst); err != nil {
		t.Fatal(err)
	}
	var got []string
	err := filepath.Walk(dst, func(path string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dst, path)
		got = append(got, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		".traefik.yml", "go.mod", "go.sum", "internal/redis/pool.go", "internal/regions/shares/model.go", "plugin.go",
		"vendor/github.com/gomodule/redigo/LICENSE", "vendor/github.com/gomodule/redigo/redis/redis.go", "vendor/modules.txt",
	}
	sort.Strings(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("copied:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
