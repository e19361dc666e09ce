package tollgate_test

// The documentation's promises about itself: the README stays short, the
// file names the docs and the Go comments cite are files of the
// repository, and the package map in docs/architecture.md names packages
// and files that exist. Standard library only, and nothing Yaegi v0.16.1
// lacks (no generics, no min/max/clear, no range over an integer): these
// tests run under `yaegi test` too. They read the repository from the
// working directory, which `go test` and `yaegi test` set to the root
// package's directory, the repository's root.

import (
	"go/scanner"
	"go/token"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// readmeMaxLines is the README's budget: what Tollgate is, the two set-up
// commands, a minimal configuration, the options most people set, and
// links to docs/ for the rest.
const readmeMaxLines = 400

func TestReadmeShort(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	n := strings.Count(string(b), "\n")
	if len(b) > 0 && b[len(b)-1] != '\n' {
		n++
	}
	if n > readmeMaxLines {
		t.Errorf("README.md has %d lines, want at most %d: move the detail to docs/ and link it", n, readmeMaxLines)
	}
}

// notOurs are file names cited on purpose that are not files of this
// repository: the user's own configuration files in examples, and files of
// the projects Tollgate runs in. Keep this list short: a name belongs here
// only when it can never be a file of ours.
var notOurs = map[string]bool{
	"prometheus.yml":                 true, // Prometheus's own configuration, in the scrape example (docs/metrics.md)
	"traefik.yml":                    true, // Traefik's static configuration file
	"dynamic.yml":                    true, // a file provider's dynamic configuration
	"docker-compose.yml":             true, // a user's Compose file
	"interp/run.go":                  true, // Yaegi's, patched for a measurement (docs/perf-history.md)
	"pkg/plugins/middlewareyaegi.go": true, // Traefik's plugin loader, which e2e/loader.go mirrors
}

// fileNameRE matches what looks like the name of a repository file: a
// path of letters, digits and ._-/* ending in one of the extensions the
// repository's files have. A * makes it a pattern (fleet_*_test.go).
var fileNameRE = regexp.MustCompile(`[A-Za-z0-9_.*/-]*[A-Za-z0-9_*-]\.(?:go|md|yml|yaml|sh|lua|toml)\b`)

// urlRE matches a URL, whose path names files of other sites.
var urlRE = regexp.MustCompile("[a-z][a-z0-9+.-]*://[^\\s)>\\]\"'`]*")

// repoFiles is the repository's files (outside .git, vendor/ and .build/),
// by path relative to the root (slash-separated) and by base name.
type repoFiles struct {
	paths map[string]bool // files and directories
	bases map[string]bool // base names of files
	list  []string        // file paths, for patterns
}

func loadRepoFiles(t *testing.T) *repoFiles {
	t.Helper()
	r := &repoFiles{paths: map[string]bool{}, bases: map[string]bool{}}
	err := filepath.Walk(".", func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel := filepath.ToSlash(p)
		if info.IsDir() {
			if rel == ".git" || rel == "vendor" || rel == ".build" {
				return filepath.SkipDir
			}
			r.paths[rel] = true
			return nil
		}
		r.paths[rel] = true
		r.bases[path.Base(rel)] = true
		r.list = append(r.list, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// existsFrom reports whether the path name (relative, slash-separated)
// names a file or directory of the repository when read from dir or from
// any directory above it up to the root: from the citing file's
// directory, from the root, or from a module root in between (a comment
// in e2e/cmd/bench cites ../bench/results.md as a command run in e2e/
// reads it).
func (r *repoFiles) existsFrom(dir, name string) bool {
	for {
		p := path.Clean(path.Join(dir, name))
		if !strings.HasPrefix(p, "../") && p != ".." {
			if strings.Contains(p, "*") {
				for _, f := range r.list {
					if ok, _ := path.Match(p, f); ok {
						return true
					}
				}
			} else if r.paths[p] || strings.HasPrefix(p, "vendor/") && r.vendored(p) {
				return true
			}
		}
		if dir == "." || dir == "" {
			return false
		}
		dir = path.Dir(dir)
	}
}

// vendored reports whether p exists under vendor/, which the walk skips
// (a path spelled out under vendor/ is still a repository file).
func (r *repoFiles) vendored(p string) bool {
	_, err := os.Stat(filepath.FromSlash(p))
	return err == nil
}

// hasBase reports whether a file with base name (or base pattern) name
// exists anywhere outside vendor/.
func (r *repoFiles) hasBase(name string) bool {
	if !strings.Contains(name, "*") {
		return r.bases[name]
	}
	for b := range r.bases {
		if ok, _ := path.Match(name, b); ok {
			return true
		}
	}
	return false
}

// resolves reports whether name, cited in a file of directory dir, is a
// repository file.
func (r *repoFiles) resolves(dir, name string) bool {
	name = strings.TrimPrefix(name, "./")
	if !strings.Contains(name, "/") {
		return r.hasBase(name)
	}
	return r.existsFrom(dir, name)
}

// missingNames returns the file names cited in text (one line of a
// document or a comment) that are not repository files.
func missingNames(r *repoFiles, dir, text string) []string {
	text = urlRE.ReplaceAllString(text, " ")
	var out []string
	for _, m := range fileNameRE.FindAllStringIndex(text, -1) {
		name := text[m[0]:m[1]]
		if trimmed := strings.TrimLeft(name, "*"); trimmed != name {
			if strings.HasPrefix(trimmed, "_") || strings.HasPrefix(trimmed, ".") {
				continue // a suffix pattern: *_test.go, *.go
			}
			name = trimmed // markdown emphasis: *plugin.go*
		}
		if m[0] > 0 && strings.IndexByte("~$<>{}", text[m[0]-1]) >= 0 {
			continue // a path under a variable or a placeholder: <checkout>/plugin.go
		}
		if strings.HasPrefix(name, "/") {
			continue // an absolute path (/etc/, /run/, /var/): the host's, not ours
		}
		if strings.HasPrefix(name, ".") && !strings.HasPrefix(name, "./") && !strings.HasPrefix(name, "../") && !r.bases[name] {
			continue // a suffix, as in "every .go file"
		}
		if notOurs[name] {
			continue
		}
		if p := path.Clean(path.Join(dir, name)); p == ".." || strings.HasPrefix(p, "../") {
			continue // outside the repository: ../shared/STYLE.md
		}
		if !r.resolves(dir, name) {
			out = append(out, name)
		}
	}
	return out
}

// goComments calls fn with each line of each comment of the Go file src,
// and its line number.
func goComments(name string, src []byte, fn func(line int, text string)) {
	fset := token.NewFileSet()
	file := fset.AddFile(name, fset.Base(), len(src))
	var s scanner.Scanner
	s.Init(file, src, nil, scanner.ScanComments)
	for {
		pos, tok, lit := s.Scan()
		if tok == token.EOF {
			return
		}
		if tok != token.COMMENT {
			continue
		}
		line := fset.Position(pos).Line
		for i, l := range strings.Split(lit, "\n") {
			fn(line+i, l)
		}
	}
}

// TestDocsNameRealFiles: every file name that README.md, BENCHMARKS.md,
// the docs/ pages and the comments of the repository's Go files cite
// (plugin.go, docs/regions.md, scripts/traefik.sh) is a file of the
// repository: the path from the citing file's directory or from one above
// it (the root included), or, for a bare name, a file of that name
// anywhere outside vendor/. Not checked: URLs, absolute paths (the host's:
// /etc/, /run/secrets/), paths that leave the repository, and the names
// in notOurs. A file renamed or split leaves no reader at a dead name.
func TestDocsNameRealFiles(t *testing.T) {
	r := loadRepoFiles(t)
	t.Run("markdown", func(t *testing.T) {
		docs := []string{"README.md", "BENCHMARKS.md"}
		more, err := filepath.Glob(filepath.Join("docs", "*.md"))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range more {
			docs = append(docs, filepath.ToSlash(p))
		}
		var bad []string
		for _, doc := range docs {
			b, err := os.ReadFile(filepath.FromSlash(doc))
			if err != nil {
				t.Fatal(err)
			}
			for i, line := range strings.Split(string(b), "\n") {
				for _, name := range missingNames(r, path.Dir(doc), line) {
					bad = append(bad, doc+":"+strconv.Itoa(i+1)+": "+name)
				}
			}
		}
		report(t, bad)
	})
	t.Run("go comments", func(t *testing.T) {
		var bad []string
		for _, f := range r.list {
			if !strings.HasSuffix(f, ".go") {
				continue
			}
			src, err := os.ReadFile(filepath.FromSlash(f))
			if err != nil {
				t.Fatal(err)
			}
			dir := path.Dir(f)
			goComments(f, src, func(line int, text string) {
				for _, name := range missingNames(r, dir, text) {
					bad = append(bad, f+":"+strconv.Itoa(line)+": "+name)
				}
			})
		}
		report(t, bad)
	})
}

// report fails the test with every missing name, each where it is cited.
func report(t *testing.T, bad []string) {
	t.Helper()
	if len(bad) == 0 {
		return
	}
	sort.Strings(bad)
	t.Errorf("%d citations of files that are not in the repository (file:line: name):\n\t%s",
		len(bad), strings.Join(bad, "\n\t"))
}

// codeSpanRE matches a markdown code span.
var codeSpanRE = regexp.MustCompile("`([^`]+)`")

// TestArchitectureMapExists: the package map in docs/architecture.md is
// true. Every internal/... path it names exists, and every Go file it
// names exists: a bare name at the root, or in a directory named on the
// same line (a row of the map: `internal/redis/` and its `client.go`).
func TestArchitectureMapExists(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	r := loadRepoFiles(t)
	var bad []string
	for i, line := range strings.Split(string(b), "\n") {
		var dirs, names []string
		for _, m := range codeSpanRE.FindAllStringSubmatch(line, -1) {
			for _, word := range strings.Fields(m[1]) {
				word = strings.Trim(word, ",;:()'")
				switch {
				case strings.HasPrefix(word, "internal/"):
					p := strings.TrimSuffix(word, "/")
					if !r.paths[p] {
						bad = append(bad, "docs/architecture.md:"+strconv.Itoa(i+1)+": "+word+" does not exist")
						continue
					}
					dirs = append(dirs, p)
				case strings.HasSuffix(word, "/") && r.paths[strings.TrimSuffix(word, "/")]:
					dirs = append(dirs, strings.TrimSuffix(word, "/"))
				case strings.HasSuffix(word, ".go"):
					names = append(names, word)
				}
			}
		}
		for _, name := range names {
			if !goFileIn(r, name, dirs) {
				bad = append(bad, "docs/architecture.md:"+strconv.Itoa(i+1)+": "+name+" does not exist")
			}
		}
	}
	if len(bad) > 0 {
		t.Errorf("the package map names what is not there:\n\t%s", strings.Join(bad, "\n\t"))
	}
}

// goFileIn reports whether the Go file name (a path from the root, or a
// bare name or pattern) exists at the root or in one of dirs.
func goFileIn(r *repoFiles, name string, dirs []string) bool {
	if strings.Contains(name, "/") {
		return r.existsFrom(".", name) || r.vendored(name)
	}
	for _, d := range append([]string{"."}, dirs...) {
		p := path.Join(d, name)
		if !strings.Contains(name, "*") {
			if r.paths[p] {
				return true
			}
			continue
		}
		for _, f := range r.list {
			if ok, _ := path.Match(p, f); ok {
				return true
			}
		}
	}
	return false
}
