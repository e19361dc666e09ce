package main

import (
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"
	"time"
)

// The saturation passes: admitted (limits that admit all) and refused
// (limits that refuse almost all), index 0 and 1 of results' per-pass
// figures.
const (
	admitted = 0
	refused  = 1
)

var passNames = [2]string{"admit", "refuse"}

// cpuSample is one CPU profile taken during a saturation run.
type cpuSample struct {
	pass, rep int
	route     string
	path      string
}

// saturation runs wrk on every route, in rep, with the limits of pass
// already applied, and records into res: throughput, Redis's cost, Traefik's
// allocations per request, and (with b.gc) a CPU profile of each run.
func (b *bench) saturation(res *results, pass, rep int) error {
	kb, mallocs := map[string]float64{}, map[string]float64{} // this rep's, per request
	rts := order(rep)
	if pass == admitted {
		rts = admitOrder(rts, rep)
	}
	for _, rt := range rts {
		path := ""
		switch {
		case b.gc:
			path = filepath.Join(b.dir, fmt.Sprintf("cpu-%s-%s-%d.pprof", passNames[pass], rt, rep))
		case b.profile != "" && pass == admitted && rep == 1 && rt == "tollgate":
			path = b.profile
		}
		var prof chan error
		if path != "" {
			prof = make(chan error, 1)
			go func() { prof <- b.cpuProfile(path, b.wrkDur-2*time.Second) }()
		}
		w, err := b.saturate(rt)
		if err != nil {
			return err
		}
		if prof != nil {
			if err := <-prof; err != nil {
				log.Printf("profile: %v", err)
			} else if b.gc {
				b.prof = append(b.prof, cpuSample{pass: pass, rep: rep, route: rt, path: path})
				if b.profile != "" && pass == admitted && rep == 1 && rt == "tollgate" {
					if err := copyFile(path, b.profile); err != nil {
						log.Printf("profile: %v", err)
					}
				}
			}
		}
		perReq := func(n int64) float64 { return float64(n) / float64(w.requests) }
		withRedis := rt != "none" && rt != "inmem" && rt != "empty"
		if pass == admitted {
			res.rps[rt] = append(res.rps[rt], w.rps)
			res.non2xxAdmit += w.non2xx
			switch rt {
			case "tollgate", "before", leased, quota, capped:
				res.conns64[rt] = append(res.conns64[rt], float64(w.tgConns))
			case "minimal":
				res.conns64[rt] = append(res.conns64[rt], float64(w.minConns))
			case "redis":
				res.conns64[rt] = append(res.conns64[rt], float64(w.otherConns))
			}
			if w.requests > 0 && withRedis {
				res.cmds[rt] = append(res.cmds[rt], perReq(w.redisCmds))
				res.bytes[rt] = append(res.bytes[rt], perReq(w.redisBytes))
				res.scripts[rt] = append(res.scripts[rt], perReq(w.redisScripts))
			}
			if rt == quota {
				res.quotaOneScript = append(res.quotaOneScript, w.requests > 0 && oneScriptEach(w, b.conns))
			}
			if rt == capped {
				cappedRun(res, w)
			}
		} else {
			res.rpsReject[rt] = append(res.rpsReject[rt], w.rps)
			if w.requests > 0 && withRedis {
				res.cmdsRej[rt] = append(res.cmdsRej[rt], perReq(w.redisCmds))
				res.bytesRej[rt] = append(res.bytesRej[rt], perReq(w.redisBytes))
			}
		}
		alloc := ""
		if w.allocOK && w.requests > 0 {
			kb[rt] = float64(w.alloc.TotalAlloc) / float64(w.requests) / 1024
			mallocs[rt] = float64(w.alloc.Mallocs) / float64(w.requests)
			res.allocKB[pass][rt] = append(res.allocKB[pass][rt], kb[rt])
			res.mallocs[pass][rt] = append(res.mallocs[pass][rt], mallocs[rt])
			alloc = fmt.Sprintf(", Traefik %.2f KB in %.0f allocations per request", kb[rt], mallocs[rt])
		}
		if pass == admitted {
			fmt.Printf("saturation, admit all:  %-30s %8.0f req/s (%d non-2xx), Redis %.2f cmds (%.2f scripts), %.0f bytes per request%s\n",
				labels[rt], w.rps, w.non2xx, perReq(w.redisCmds), perReq(w.redisScripts), perReq(w.redisBytes), alloc)
		} else {
			fmt.Printf("saturation, reject most: %-29s %8.0f req/s (%.0f%% rejected)%s\n", labels[rt], w.rps,
				100*float64(w.non2xx)/float64(w.requests), alloc)
		}
	}
	// Figures within the rep: ratios, and what a route adds to none.
	rps, ratio := res.rps, res.ratio
	if pass == refused {
		rps, ratio = res.rpsReject, res.ratioReject
	}
	for _, rt := range routes {
		ratio[rt] = append(ratio[rt], rps[rt][rep-1]/rps["none"][rep-1])
	}
	res.vsMinimal[pass] = append(res.vsMinimal[pass], rps["tollgate"][rep-1]/rps["minimal"][rep-1])
	res.vsRedis[pass] = append(res.vsRedis[pass], rps["tollgate"][rep-1]/rps["redis"][rep-1])
	res.vsEmpty[pass] = append(res.vsEmpty[pass], rps["tollgate"][rep-1]/rps["empty"][rep-1])
	fmt.Printf("throughput, %s: Tollgate / minimal %.2f, Tollgate / Traefik redis %.2f, Tollgate / empty %.2f\n", passNames[pass],
		res.vsMinimal[pass][rep-1], res.vsRedis[pass][rep-1], res.vsEmpty[pass][rep-1])
	if pass == admitted {
		res.leasedVsTollgate[keysLoad] = append(res.leasedVsTollgate[keysLoad], rps[leased][rep-1]/rps["tollgate"][rep-1])
		res.leasedVsRedis[keysLoad] = append(res.leasedVsRedis[keysLoad], rps[leased][rep-1]/rps["redis"][rep-1])
		fmt.Printf("throughput, %s: Tollgate with leases / without %.2f (target >= %.1f), with leases / Traefik redis %.2f; script calls per request with leases %.3f\n",
			passNames[pass], res.leasedVsTollgate[keysLoad][rep-1], targetVsWithout, res.leasedVsRedis[keysLoad][rep-1], at(res.scripts[leased], rep))
		quotaRep(res, rep)
		cappedRep(res, rep)
	}
	if enabled("before") {
		res.vsBefore[pass] = append(res.vsBefore[pass], rps["tollgate"][rep-1]/rps["before"][rep-1])
		fmt.Printf("throughput, %s: Tollgate / %s %.2f\n", passNames[pass], labels["before"], res.vsBefore[pass][rep-1])
		if kb["tollgate"] > 0 && kb["before"] > 0 {
			res.allocVsBefore[pass] = append(res.allocVsBefore[pass], kb["tollgate"]/kb["before"])
			res.mallocsVsBefore[pass] = append(res.mallocsVsBefore[pass], mallocs["tollgate"]/mallocs["before"])
			fmt.Printf("allocation, %s: Tollgate / %s %.2f (KB), %.2f (objects)\n", passNames[pass], labels["before"],
				kb["tollgate"]/kb["before"], mallocs["tollgate"]/mallocs["before"])
		}
	}
	for _, rt := range append(append([]string(nil), routes...), quota, capped) {
		if _, ok := kb["none"]; !ok {
			break // a read of /debug/vars failed
		}
		if _, ok := kb[rt]; ok {
			res.allocKBAdded[pass][rt] = append(res.allocKBAdded[pass][rt], kb[rt]-kb["none"])
			res.mallocsAdded[pass][rt] = append(res.mallocsAdded[pass][rt], mallocs[rt]-mallocs["none"])
		}
	}
	return nil
}

// cpuShares reads every profile taken into res's GC and allocation shares
// (percent), after the runs so that go tool pprof takes no CPU from them.
func (b *bench) cpuShares(res *results) {
	for _, p := range b.prof {
		gc, alloc, err := cpuShares(p.path)
		if err != nil {
			log.Printf("profile %s: %v", p.path, err)
			continue
		}
		res.gcShare[p.pass][p.route] = append(res.gcShare[p.pass][p.route], 100*gc)
		res.allocShare[p.pass][p.route] = append(res.allocShare[p.pass][p.route], 100*alloc)
	}
}

// at is s's figure of rep, NaN when rep has none.
func at(s stat, rep int) float64 {
	if len(s) < rep {
		return math.NaN()
	}
	return s[rep-1]
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
