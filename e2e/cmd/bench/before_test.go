package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/e2e"
)

const (
	oldMod = "github.com/tollgate-dev/tollgate"
	newMod = "github.com/tollgate-dev/tollgatebefore"
)

// A module laid out as the plugin: the root package, a package under
// internal/ that imports another, and vendor/.
var moduleFiles = map[string]string{
	"go.mod": "module github.com/tollgate-dev/tollgate\n\ngo 1.22\n\nrequire github.com/gomodule/redigo v1.9.3\n",
	"plugin.go": `package tollgate

import (
	"net/http"

	// The Redis client.
	"github.com/gomodule/redigo/redis"
	"github.com/tollgate-dev/tollgate-extra/x"
	rd "github.com/tollgate-dev/tollgate/internal/redis"
)

const home = "github.com/tollgate-dev/tollgate/internal/redis"
`,
	"internal/redis/conn.go":                          "package redis\n\nimport \"github.com/tollgate-dev/tollgate/internal/regions\"\n",
	"vendor/github.com/gomodule/redigo/redis/conn.go": "package redis\n\nimport \"github.com/tollgate-dev/tollgate/internal/regions\"\n",
}

var rewritten = map[string]string{
	"go.mod": "module github.com/tollgate-dev/tollgatebefore\n\ngo 1.22\n\nrequire github.com/gomodule/redigo v1.9.3\n",
	"plugin.go": `package tollgate

import (
	"net/http"

	// The Redis client.
	"github.com/gomodule/redigo/redis"
	"github.com/tollgate-dev/tollgate-extra/x"
	rd "github.com/tollgate-dev/tollgatebefore/internal/redis"
)

const home = "github.com/tollgate-dev/tollgate/internal/redis"
`,
	"internal/redis/conn.go": "package redis\n\nimport \"github.com/tollgate-dev/tollgatebefore/internal/regions\"\n",
	// Vendored sources are never the module's: left alone.
	"vendor/github.com/gomodule/redigo/redis/conn.go": moduleFiles["vendor/github.com/gomodule/redigo/redis/conn.go"],
}

// TestRewriteModule: the module line and the imports of the module's own
// packages move; third-party imports, look-alike paths, strings and
// vendor/ stay byte for byte.
func TestRewriteModule(t *testing.T) {
	dir := t.TempDir()
	for name, src := range moduleFiles {
		path := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := rewriteModule(dir, oldMod, newMod); err != nil {
		t.Fatal(err)
	}
	for name, want := range rewritten {
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s:\n%s\nwant:\n%s", name, got, want)
		}
	}
}

// TestInstallBefore installs this checkout's HEAD as the earlier revision:
// the manifest names the new module and the package, no source outside
// vendor/ imports the old path, and the root package imports the new one.
func TestInstallBefore(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	if _, err := shortRev(e2e.RepoRoot(), "HEAD"); err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	dir := t.TempDir()
	if err := installBefore(dir, e2e.RepoRoot(), "HEAD"); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "plugins-local", "src", filepath.FromSlash(newMod))
	manifest, err := os.ReadFile(filepath.Join(dst, ".traefik.yml"))
	if err != nil || !strings.Contains(string(manifest), "import: "+newMod+"\n") || !strings.Contains(string(manifest), "basePkg: tollgate\n") {
		t.Fatalf("manifest: %v\n%s", err, manifest)
	}
	newImports := 0
	err = filepath.Walk(dst, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.IsDir() && info.Name() == "vendor" {
			return filepath.SkipDir
		}
		if info.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if strings.Contains(string(b), `"`+oldMod+`/`) {
			t.Errorf("%s still imports %s", path, oldMod)
		}
		newImports += strings.Count(string(b), `"`+newMod+`/internal/`)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if newImports == 0 {
		t.Error("no source imports the module's internal packages under the new path")
	}
	if _, err := os.Stat(filepath.Join(dst, "vendor", "modules.txt")); err != nil {
		t.Errorf("vendor/ not installed: %v", err)
	}
}

// TestOrder: without -before every rep runs the routes as they are; with
// it, Tollgate and Tollgate before swap places in even reps.
func TestOrder(t *testing.T) {
	saved := append([]string(nil), routes...)
	defer func() { routes = saved; delete(labels, "before") }()
	for rep := 1; rep <= 2; rep++ {
		if got := order(rep); !reflect.DeepEqual(got, routes) {
			t.Errorf("rep %d, no -before: %v, want %v", rep, got, routes)
		}
	}
	enableBefore("abc1234")
	if got, want := order(1), []string{"none", "inmem", "redis", "tollgate", "before", "minimal", "empty"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rep 1: %v, want %v", got, want)
	}
	if got, want := order(2), []string{"none", "inmem", "redis", "before", "tollgate", "minimal", "empty"}; !reflect.DeepEqual(got, want) {
		t.Errorf("rep 2: %v, want %v", got, want)
	}
}
