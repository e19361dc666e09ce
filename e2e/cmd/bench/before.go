package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/e2e"
)

// The -before route: Tollgate's source at another revision of this
// repository, loaded as a third local plugin of the same Traefik under
// another module path, so that every run measures Tollgate now and then,
// interleaved, on the same machine at the same time.

// beforeModule is the module path the earlier revision is loaded under
// (its package is still named tollgate: the manifest's basePkg says so).
const beforeModule = "github.com/tollgate-dev/tollgatebefore"

// beforePlugin is its name in Traefik's configuration.
const beforePlugin = "tollgatebefore"

const beforeManifest = `displayName: Tollgate (earlier revision)
type: middleware
import: github.com/tollgate-dev/tollgatebefore
basePkg: tollgate
summary: Tollgate at an earlier revision, the bench's before.
testData:
  average: 100
  period: 1s
  burst: 100
`

// shortRev resolves rev to its commit's short hash in the repository at
// root.
func shortRev(root, rev string) (string, error) {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", rev+"^{commit}").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("git rev-parse %s: %v: %s", rev, err, bytes.TrimSpace(out))
	}
	return strings.TrimSpace(string(out)), nil
}

// installBefore writes the plugin at rev (root's history) where Traefik's
// local mode wants beforeModule: the tree from git archive, the files
// Traefik loads kept (e2e.CopyPlugin), the module path rewritten, and a
// manifest of its own.
func installBefore(dir, root, rev string) error {
	src := filepath.Join(dir, "before-src")
	defer os.RemoveAll(src)
	if err := extractRev(root, rev, src); err != nil {
		return err
	}
	dst := filepath.Join(dir, "plugins-local", "src", filepath.FromSlash(beforeModule))
	if err := e2e.CopyPlugin(src, dst); err != nil {
		return err
	}
	if err := rewriteModule(dst, e2e.ModuleName, beforeModule); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, ".traefik.yml"), []byte(beforeManifest), 0o644)
}

// extractRev writes the tree of rev in the repository at root to dst
// (git archive's regular files and directories).
func extractRev(root, rev, dst string) error {
	cmd := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	err = untar(tar.NewReader(out), dst)
	_, _ = io.Copy(io.Discard, out)
	if werr := cmd.Wait(); werr != nil {
		return fmt.Errorf("git archive %s: %v: %s", rev, werr, bytes.TrimSpace(stderr.Bytes()))
	}
	return err
}

func untar(tr *tar.Reader, dst string) error {
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if !filepath.IsLocal(h.Name) {
			return fmt.Errorf("archive entry %q outside the tree", h.Name)
		}
		path := filepath.Join(dst, h.Name)
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(path, 0o755)
		case tar.TypeReg:
			err = writeFrom(tr, path)
		}
		if err != nil {
			return err
		}
	}
}

func writeFrom(r io.Reader, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// rewriteModule moves the module at dir from one path to another: go.mod's
// module line and, in every .go file but vendor/'s, the imports of from and
// of the packages under it. Vendored sources, and paths that only start
// like from (from-extra), stay as they are.
func rewriteModule(dir, from, to string) error {
	return filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = filepath.ToSlash(rel)
		if info.IsDir() {
			if rel == "vendor" {
				return filepath.SkipDir
			}
			return nil
		}
		var rewrite func([]byte, string, string) ([]byte, error)
		switch {
		case rel == "go.mod":
			rewrite = rewriteGoMod
		case strings.HasSuffix(rel, ".go"):
			rewrite = rewriteImports
		default:
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if b, err = rewrite(b, from, to); err != nil {
			return fmt.Errorf("%s: %v", rel, err)
		}
		return os.WriteFile(path, b, info.Mode())
	})
}

// rewriteGoMod changes go.mod's module line from from to to.
func rewriteGoMod(src []byte, from, to string) ([]byte, error) {
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "module" && strings.Trim(f[1], `"`) == from {
			lines[i] = "module " + to
			return []byte(strings.Join(lines, "\n")), nil
		}
	}
	return nil, fmt.Errorf("no module line for %s", from)
}

// rewriteImports replaces, in a Go source, the import paths from and
// from/... with to and to/..., byte for byte in place (the rest of the
// file, comments and layout, unchanged).
func rewriteImports(src []byte, from, to string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "", src, parser.ImportsOnly|parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []byte
	last := 0
	for _, imp := range f.Imports { // in source order
		p, err := strconv.Unquote(imp.Path.Value)
		if err != nil || p != from && !strings.HasPrefix(p, from+"/") {
			continue
		}
		off := fset.Position(imp.Path.Pos()).Offset
		out = append(out, src[last:off]...)
		out = append(out, strconv.Quote(to+strings.TrimPrefix(p, from))...)
		last = off + len(imp.Path.Value)
	}
	return append(out, src[last:]...), nil
}
