// Command costprobe shows where an interpreted check's time and
// allocations go: each stage of the hot path (the client key, the Redis
// exchange, decoding, the headers, the local fallback), run on its own
// under Yaegi, loaded the way Traefik loads the plugin, against a local
// redis-server. Beside them, a bare prepared EVALSHA in the same
// interpreter: the floor of one interpreted round trip.
//
//	go run ./cmd/costprobe [-n 20000]
//
// It copies the plugin's source (e2e.PluginRoot: this checkout, or
// TOLLGATE_PLUGIN_SRC) into a temporary GOPATH with the probes added as
// files of its package (coreSource, stagesSource); the plugin itself has no
// such hooks. -core runs the first-class figures only, which an older
// checkout also has.
package main

import (
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
	"github.com/traefik/yaegi/interp"
	"github.com/traefik/yaegi/stdlib"
)

var stages = []stage{
	{name: "ProbeServeHTTP", what: "ServeHTTP, admitted by Redis (everything)", core: true},
	{name: "ProbeDecide", what: "decide: key, deny cache, Redis check"},
	{name: "ProbeShared", what: "redisCheck, 32 at once on 2 connections (mostly pipelined)"},
	{name: "ProbeKey", what: "hashKey: the client key of a header identity"},
	{name: "ProbeRedisCheck", what: "redisCheck: breaker, pool, exchange"},
	{name: "ProbePoolCheck", what: "poolCheck: an idle connection, exchange"},
	{name: "ProbeExchange", what: "a check's call on one connection: write, wait for its reader, decode"},
	{name: "ProbeAppendCall", what: "appendCall: the prepared EVALSHA"},
	{name: "ProbeDecode", what: "decode: the reply line"},
	{name: "ProbeServeOpen", what: "ServeHTTP, breaker open: the local fallback (everything)", core: true},
	{name: "ProbeServeRefused", what: "ServeHTTP, refused from the deny cache (429, no Redis call)", core: true},
	{name: "ProbeServeQuota", what: "ServeHTTP, admitted by Redis, a rate and a monthly quota (one call)"},
	{name: "ProbeServeCapped", what: "ServeHTTP, admitted by Redis, a rate and a concurrency slot (taken in the rate's call, given back in a second when next returns)"},
	{name: "ProbeServeLukewarm", what: "ServeHTTP, admitted by Redis in a leasing middleware (a client too slow to lease)"},
	{name: "ProbeServeLeased", what: "ServeHTTP, admitted from the pod's lease (no Redis call)"},
	{name: "ProbeServeRegion", what: "ServeHTTP, admitted by Redis, in one of two regions (the share read in the script)"},
	{name: "ProbeDecideOpen", what: "decide, breaker open: key, breaker, fallback"},
	{name: "ProbeFallback", what: "fallback: the local bucket (no Redis)"},
	{name: "ProbeLocalTake", what: "localBuckets.take: one bucket"},
	{name: "ProbeTakeAll", what: "takeAll: the bucket math"},
	{name: "ProbeCount", what: "counting: a request, near the limit, one check in 64 timed"},
	{name: "ProbeLoop", what: "reference: the loop ProbeCount runs in"},
	{name: "ProbeBare", what: "reference: the bare prepared EVALSHA, written and its reply read", core: true},
	{name: "ProbeMinimal", what: "reference: a minimal one-round-trip middleware (key, connection stack, EVALSHA, status, two headers)", core: true},
}

func main() {
	n := flag.Int("n", 20000, "runs per stage")
	memStage := flag.String("memprofile-stage", "", "write an allocation profile of this stage (e.g. ProbeExchange) to -memprofile")
	memOut := flag.String("memprofile", "", "where -memprofile-stage's profile goes")
	only := flag.String("only", "", "run only the stages whose names contain one of these (comma-separated)")
	rounds := flag.Int("rounds", 3, "rounds over the stages (figures: median of the rounds)")
	core := flag.Bool("core", false, "only the first-class figures' probes (ServeHTTP on both paths, the bare exchange): for an older checkout")
	flag.Parse()
	lab, err := e2e.NewLab("costprobe")
	if err != nil {
		log.Fatal(err)
	}
	defer lab.Close()
	gp := filepath.Join(lab.Dir, "probe-gopath")
	i, err := installProbes(e2e.PluginRoot(), gp, *core)
	if err != nil {
		log.Fatal(err)
	}
	setup, err := i.Eval("tollgate.ProbeSetup")
	if err != nil {
		log.Fatal(err)
	}
	rw := &discard{h: http.Header{}}
	nop := http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})
	if err := setup.Interface().(func(string, http.ResponseWriter, http.Handler) error)(lab.Redis.Addr, rw, nop); err != nil {
		log.Fatal(err)
	}
	if !*core {
		v, err := i.Eval("tollgate.ProbeStagesSetup")
		if err != nil {
			log.Fatal(err)
		}
		if err := v.Interface().(func() error)(); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Printf("# Where an interpreted check goes (Yaegi, %s, %d CPUs; each stage %d runs, %d rounds interleaved, median [min–max])\n\n",
		runtime.Version(), runtime.NumCPU(), *n, *rounds)
	var run []stage
	for _, s := range stages {
		if matchesAny(s.name, *only) && (s.core || !*core) {
			v, err := i.Eval("tollgate." + s.name)
			if err != nil {
				log.Fatal(err)
			}
			s.f = v.Interface().(func(int))
			s.f(*n / 10) // warm up
			run = append(run, s)
		}
	}
	for r := 0; r < *rounds; r++ {
		for k := range run {
			s := &run[k]
			profile := r == 0 && s.name == *memStage
			if profile {
				runtime.MemProfileRate = 1
			}
			runtime.GC()
			var m0, m1 runtime.MemStats
			runtime.ReadMemStats(&m0)
			c0 := cpu()
			t0 := time.Now()
			s.f(*n)
			wall := time.Since(t0)
			c1 := cpu()
			runtime.ReadMemStats(&m1)
			if profile {
				writeMemProfile(*memOut)
				runtime.MemProfileRate = 0
			}
			s.wall = append(s.wall, float64(wall.Nanoseconds())/float64(*n)/1e3)
			s.cpu = append(s.cpu, float64(c1-c0)/float64(*n)/1e3)
			s.kb = append(s.kb, float64(m1.TotalAlloc-m0.TotalAlloc)/float64(*n)/1024)
		}
	}
	fmt.Println("| stage | wall µs | CPU µs (GC included) | allocated KB |")
	fmt.Println("|---|---|---|---|")
	byName := map[string]*stage{}
	for k := range run {
		s := &run[k]
		byName[s.name] = s
		fmt.Printf("| %s | %s | %s | %s |\n", s.what, spread(s.wall), spread(s.cpu), spread(s.kb))
	}
	bare := byName["ProbeBare"]
	fmt.Println()
	printWork("Interpreted plugin work per check, Redis path (ServeHTTP minus the bare EVALSHA write and read, same round)", byName["ProbeServeHTTP"], bare)
	printWork("Counting per admitted check (metrics; ProbeCount minus ProbeLoop)", byName["ProbeCount"], byName["ProbeLoop"])
	printWork("The minimal middleware's work per check, measured the same way", byName["ProbeMinimal"], bare)
	if open := byName["ProbeServeOpen"]; open != nil {
		fmt.Printf("Interpreted plugin work per check, fallback path (breaker open, local bucket): %s µs CPU, %s KB allocated\n",
			spread(open.cpu), spread(open.kb))
	}
}

// printWork prints what stage a costs beyond stage b, round by round (the
// same round's figures subtracted), when both ran.
func printWork(what string, a, b *stage) {
	if a == nil || b == nil {
		return
	}
	var cpu, kb []float64
	for r := range a.cpu {
		cpu = append(cpu, a.cpu[r]-b.cpu[r])
		kb = append(kb, a.kb[r]-b.kb[r])
	}
	fmt.Printf("%s: %s µs CPU, %s KB allocated\n", what, spread(cpu), spread(kb))
}

// stage is one Probe function and its figures, one per round.
type stage struct {
	name, what    string
	core          bool // in coreSource
	f             func(int)
	wall, cpu, kb []float64
}

// spread formats the median and range of v.
func spread(v []float64) string {
	c := append([]float64(nil), v...)
	sort.Float64s(c)
	return fmt.Sprintf("%.1f [%.1f–%.1f]", c[len(c)/2], c[0], c[len(c)-1])
}

// discard is a ResponseWriter that keeps its header map (the headers of
// every run overwrite the last run's) and drops the rest.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) WriteHeader(int)             {}

func writeMemProfile(path string) {
	f, err := os.Create(path)
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		log.Fatal(err)
	}
}

// cpu is the process's CPU time (user and system), ns.
func cpu() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		log.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// matchesAny reports whether name contains one of the comma-separated
// parts of list (any name, for an empty list).
func matchesAny(name, list string) bool {
	for _, part := range strings.Split(list, ",") {
		if strings.Contains(name, part) {
			return true
		}
	}
	return false
}

// installProbes copies the plugin at src into the GOPATH gp with the
// probes added (the layout's adapter: flat, packages, or configuration
// and protocol as packages; the stages unless core), and imports it into
// a new interpreter.
func installProbes(src, gp string, core bool) (*interp.Interpreter, error) {
	dst := filepath.Join(gp, "src", filepath.FromSlash(e2e.ModuleName))
	if err := e2e.CopyPlugin(src, dst); err != nil {
		return nil, err
	}
	layout := flatSource
	if _, err := os.Stat(filepath.Join(dst, "internal", "redis")); err == nil {
		layout = packagesSource
	}
	if _, err := os.Stat(filepath.Join(dst, "internal", "config")); err == nil {
		layout = configSource
	}
	files := map[string]string{"probe_core.go": coreSource, "probe_layout.go": layout}
	if !core {
		files["probe_stages.go"] = stagesSource
		files["probe_capped.go"] = cappedSource
		files[filepath.Join("internal", "redis", "probe_stages.go")] = stagesClientSource
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dst, name), []byte(src), 0o644); err != nil {
			return nil, err
		}
	}
	i := interp.New(interp.Options{GoPath: gp})
	if err := i.Use(stdlib.Symbols); err != nil {
		return nil, err
	}
	if _, err := i.Eval(fmt.Sprintf("import %q", e2e.ModuleName)); err != nil {
		return nil, fmt.Errorf("importing the plugin with its probes: %w", err)
	}
	return i, nil
}
