// Command bench runs Traefik's own rate limiters, Tollgate and a minimal
// reference limiter side by side in one Traefik process (the binary
// scripts/traefik.sh builds), same backend, one router each:
//
//	/none      no middleware
//	/inmem     Traefik's rateLimit, in memory
//	/redis     Traefik's rateLimit with redis
//	/tollgate  Tollgate (interpreted by Traefik's Yaegi)
//	/leased    Tollgate with leases (lease: {max: 50}), on a Redis of its
//	           own; in the nothing-rejected saturation runs and the hot-key
//	           load only (hot.go)
//	/quota     Tollgate with a calendar quota (quotas: [{name: month,
//	           limit: 10^12, window: month}], nothing refused), on a Redis
//	           of its own; in the nothing-rejected saturation runs only
//	           (quota.go)
//	/capped    Tollgate with a concurrency cap (concurrency: {max: 10^6,
//	           key: client}, never full), on a Redis of its own; in the
//	           nothing-rejected saturation runs only (capped.go)
//	/minimal   the smallest limiter that makes one Redis round trip per
//	           request (minimal/, a second local plugin, interpreted too):
//	           what Tollgate costs above it is what its features cost
//	/empty     the empty interpreted middleware (minimal/ with empty: true),
//	           the floor of any interpreted plugin: a pass-through when
//	           nothing is rejected, a bare 429 for every request in the
//	           reject-most pass (no key, no Redis, no headers)
//	/before    with -before REV only: Tollgate's source at the git revision
//	           REV of this repository, a third local plugin under another
//	           module path (before.go), configured as /tollgate, on a Redis
//	           of its own; it and /tollgate swap places every other run
//	/refusetollgate, /refuseredis
//	           Tollgate and Traefik's rateLimit with Redis, configured as
//	           /tollgate and /redis but refusing almost all (rejectMost)
//	           whatever the pass, on a Redis of their own: the refusal
//	           rows of the independent harness's shape only (shape.go)
//	/ovr0, /ovr10k
//	           Tollgate configured as /tollgate, on the same Redis, but
//	           each in a class of its own (class: ovr0, class: ovr10k)
//	           that /tgadmin names, so that it syncs its per-key
//	           overrides: none in ovr0's, -overrides (10,000) of keys not
//	           in the load in ovr10k's, loaded into Redis before the runs;
//	           rows of the independent harness's shape only (overrides.go)
//	/tgadmin   the admin endpoint (serveAdmin: true, adminClasses: [ovr0,
//	           ovr10k]), which makes those classes sync
//	/plainjson, /headerjson, /usagejson, /plainsse, /headersse, /usagesse
//	           a 4 KB JSON chat completion and a 200-event stream from the
//	           backend, through Tollgate as /tollgate (its own middleware),
//	           with responseCost reading a header, and with responseCost
//	           reading the body (jsonFields: [usage.total_tokens]); the
//	           response-cost pass only (responsecost.go)
//
// Every route's backend is the bench's own (bodies.go): "ok" as the e2e
// Backend answers, and the response-cost routes' bodies.
//
// and measures, repeated -reps times (median and range reported):
//   - throughput at saturation (wrk, loopback), as a ratio to /none, with
//     limits set high (nothing rejected) and low (almost all rejected), and
//     Tollgate's over /minimal's, /redis's and /empty's (and /before's),
//     each run's within it;
//   - Traefik's allocations per request at saturation (runtime MemStats
//     TotalAlloc and Mallocs deltas, from expvar, over requests completed),
//     and what each route adds to /none's;
//   - the share of Traefik's CPU in GC at saturation (a CPU profile of each
//     run, -gc), samples whose stack holds a GC function (alloc.go);
//   - latency added at a fixed request rate, half of /redis's saturation in
//     the first run (-rateof, -rate), from a constant-throughput generator
//     that times each request from the moment it was due (coordinated
//     omission corrected, as wrk2 does): p50, p99, p99.9 minus /none's, and
//     Tollgate's added p99 over /redis's;
//   - latency added to sequential requests on a quiet replica: one client,
//     one keep-alive connection, one request at a time (-seq of them after a
//     warm-up), each timed from sending to the end of the reply: p50 and p99
//     minus /none's;
//   - Redis cost per request of the Redis limiters: commands and bytes
//     (INFO stats deltas over the saturation runs);
//   - leases: on a hot-key load (-hotkeys keys, nothing rejected) the
//     throughput of Tollgate with leases, without, and Traefik's redis
//     limiter, saturated as above, and each Tollgate's script calls per
//     request; with leases over without on the -keys load too;
//   - calendar quotas: Tollgate with a quota over without, each run's, in
//     the nothing-rejected saturation runs, and its script calls and heap
//     per request;
//   - concurrency caps: Tollgate with a cap over without, each run's, in
//     the nothing-rejected saturation runs, its script calls per request
//     (taking a slot, giving slots back), commands and heap per request,
//     and whether every slot taken was given back;
//   - the cost from the response (-responsecost): on each response-cost
//     route, saturated as above, interleaved, throughput, Traefik's CPU
//     (process_cpu_seconds_total) and heap per response, and what reading
//     the cost adds to the same response without responseCost: the
//     wrapper and the charge (header), the body's scan (jsonFields over
//     header); the tokens charged and the costs not charged (Tollgate's
//     counters);
//   - Redis memory per active key after -memkeys distinct keys through
//     Traefik (INFO used_memory delta over DBSIZE, and MEMORY USAGE samples);
//   - after the runs, the independent harness's shape (-shape): wrk -t1
//     -c16 for -shapewrk, -shaperounds rounds, each running every row once
//     in a rotated order, on 1,000 keys (10 for the hot-key rows): no
//     middleware, the empty plugin, Traefik redis, the minimal limiter,
//     Tollgate, Tollgate in a class that syncs with 0 and with -overrides
//     (10,000) per-key overrides (each also over Tollgate), Tollgate with
//     leases on 10 keys, and refusals of Tollgate and Traefik redis on
//     1,000 and 10 keys; ratios to /none within each round (shape.go).
//
// It writes a Markdown table (-out) and a PNG chart (-chart), and a CPU
// profile of Traefik while /tollgate is saturated (-profile).
//
//	go run ./cmd/bench [-reps 3] [-before REV] [-shape=false] [-overrides 10000] [-responsecost=false] [-out ../bench/results.md] [-chart ../bench/chart.png]
package main

import (
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
	"github.com/tollgate-dev/tollgate/internal/config"
)

func main() {
	reps := flag.Int("reps", 3, "repetitions of every figure")
	wrkDur := flag.Duration("wrk", 5*time.Second, "length of each saturation run")
	fixedDur := flag.Duration("fixed", 10*time.Second, "length of each fixed-rate run")
	seq := flag.Int("seq", 3000, "timed requests of each sequential run (after a warm-up of 300)")
	conns := flag.Int("conns", 64, "wrk connections")
	keys := flag.Int("keys", 1000, "distinct API keys in the load")
	hotKeys := flag.Int("hotkeys", 10, "distinct API keys in the hot-key load (0: skip it)")
	memKeys := flag.Int("memkeys", 200000, "distinct keys for the memory figure (0: skip)")
	rate := flag.Float64("rate", 0, "fixed request rate (0: half of -rateof's saturation)")
	rateOf := flag.String("rateof", "redis", "the route whose saturation in the first run, halved, is the fixed rate")
	gc := flag.Bool("gc", true, "profile Traefik's CPU during every saturation run, for the share in GC")
	out := flag.String("out", "", "write the Markdown results here")
	chart := flag.String("chart", "", "write the PNG chart here")
	profile := flag.String("profile", "", "write a CPU profile of Traefik while /tollgate is saturated")
	beforeRev := flag.String("before", "", "also run Tollgate as of this git revision of the repository (/before)")
	shape := flag.Bool("shape", true, "after the runs, the independent harness's shape: wrk -t1 -c16, 1,000 and 10 keys, interleaved rounds")
	shapeRounds := flag.Int("shaperounds", 3, "rounds of the harness's shape")
	shapeDur := flag.Duration("shapewrk", 4*time.Second, "length of each run of the harness's shape")
	respCost := flag.Bool("responsecost", true, "in every run, the cost from the response: JSON and event-stream bodies with and without responseCost")
	overrides := flag.Int("overrides", defaultOverrides, "per-key overrides (of keys not in the load) loaded into the class of the harness shape's /ovr10k row (0: none)")
	flag.Parse()
	log.SetFlags(0)
	if *beforeRev != "" {
		short, err := shortRev(e2e.RepoRoot(), *beforeRev)
		if err != nil {
			log.Fatal(err)
		}
		enableBefore(short)
	}
	if *shape && *shapeRounds < 1 {
		log.Fatalf("-shaperounds %d: at least 1 (or -shape=false)", *shapeRounds)
	}
	if *overrides < 0 || *overrides > config.DefaultOverrides {
		log.Fatalf("-overrides %d: between 0 and %d (a class keeps at most maxOverrides, %d by default)", *overrides, config.DefaultOverrides, config.DefaultOverrides)
	}
	setOverrides(*overrides)
	if _, ok := labels[*rateOf]; !ok && *rate == 0 {
		log.Fatalf("-rateof %q: not a route (%s)", *rateOf, strings.Join(routes, ", "))
	}

	if _, err := exec.LookPath("wrk"); err != nil {
		log.Fatal("wrk not found (apt-get install -y wrk, or scripts/deps.sh wrk)")
	}
	dir, err := os.MkdirTemp("", "tollgate-bench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	r, err := e2e.StartRedis(dir)
	if err != nil {
		log.Fatal(err)
	}
	defer r.Kill()
	rl, err := e2e.StartRedis(dir) // Tollgate with leases'
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Kill()
	rq, err := e2e.StartRedis(dir) // Tollgate with a quota's
	if err != nil {
		log.Fatal(err)
	}
	defer rq.Kill()
	rc, err := e2e.StartRedis(dir) // Tollgate with a cap's
	if err != nil {
		log.Fatal(err)
	}
	defer rc.Kill()
	rcost, err := e2e.StartRedis(dir) // the response-cost routes'
	if err != nil {
		log.Fatal(err)
	}
	defer rcost.Kill()
	rrefuse, err := e2e.StartRedis(dir) // the harness shape's refusal routes'
	if err != nil {
		log.Fatal(err)
	}
	defer rrefuse.Kill()
	be, err := startBackend()
	if err != nil {
		log.Fatal(err)
	}
	defer be.close()
	if err := installMinimal(dir); err != nil {
		log.Fatal(err)
	}
	var rb *e2e.Redis
	if *beforeRev != "" {
		if rb, err = e2e.StartRedis(dir); err != nil {
			log.Fatal(err)
		}
		defer rb.Kill()
		if err := installBefore(dir, e2e.RepoRoot(), *beforeRev); err != nil {
			log.Fatal(err)
		}
	}
	b := &bench{dir: dir, redis: r, leased: rl, quota: rq, capped: rc, before: rb, cost: rcost, refuse: rrefuse, backend: be,
		wrkDur: *wrkDur, conns: *conns, script: filepath.Join(dir, "keys.lua"), hot: filepath.Join(dir, "hot.lua"), gc: *gc, profile: *profile,
		overrides: *overrides}
	if err := b.loadOverrides(); err != nil { // /ovr10k's class's, before Traefik reads it
		log.Fatal(err)
	}
	fleet, err := e2e.StartFleetWith(dir, 1, dynamicConf(b.addrs(), admitAll), pluginsStatic(rb != nil))
	if err != nil {
		log.Fatal(err)
	}
	defer fleet.Stop()
	b.fleet, b.traefik = fleet, fleet.Replicas[0]
	if err := os.WriteFile(b.script, []byte(keysScript(*keys)), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := os.WriteFile(b.hot, []byte(keysScript(*hotKeys)), 0o644); err != nil {
		log.Fatal(err)
	}
	shapeScripts := map[int]string{}
	for _, n := range []int{shapeKeys, shapeHotKeys} {
		shapeScripts[n] = filepath.Join(dir, fmt.Sprintf("shape-%d.lua", n))
		if err := os.WriteFile(shapeScripts[n], []byte(keysScript(n)), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	routers := []string{leased + "@file", quota + "@file", capped + "@file", refuseTollgate + "@file", refuseRedis + "@file", metricsRoute + "@file",
		ovr0 + "@file", ovr10k + "@file", adminRoute + "@file"}
	for _, rt := range routes {
		routers = append(routers, rt+"@file")
	}
	for _, c := range costRoutes {
		routers = append(routers, c.route+"@file")
	}
	if err := fleet.WaitRouters("enabled", routers...); err != nil {
		log.Fatal(err)
	}
	machine := describeMachine(r)
	fmt.Println(machine)
	res := newResults()

	for rep := 1; rep <= *reps; rep++ {
		fmt.Printf("\n== run %d of %d\n", rep, *reps)
		// Saturation, nothing rejected.
		if err := b.apply(admitAll); err != nil {
			log.Fatal(err)
		}
		if err := b.saturation(res, admitted, rep); err != nil {
			log.Fatal(err)
		}
		// The hot keys, nothing rejected.
		if *hotKeys > 0 {
			if err := b.hotKeys(res, rep); err != nil {
				log.Fatal(err)
			}
		}
		// The cost from the response, nothing rejected.
		if *respCost {
			if err := b.responseCosts(res, rep); err != nil {
				log.Fatal(err)
			}
		}
		// Redis connections at 512 concurrent requests.
		for _, rt := range only(order(rep), "redis", "tollgate", "before") {
			w, err := b.saturateWith(rt, 512)
			if err != nil {
				log.Fatal(err)
			}
			n := w.tgConns
			if rt == "redis" {
				n = w.otherConns
			}
			res.conns512[rt] = append(res.conns512[rt], float64(n))
			fmt.Printf("saturation, 512 conns:  %-30s %8.0f req/s, %d Redis connections\n", labels[rt], w.rps, n)
		}
		// Fixed rate: half of -rateof's saturation (of the first run).
		fr := *rate
		if fr == 0 {
			fr = math.Round(res.rps[*rateOf][0]/2/100) * 100
			res.rateOf = *rateOf
		}
		res.rate = fr
		for _, rt := range []string{"tollgate", "before"} {
			if enabled(rt) && fr > res.rps[rt][rep-1] {
				res.rateOver[rt]++
				fmt.Printf("fixed %5.0f req/s:     above %s's saturation in this run (%.0f req/s): its latency is queueing\n",
					fr, labels[rt], res.rps[rt][rep-1])
			}
		}
		for _, rt := range order(rep) {
			fixedRate(b.traefik.URL("/"+rt), fr, time.Second, 64, *keys) // warm-up
			lat, errs := fixedRate(b.traefik.URL("/"+rt), fr, *fixedDur, 64, *keys)
			res.errsFixed += errs
			res.raw50[rt] = append(res.raw50[rt], pct(lat, 50))
			res.raw99[rt] = append(res.raw99[rt], pct(lat, 99))
			res.raw999[rt] = append(res.raw999[rt], pct(lat, 99.9))
			fmt.Printf("fixed %5.0f req/s:     %-31s p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms (%d errors)\n",
				fr, labels[rt], pct(lat, 50), pct(lat, 99), pct(lat, 99.9), errs)
		}
		for _, rt := range routes {
			res.p50[rt] = append(res.p50[rt], res.raw50[rt][rep-1]-res.raw50["none"][rep-1])
			res.p99[rt] = append(res.p99[rt], res.raw99[rt][rep-1]-res.raw99["none"][rep-1])
			res.p999[rt] = append(res.p999[rt], res.raw999[rt][rep-1]-res.raw999["none"][rep-1])
		}
		if tg, rd := res.p99["tollgate"][rep-1], res.p99["redis"][rep-1]; rd > 0 {
			res.p99VsRedis = append(res.p99VsRedis, tg/rd)
			fmt.Printf("fixed %5.0f req/s:     added p99 Tollgate %.3f ms, Traefik redis %.3f ms: ratio %.2f\n", fr, tg, rd, tg/rd)
		} else {
			res.p99VsRedisSkipped++
		}
		if enabled("before") {
			if tg, bf := res.p99["tollgate"][rep-1], res.p99["before"][rep-1]; bf > 0 {
				res.p99VsBefore = append(res.p99VsBefore, tg/bf)
				fmt.Printf("fixed %5.0f req/s:     added p99 Tollgate %.3f ms, %s %.3f ms: ratio %.2f\n", fr, tg, labels["before"], bf, tg/bf)
			} else {
				res.p99VsBeforeSkipped++
			}
		}
		// Sequential requests, one connection, nothing else running.
		for _, rt := range order(rep) {
			lat, errs, dials := sequential(b.traefik.URL("/"+rt), *seq, *keys)
			res.errsSeq += errs
			res.seqRaw50[rt] = append(res.seqRaw50[rt], pct(lat, 50))
			res.seqRaw99[rt] = append(res.seqRaw99[rt], pct(lat, 99))
			fmt.Printf("sequential, %4d reqs:  %-30s p50 %.3f ms, p99 %.3f ms (%d errors, %d reconnections)\n",
				*seq, labels[rt], pct(lat, 50), pct(lat, 99), errs, dials)
		}
		for _, rt := range routes {
			res.seq50[rt] = append(res.seq50[rt], res.seqRaw50[rt][rep-1]-res.seqRaw50["none"][rep-1])
			res.seq99[rt] = append(res.seq99[rt], res.seqRaw99[rt][rep-1]-res.seqRaw99["none"][rep-1])
		}
		// Saturation, almost everything rejected.
		if err := b.apply(rejectMost); err != nil {
			log.Fatal(err)
		}
		if err := b.saturation(res, refused, rep); err != nil {
			log.Fatal(err)
		}
		// Memory per key.
		if *memKeys > 0 {
			if err := b.apply(memory); err != nil {
				log.Fatal(err)
			}
			for _, rt := range only(order(rep), "redis", "tollgate", "before") {
				perKey, usage, n, err := b.memoryPerKey(rt, *memKeys, rep)
				if err != nil {
					log.Fatal(err)
				}
				res.memPerKey[rt] = append(res.memPerKey[rt], perKey)
				res.memUsage[rt] = append(res.memUsage[rt], usage)
				res.memKeys[rt] = append(res.memKeys[rt], float64(n))
				fmt.Printf("memory:                 %-30s %d keys, %.0f B/key (used_memory), %.0f B/key (MEMORY USAGE)\n",
					labels[rt], n, perKey, usage)
			}
		}
	}
	// The independent harness's shape, nothing rejected but its refusal
	// rows (their own limits).
	if *shape {
		fmt.Printf("\n== the independent harness's shape: wrk -t%d -c%d -d%s, %d rounds\n", shapeThreads, shapeConns, *shapeDur, *shapeRounds)
		if err := b.apply(admitAll); err != nil {
			log.Fatal(err)
		}
		if err := b.readyOverrides(); err != nil {
			log.Fatal(err)
		}
		res.shape.rounds, res.shape.dur, res.shape.overrides = *shapeRounds, *shapeDur, *overrides
		for round := 1; round <= *shapeRounds; round++ {
			if err := b.shapeRound(res, round, *shapeRounds, *shapeDur, shapeScripts); err != nil {
				log.Fatal(err)
			}
		}
		if n, err := b.redis.Do("HLEN", overridesKey(ovr10k)); err == nil {
			fmt.Printf("overrides: %v fields (and the version) in %s after the harness's shape\n", n, overridesKey(ovr10k))
		}
	}
	b.cpuShares(res)
	if lines := pluginLog(b.traefik.Log()); len(lines) > 0 {
		fmt.Printf("\nThe plugins' lines in Traefik's log (%d), the last ones:\n", len(lines))
		if len(lines) > 5 {
			lines = lines[len(lines)-5:]
		}
		fmt.Println(strings.Join(lines, "\n"))
	}
	md := markdown(res, machine, *reps, *wrkDur, *fixedDur, *seq, *conns, *keys, *hotKeys, *memKeys)
	fmt.Println("\n" + md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	if *chart != "" {
		if err := drawChart(*chart, res); err != nil {
			log.Fatal(err)
		}
	}
	if *profile != "" {
		bin, _ := e2e.TraefikBinary()
		fmt.Printf("CPU profile of Traefik under /tollgate saturation: go tool pprof -top %s %s\n", bin, *profile)
	}
}

func describeMachine(r *e2e.Redis) string {
	cpu := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		if m := regexp.MustCompile(`model name\s*:\s*(.*)`).FindSubmatch(b); m != nil {
			cpu = string(m[1])
		}
	}
	redisVersion := "?"
	if info, err := r.Info("server"); err == nil {
		redisVersion = info["redis_version"]
	}
	wrkVersion := "wrk" // wrk --version exits 1
	if out, _ := exec.Command("wrk", "--version").CombinedOutput(); len(strings.Fields(string(out))) > 1 {
		wrkVersion = strings.Fields(string(out))[0] + " " + strings.Fields(string(out))[1]
	}
	tv := "?" // the binary says "dev": ask the module that pins it
	if out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}}", "github.com/traefik/traefik/v3").Output(); err == nil {
		tv = strings.TrimSpace(string(out))
	}
	return fmt.Sprintf("Machine: %d CPUs (%s), %s; Traefik %s built with %s; Redis %s; %s. Everything on loopback, on the same CPUs.",
		runtime.NumCPU(), cpu, runtime.GOOS+"/"+runtime.GOARCH, tv, runtime.Version(), redisVersion, wrkVersion)
}

// pluginLog returns the lines of Traefik's log that the plugins wrote.
func pluginLog(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "tollgate") || strings.Contains(l, "minimal") {
			out = append(out, l)
		}
	}
	return out
}
