package main

import (
	"math"
	"testing"
)

func TestTraceShares(t *testing.T) {
	// pprof -traces: a header, then blocks; labels before the stack; the
	// leaf first; inlined frames marked.
	traces := `File: traefik
Type: cpu
Duration: 3s, Total samples = 100ms (3.33%)
-----------+-------------------------------------------------------
      10ms   runtime.scanobject
             runtime.gcDrain
             runtime.gcBgMarkWorker.func2
             runtime.gcBgMarkWorker
-----------+-------------------------------------------------------
      20ms   runtime.nextFreeFast (inline)
             runtime.mallocgc
             net/http.(*conn).serve
-----------+-------------------------------------------------------
      10ms   runtime.(*gcWork).tryGet
             runtime.gcAssistAlloc1 (inline)
             runtime.mallocgc
-----------+-------------------------------------------------------
 worker:  a b
      60ms   syscall.Syscall
             net/http.(*conn).serve
-----------+-------------------------------------------------------
`
	gc, alloc, err := traceShares(traces)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(gc-0.2) > 1e-9 || math.Abs(alloc-0.2) > 1e-9 {
		t.Fatalf("gc %.3f, alloc %.3f; want 0.2, 0.2", gc, alloc)
	}
	if _, _, err := traceShares("File: traefik\n"); err == nil {
		t.Fatal("no samples: no error")
	}
}
