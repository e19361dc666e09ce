// Command bench runs Traefik's own rate limiters and Tollgate side by side in
// one Traefik process (the binary scripts/traefik.sh builds), same backend,
// one router each:
//
//	/none      no middleware
//	/inmem     Traefik's rateLimit, in memory
//	/redis     Traefik's rateLimit with redis
//	/tollgate  Tollgate (interpreted by Traefik's Yaegi)
//
// and measures, repeated -reps times (median and range reported):
//   - throughput at saturation (wrk, loopback), as a ratio to /none, with
//     limits set high (nothing rejected) and low (almost all rejected);
//   - latency added at a fixed request rate, half of /tollgate's saturation,
//     from a constant-throughput generator that times each request from the
//     moment it was due (coordinated omission corrected, as wrk2 does):
//     p50, p99, p99.9 minus /none's;
//   - latency added to sequential requests on a quiet replica: one client,
//     one keep-alive connection, one request at a time (-seq of them after a
//     warm-up), each timed from sending to the end of the reply: p50 and p99
//     minus /none's;
//   - Redis cost per request of the two Redis limiters: commands and bytes
//     (INFO stats deltas over the saturation runs);
//   - Redis memory per active key after -memkeys distinct keys through
//     Traefik (INFO used_memory delta over DBSIZE, and MEMORY USAGE samples).
//
// It writes a Markdown table (-out) and a PNG chart (-chart), and a CPU
// profile of Traefik while /tollgate is saturated (-profile).
//
//	go run ./cmd/bench [-reps 3] [-out ../bench/results.md] [-chart ../bench/chart.png]
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

func main() {
	reps := flag.Int("reps", 3, "repetitions of every figure")
	wrkDur := flag.Duration("wrk", 5*time.Second, "length of each saturation run")
	fixedDur := flag.Duration("fixed", 10*time.Second, "length of each fixed-rate run")
	seq := flag.Int("seq", 3000, "timed requests of each sequential run (after a warm-up of 300)")
	conns := flag.Int("conns", 64, "wrk connections")
	keys := flag.Int("keys", 1000, "distinct API keys in the load")
	memKeys := flag.Int("memkeys", 200000, "distinct keys for the memory figure (0: skip)")
	rate := flag.Float64("rate", 0, "fixed request rate (0: half of /tollgate's saturation)")
	out := flag.String("out", "", "write the Markdown results here")
	chart := flag.String("chart", "", "write the PNG chart here")
	profile := flag.String("profile", "", "write a CPU profile of Traefik while /tollgate is saturated")
	flag.Parse()
	log.SetFlags(0)

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
	fleet, err := e2e.StartFleet(dir, 1, dynamicConf(r.Addr, admitAll))
	if err != nil {
		log.Fatal(err)
	}
	defer fleet.Stop()
	b := &bench{dir: dir, redis: r, fleet: fleet, traefik: fleet.Replicas[0], wrkDur: *wrkDur, conns: *conns,
		script: filepath.Join(dir, "keys.lua")}
	lua := fmt.Sprintf("local n = 0\nrequest = function()\n  n = n + 1\n  return wrk.format(\"GET\", nil, {[\"X-API-Key\"] = \"k\" .. (n %% %d)})\nend\n", *keys)
	if err := os.WriteFile(b.script, []byte(lua), 0o644); err != nil {
		log.Fatal(err)
	}
	if err := fleet.WaitRouters("enabled", "none@file", "inmem@file", "redis@file", "tollgate@file"); err != nil {
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
		for _, rt := range routes {
			var prof chan error
			if rt == "tollgate" && rep == 1 && *profile != "" {
				prof = make(chan error, 1)
				go func() { prof <- b.cpuProfile(*profile, *wrkDur-2*time.Second) }()
			}
			w, err := b.saturate(rt)
			if err != nil {
				log.Fatal(err)
			}
			if prof != nil {
				if err := <-prof; err != nil {
					log.Printf("profile: %v", err)
				}
			}
			res.rps[rt] = append(res.rps[rt], w.rps)
			res.non2xxAdmit += w.non2xx
			switch rt {
			case "tollgate":
				res.conns64[rt] = append(res.conns64[rt], float64(w.tgConns))
			case "redis":
				res.conns64[rt] = append(res.conns64[rt], float64(w.otherConns))
			}
			if w.requests > 0 && (rt == "redis" || rt == "tollgate") {
				res.cmds[rt] = append(res.cmds[rt], float64(w.redisCmds)/float64(w.requests))
				res.bytes[rt] = append(res.bytes[rt], float64(w.redisBytes)/float64(w.requests))
				res.scripts[rt] = append(res.scripts[rt], float64(w.redisScripts)/float64(w.requests))
			}
			fmt.Printf("saturation, admit all:  %-28s %8.0f req/s (%d non-2xx), Redis %.2f cmds (%.2f scripts), %.0f bytes per request\n",
				labels[rt], w.rps, w.non2xx, float64(w.redisCmds)/float64(w.requests), float64(w.redisScripts)/float64(w.requests),
				float64(w.redisBytes)/float64(w.requests))
		}
		for _, rt := range routes {
			res.ratio[rt] = append(res.ratio[rt], res.rps[rt][rep-1]/res.rps["none"][rep-1])
		}
		// Redis connections at 512 concurrent requests.
		for _, rt := range []string{"redis", "tollgate"} {
			w, err := b.saturateWith(rt, 512)
			if err != nil {
				log.Fatal(err)
			}
			n := w.tgConns
			if rt == "redis" {
				n = w.otherConns
			}
			res.conns512[rt] = append(res.conns512[rt], float64(n))
			fmt.Printf("saturation, 512 conns:  %-28s %8.0f req/s, %d Redis connections\n", labels[rt], w.rps, n)
		}
		// Fixed rate: half of Tollgate's saturation (of the first run).
		fr := *rate
		if fr == 0 {
			fr = math.Round(res.rps["tollgate"][0]/2/100) * 100
		}
		res.rate = fr
		for _, rt := range routes {
			fixedRate(b.traefik.URL("/"+rt), fr, time.Second, 64, *keys) // warm-up
			lat, errs := fixedRate(b.traefik.URL("/"+rt), fr, *fixedDur, 64, *keys)
			res.errsFixed += errs
			res.raw50[rt] = append(res.raw50[rt], pct(lat, 50))
			res.raw99[rt] = append(res.raw99[rt], pct(lat, 99))
			res.raw999[rt] = append(res.raw999[rt], pct(lat, 99.9))
			fmt.Printf("fixed %5.0f req/s:     %-28s p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms (%d errors)\n",
				fr, labels[rt], pct(lat, 50), pct(lat, 99), pct(lat, 99.9), errs)
		}
		for _, rt := range routes {
			res.p50[rt] = append(res.p50[rt], res.raw50[rt][rep-1]-res.raw50["none"][rep-1])
			res.p99[rt] = append(res.p99[rt], res.raw99[rt][rep-1]-res.raw99["none"][rep-1])
			res.p999[rt] = append(res.p999[rt], res.raw999[rt][rep-1]-res.raw999["none"][rep-1])
		}
		// Sequential requests, one connection, nothing else running.
		for _, rt := range routes {
			lat, errs, dials := sequential(b.traefik.URL("/"+rt), *seq, *keys)
			res.errsSeq += errs
			res.seqRaw50[rt] = append(res.seqRaw50[rt], pct(lat, 50))
			res.seqRaw99[rt] = append(res.seqRaw99[rt], pct(lat, 99))
			fmt.Printf("sequential, %4d reqs:  %-28s p50 %.3f ms, p99 %.3f ms (%d errors, %d reconnections)\n",
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
		for _, rt := range routes {
			w, err := b.saturate(rt)
			if err != nil {
				log.Fatal(err)
			}
			res.rpsReject[rt] = append(res.rpsReject[rt], w.rps)
			if w.requests > 0 && (rt == "redis" || rt == "tollgate") {
				res.cmdsRej[rt] = append(res.cmdsRej[rt], float64(w.redisCmds)/float64(w.requests))
				res.bytesRej[rt] = append(res.bytesRej[rt], float64(w.redisBytes)/float64(w.requests))
			}
			fmt.Printf("saturation, reject most: %-27s %8.0f req/s (%.0f%% rejected)\n", labels[rt], w.rps,
				100*float64(w.non2xx)/float64(w.requests))
		}
		for _, rt := range routes {
			res.ratioReject[rt] = append(res.ratioReject[rt], res.rpsReject[rt][rep-1]/res.rpsReject["none"][rep-1])
		}
		// Memory per key.
		if *memKeys > 0 {
			if err := b.apply(memory); err != nil {
				log.Fatal(err)
			}
			for _, rt := range []string{"redis", "tollgate"} {
				perKey, usage, n, err := b.memoryPerKey(rt, *memKeys, rep)
				if err != nil {
					log.Fatal(err)
				}
				res.memPerKey[rt] = append(res.memPerKey[rt], perKey)
				res.memUsage[rt] = append(res.memUsage[rt], usage)
				res.memKeys[rt] = append(res.memKeys[rt], float64(n))
				fmt.Printf("memory:                 %-28s %d keys, %.0f B/key (used_memory), %.0f B/key (MEMORY USAGE)\n",
					labels[rt], n, perKey, usage)
			}
		}
	}
	if lines := pluginLog(b.traefik.Log()); len(lines) > 0 {
		fmt.Printf("\nTollgate's lines in Traefik's log (%d), the last ones:\n", len(lines))
		if len(lines) > 5 {
			lines = lines[len(lines)-5:]
		}
		fmt.Println(strings.Join(lines, "\n"))
	}
	md := markdown(res, machine, *reps, *wrkDur, *fixedDur, *seq, *conns, *keys, *memKeys)
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

// cpuProfile fetches a CPU profile of Traefik (api.debug) lasting d.
func (b *bench) cpuProfile(path string, d time.Duration) error {
	time.Sleep(time.Second)
	resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", b.traefik.API, int(d.Seconds())))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
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

// pluginLog returns the lines of Traefik's log that the plugin wrote.
func pluginLog(log string) []string {
	var out []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "tollgate") {
			out = append(out, l)
		}
	}
	return out
}
