package tollgate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/metrics"
	"github.com/tollgate-dev/tollgate/internal/redis"
)

// TestDurationsUseTheMonotonicClock reads the package's source: no
// duration the plugin measures itself may come from the wall clock (a
// wall clock stepped back an hour would keep a breaker open or a refusal
// cached for that hour), so nothing but an instance id and the region
// exchange's schedule read Unix time. The exchange aligns its rounds on
// the wall clock's interval boundaries, so that the pods and regions that
// share nothing else keep one rhythm; each sleep is bounded by two
// intervals, and a clock stepped either way only skews a round
// (TestRegionClockSteps). An override's expiry is shown as a date
// (admin.go's expiresAt; measured on Redis's TIME).
func TestDurationsUseTheMonotonicClock(t *testing.T) {
	allowed := map[string]bool{"heartbeat.go:newInstanceID": true, "admin.go:expiresAt": true, "exchange.go:loop": true, "exchange.go:sleepUntil": true}
	var names []string
	for _, dir := range []string{".", "internal/bucket", "internal/config"} {
		names = append(names, sourceFiles(t, dir)...)
	}
	eachFuncNode(t, names, func(fset *token.FileSet, name string, fn *ast.FuncDecl, n ast.Node) {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return
		}
		switch sel.Sel.Name {
		case "Unix", "UnixNano", "UnixMicro", "UnixMilli":
			// Calendar quotas' windows are the wall clock's by
			// nature (the script picks one on Redis's TIME).
			if !allowed[name+":"+fn.Name.Name] && name != "quota.go" && name != "internal/bucket/window.go" {
				t.Errorf("%s: %s reads the wall clock (%s): measure durations on the clock.Mono clock (clock.go)", fset.Position(sel.Pos()), fn.Name.Name, sel.Sel.Name)
			}
		}
	})
}

// sourceFiles returns the paths of dir's non-test .go files ("." for the
// root: bare names).
func sourceFiles(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if n := e.Name(); strings.HasSuffix(n, ".go") && !strings.HasSuffix(n, "_test.go") {
			out = append(out, strings.TrimPrefix(dir+"/"+n, "./"))
		}
	}
	return out
}

// eachFuncNode parses the files at paths and calls f with every node of
// every function body, the file's path and the function.
func eachFuncNode(t *testing.T, paths []string, f func(fset *token.FileSet, path string, fn *ast.FuncDecl, n ast.Node)) {
	fset := token.NewFileSet()
	for _, path := range paths {
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				f(fset, path, fn, n)
				return true
			})
		}
	}
}

func TestReaderHoldsTheLongestDecision(t *testing.T) {
	if maxDecisionLine > redis.MaxLine {
		t.Fatalf("the longest decision (%d bytes) does not fit the reply reader (%d)", maxDecisionLine, redis.MaxLine)
	}
}

// TestDecidedMatchesMetrics: the request path's decided* constants are
// the metrics' decision indexes (a request is counted under the way it was
// decided), written out so that the path reads no other package's
// constant; decidedAnswered is one past them.
func TestDecidedMatchesMetrics(t *testing.T) {
	for _, tc := range []struct {
		desc      string
		got, want int
	}{
		{"redis", decidedRedis, metrics.ByRedis},
		{"local", decidedLocal, metrics.ByLocal},
		{"lease", decidedLease, metrics.ByLease},
		{"unavailable", decidedUnavailable, metrics.ByUnavailable},
		{"cache", decidedCache, metrics.ByCache},
		{"answered", decidedAnswered, metrics.NDecisions},
	} {
		if tc.got != tc.want {
			t.Errorf("decided %s = %d, the metrics' index is %d", tc.desc, tc.got, tc.want)
		}
	}
}

// requestFiles are the files of the request's path: their functions run
// per request.
var requestFiles = []string{"serve.go", "decide.go", "answer.go", "denycache.go", "headers.go", "fallback.go", "lease.go", "caps.go", "costs.go", "quota.go", "source.go", "bucket.go", "plugin.go", "policyset.go", "backend.go", "localbuckets.go"}

// TestRequestPathReadsItsOwn reads the request path's source: it reads no
// other package's constant (the root keeps its own copies in hotpath.go,
// each defined as its original), and no clock but
// the injected monotonic one
// (processStart and monoOrigin, or a component's now) and the quotas'
// wall clock (quotaNow).
func TestRequestPathReadsItsOwn(t *testing.T) {
	consts := map[string]map[string]bool{} // package name -> its constants
	for _, pkg := range []string{"bucket", "config", "metrics", "redis", "regions", "clock", "usage"} {
		consts[pkg] = map[string]bool{}
		for _, path := range sourceFiles(t, "internal/"+pkg) {
			f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
					for _, s := range g.Specs {
						for _, n := range s.(*ast.ValueSpec).Names {
							consts[pkg][n.Name] = true
						}
					}
				}
			}
		}
	}
	eachFuncNode(t, requestFiles, func(fset *token.FileSet, name string, fn *ast.FuncDecl, n ast.Node) {
		switch x := n.(type) {
		case *ast.SelectorExpr:
			pkg, ok := x.X.(*ast.Ident)
			if !ok {
				return
			}
			if consts[pkg.Name][x.Sel.Name] {
				t.Errorf("%s: %s reads %s.%s per request: read the root's copy (hotpath.go)", fset.Position(x.Pos()), fn.Name.Name, pkg.Name, x.Sel.Name)
			}
			if pkg.Name == "time" && x.Sel.Name == "Now" && name != "quota.go" {
				t.Errorf("%s: %s reads the wall clock: read the injected clock (processStart + monoOrigin, or the component's now)", fset.Position(x.Pos()), fn.Name.Name)
			}
		case *ast.CallExpr:
			if sel, ok := x.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Since" && len(x.Args) == 1 {
				if id, ok := x.Args[0].(*ast.Ident); !ok || id.Name != "processStart" {
					t.Errorf("%s: %s measures time from another start than processStart", fset.Position(x.Pos()), fn.Name.Name)
				}
			}
		}
	})
}
