// Package catalog runs the plugin in Traefik's catalog form
// (experimental.plugins), through Traefik's own plugin code: the static
// configuration block and the dynamic configuration example from the
// README, decoded by paerser into Traefik's configuration types; Traefik's
// plugin Manager installing the plugin from an archive shaped like the one
// the catalog serves (a GitHub zipball of the tagged repository, internal/
// and vendor/ included); Traefik's Builder interpreting it with Yaegi. The catalog
// itself (plugins.traefik.io) is not reachable from the tests: a local
// PluginDownloader hands the Manager the archive instead.
package catalog

import (
	"archive/zip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/tollgate-dev/tollgate/e2e"
	"github.com/traefik/paerser/file"
	"github.com/traefik/traefik/v3/pkg/config/dynamic"
	"github.com/traefik/traefik/v3/pkg/config/static"
	"github.com/traefik/traefik/v3/pkg/plugins"
)

// readmeBlocks returns the README's fenced yaml blocks.
func readmeBlocks(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e2e.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// readmeBlock returns the first yaml block of the README containing all of
// the given strings.
func readmeBlock(t *testing.T, contains ...string) string {
	t.Helper()
next:
	for _, b := range readmeBlocks(t) {
		for _, c := range contains {
			if !strings.Contains(b, c) {
				continue next
			}
		}
		return b
	}
	t.Fatalf("no yaml block in the README contains %q", contains)
	return ""
}

// zipball writes what the catalog serves for a version: the repository's
// tracked files under one top folder, as GitHub's zipball of a tag (a
// package under internal/ not yet added to git is not in it).
func zipball(t *testing.T, path string) {
	t.Helper()
	root := e2e.RepoRoot()
	out, err := exec.Command("git", "-C", root, "ls-files").Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := zip.NewWriter(f)
	for _, name := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		b, err := os.ReadFile(filepath.Join(root, name))
		if os.IsNotExist(err) {
			continue // deleted in the work tree
		}
		if err != nil {
			t.Fatal(err)
		}
		zf, err := w.Create("tollgate-dev-tollgate-0123abc/" + name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := zf.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// downloader is a plugins.PluginDownloader that serves the zipball from
// disk, where Traefik's RegistryDownloader would fetch it from the catalog.
type downloader struct {
	archives, zipball string
}

func (d downloader) Download(_ context.Context, pName, pVersion string) (string, error) {
	b, err := os.ReadFile(d.zipball)
	if err != nil {
		return "", err
	}
	dst := filepath.Join(d.archives, filepath.FromSlash(pName), pVersion+".zip")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(dst, b, 0o644); err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

func (d downloader) Check(_ context.Context, _, _, hash string) error {
	b, err := os.ReadFile(d.zipball)
	if err != nil {
		return err
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hash {
		return fmt.Errorf("hash mismatch")
	}
	return nil
}

// pod is one Traefik process's plugin machinery: its own Manager, Builder
// and so its own Yaegi interpreter.
func pod(t *testing.T, descs map[string]plugins.Descriptor, ball string) *plugins.Builder {
	t.Helper()
	out := filepath.Join(t.TempDir(), "plugins-storage")
	m, err := plugins.NewManager(downloader{archives: filepath.Join(out, "archives"), zipball: ball}, plugins.ManagerOptions{Output: out})
	if err != nil {
		t.Fatal(err)
	}
	if err := plugins.SetupRemotePlugins(m, descs); err != nil {
		t.Fatal(err)
	}
	b, err := plugins.NewBuilder(m, descs, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestCatalogForm(t *testing.T) {
	// The README's static configuration, decoded as Traefik decodes it.
	var st static.Configuration
	if err := file.DecodeContent(readmeBlock(t, "experimental:", "plugins:", "version:"), ".yaml", &st); err != nil {
		t.Fatal(err)
	}
	if st.Experimental == nil || st.Experimental.Plugins["tollgate"].ModuleName != e2e.ModuleName {
		t.Fatalf("README catalog block: experimental.plugins.tollgate = %+v, want moduleName %s", st.Experimental, e2e.ModuleName)
	}
	desc := st.Experimental.Plugins["tollgate"]
	if !regexp.MustCompile(`^v\d+\.\d+\.\d+$`).MatchString(desc.Version) {
		t.Fatalf("README catalog block: version %q is not a release tag", desc.Version)
	}
	var local static.Configuration
	if err := file.DecodeContent(readmeBlock(t, "experimental:", "localPlugins:"), ".yaml", &local); err != nil {
		t.Fatal(err)
	}
	if local.Experimental == nil || local.Experimental.LocalPlugins["tollgate"].ModuleName != e2e.ModuleName {
		t.Fatalf("README local block: %+v", local.Experimental)
	}

	// The README's dynamic configuration, pointed at a real Redis.
	var dyn dynamic.Configuration
	if err := file.DecodeContent(readmeBlock(t, "http:", "plugin:", "tollgate:"), ".yaml", &dyn); err != nil {
		t.Fatal(err)
	}
	mw := dyn.HTTP.Middlewares["api-limit"]
	if mw == nil || mw.Plugin["tollgate"] == nil {
		t.Fatalf("README dynamic block has no api-limit tollgate middleware")
	}
	conf := map[string]interface{}(mw.Plugin["tollgate"])
	r, err := e2e.StartRedis(t.TempDir())
	if err != nil {
		if e2e.NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	defer r.Kill()
	conf["redis"] = map[string]interface{}{"endpoints": []interface{}{r.Addr}, "timeout": "1s"}

	ball := filepath.Join(t.TempDir(), "tollgate.zip")
	zipball(t, ball)
	descs := map[string]plugins.Descriptor{"tollgate": desc}
	next := http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) { _, _ = rw.Write([]byte("ok")) })
	var handlers []http.Handler
	for i := 0; i < 3; i++ {
		ctor, err := pod(t, descs, ball).Build("tollgate", conf, "api-limit@file")
		if err != nil {
			t.Fatal(err)
		}
		h, err := ctor(context.Background(), next)
		if err != nil {
			t.Fatal(err)
		}
		handlers = append(handlers, h)
	}

	// One budget across the three: burst 20 of 60 concurrent requests.
	codes := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := 0; i < 60; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			req := httptest.NewRequest("GET", "/", nil)
			req.Header.Set("X-API-Key", "catalog")
			rec := httptest.NewRecorder()
			handlers[i%3].ServeHTTP(rec, req)
			mu.Lock()
			codes[rec.Code]++
			mu.Unlock()
			// The README's example sets class: api, as its "What clients
			// see" section shows.
			if !strings.HasPrefix(rec.Header().Get("RateLimit-Policy"), `"api";q=100;w=60`) || rec.Header().Get("RateLimit") == "" {
				t.Errorf("response %d: RateLimit-Policy %q, RateLimit %q", rec.Code, rec.Header().Get("RateLimit-Policy"), rec.Header().Get("RateLimit"))
			}
			if rec.Code == 429 && (rec.Header().Get("Retry-After") == "" || rec.Header().Get("Content-Type") != "application/problem+json") {
				t.Errorf("429 headers %v", rec.Header())
			}
		}(i)
	}
	wg.Wait()
	if codes[200] != 20 || codes[429] != 40 {
		t.Fatalf("60 concurrent requests, README limits (burst 20) over 3 pods: %v", codes)
	}
	// The README's login rule fails closed: with Redis gone, 503.
	r.Kill()
	req := httptest.NewRequest("POST", "/login", nil)
	req.Header.Set("X-API-Key", "catalog")
	rec := httptest.NewRecorder()
	handlers[0].ServeHTTP(rec, req)
	if rec.Code != 503 {
		t.Fatalf("POST /login with Redis down: %d, want 503", rec.Code)
	}
	rec = httptest.NewRecorder()
	handlers[1].ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	if rec.Code != 200 {
		t.Fatalf("GET / with Redis down: %d, want 200 (fail-open)", rec.Code)
	}
}
