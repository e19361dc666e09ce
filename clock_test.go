package tollgate

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"

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
// (TestRegionClockSteps).
func TestDurationsUseTheMonotonicClock(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"heartbeat.go:newInstanceID": true, "exchange.go:loop": true, "exchange.go:sleepUntil": true}
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				sel, ok := n.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				switch sel.Sel.Name {
				case "Unix", "UnixNano", "UnixMicro", "UnixMilli":
					// Calendar quotas' windows are the wall clock's by
					// nature (the script picks one on Redis's TIME).
					if !allowed[name+":"+fn.Name.Name] && name != "quota.go" && name != "quota_window.go" {
						t.Errorf("%s: %s reads the wall clock (%s): measure durations on the clock.Mono clock (clock.go)", fset.Position(sel.Pos()), fn.Name.Name, sel.Sel.Name)
					}
				}
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
