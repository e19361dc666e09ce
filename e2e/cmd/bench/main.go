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
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tollgate-dev/tollgate/e2e"
)

var routes = []string{"none", "inmem", "redis", "tollgate"}

var labels = map[string]string{
	"none":     "no middleware",
	"inmem":    "Traefik rateLimit (memory)",
	"redis":    "Traefik rateLimit (redis)",
	"tollgate": "Tollgate",
}

// limits is one pass's configuration of the three limiters.
type limits struct {
	average int64
	period  string
	burst   int64
}

var (
	admitAll   = limits{100000000, "1s", 100000000} // nothing is rejected
	rejectMost = limits{1, "1m", 1}                 // one request per key and minute
	memory     = limits{100, "24h", 20}             // keys live through the measurement
)

func dynamicConf(redisAddr string, l limits) map[string]interface{} {
	routers := map[string]interface{}{}
	for _, r := range routes {
		rt := map[string]interface{}{"rule": "PathPrefix(`/" + r + "`)", "service": "backend", "entryPoints": []interface{}{"web"}}
		if r != "none" {
			rt["middlewares"] = []interface{}{r + "-limit"}
		}
		routers[r] = rt
	}
	source := map[string]interface{}{"requestHeaderName": "X-API-Key"}
	rateLimit := func(withRedis bool) map[string]interface{} {
		m := map[string]interface{}{"average": l.average, "period": l.period, "burst": l.burst, "sourceCriterion": source}
		if withRedis {
			m["redis"] = map[string]interface{}{"endpoints": []interface{}{redisAddr}}
		}
		return map[string]interface{}{"rateLimit": m}
	}
	return map[string]interface{}{"http": map[string]interface{}{
		"routers": routers,
		"middlewares": map[string]interface{}{
			"inmem-limit": rateLimit(false),
			"redis-limit": rateLimit(true),
			"tollgate-limit": map[string]interface{}{"plugin": map[string]interface{}{"tollgate": map[string]interface{}{
				"average": l.average, "period": l.period, "burst": l.burst, "sourceCriterion": source,
				"redis": map[string]interface{}{"endpoints": []interface{}{redisAddr}},
			}}},
		},
	}}
}

type bench struct {
	dir     string
	redis   *e2e.Redis
	fleet   *e2e.Fleet
	traefik *e2e.Traefik
	script  string // wrk Lua script
	wrkDur  time.Duration
	conns   int
}

// apply writes l and waits until Tollgate answers with it.
func (b *bench) apply(l limits) error {
	if err := b.fleet.WriteDynamic(dynamicConf(b.redis.Addr, l)); err != nil {
		return err
	}
	want := fmt.Sprintf(";q=%d;", l.average)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest("GET", b.traefik.URL("/tollgate"), nil)
		req.Header.Set("X-API-Key", "apply-probe")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if strings.Contains(resp.Header.Get("RateLimit-Policy"), want) {
				time.Sleep(500 * time.Millisecond)
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("configuration %+v not applied", l)
}

var wrkRPS = regexp.MustCompile(`Requests/sec:\s+([0-9.]+)`)
var wrkTotal = regexp.MustCompile(`(\d+) requests in`)
var wrkNon2xx = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)

type wrkResult struct {
	rps          float64
	requests     int64
	non2xx       int64
	redisCmds    int64
	redisBytes   int64
	redisScripts int64
	tgConns      int // connections named tollgate, sampled during the run
	otherConns   int // the others (Traefik's Redis limiter's), sampled alike
}

// redisConns counts Redis's connected clients: Tollgate's (CLIENT SETNAME
// tollgate) and the others, this query's excepted; -1 when it cannot.
func (b *bench) redisConns() (tollgate, others int) {
	tollgate, others, err := b.redis.ClientsNamed("tollgate")
	if err != nil {
		return -1, -1
	}
	return tollgate, others
}

// saturate runs wrk against route and records Redis's counters around it.
func (b *bench) saturate(route string) (wrkResult, error) {
	return b.saturateWith(route, b.conns)
}

// saturateWith is saturate with conns wrk connections; it also samples
// Redis's connections 60% into the run.
func (b *bench) saturateWith(route string, conns int) (wrkResult, error) {
	var r wrkResult
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		time.Sleep(b.wrkDur * 6 / 10)
		r.tgConns, r.otherConns = b.redisConns()
	}()
	defer func() { <-sampled }()
	before, err := b.redis.Info("stats")
	if err != nil {
		return r, err
	}
	s0, _ := b.redis.ScriptCalls()
	cmd := exec.Command("wrk", "-t2", "-c"+strconv.Itoa(conns), "-d"+b.wrkDur.String(), "-s", b.script, b.traefik.URL("/"+route))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return r, fmt.Errorf("wrk: %v\n%s", err, out)
	}
	after, err := b.redis.Info("stats")
	if err != nil {
		return r, err
	}
	s1, _ := b.redis.ScriptCalls()
	m := wrkRPS.FindSubmatch(out)
	t := wrkTotal.FindSubmatch(out)
	if m == nil || t == nil {
		return r, fmt.Errorf("wrk output: %s", out)
	}
	r.rps, _ = strconv.ParseFloat(string(m[1]), 64)
	r.requests, _ = strconv.ParseInt(string(t[1]), 10, 64)
	if n := wrkNon2xx.FindSubmatch(out); n != nil {
		r.non2xx, _ = strconv.ParseInt(string(n[1]), 10, 64)
	}
	delta := func(k string) int64 {
		a, _ := strconv.ParseInt(after[k], 10, 64)
		b, _ := strconv.ParseInt(before[k], 10, 64)
		return a - b
	}
	r.redisCmds = delta("total_commands_processed") - 2 // the two INFO calls
	r.redisBytes = delta("total_net_input_bytes") + delta("total_net_output_bytes")
	r.redisScripts = s1 - s0
	<-sampled
	return r, nil
}

// fixedRate sends rate requests/s to url for d from workers connections and
// returns each request's latency measured from when it was due.
func fixedRate(url string, rate float64, d time.Duration, workers int, keys int) (lat []time.Duration, errs int64) {
	n := int(rate * d.Seconds())
	lat = make([]time.Duration, n)
	interval := time.Duration(float64(time.Second) / rate)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}}
	start := time.Now().Add(50 * time.Millisecond)
	errs = forEach(n, workers, func(i int) error {
		due := start.Add(time.Duration(i) * interval)
		time.Sleep(time.Until(due))
		err := get(client, url, "k"+strconv.Itoa(i%keys))
		lat[i] = time.Since(due)
		return err
	})
	client.CloseIdleConnections()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, errs
}

// seqWarmup is how many requests sequential sends before it starts timing.
const seqWarmup = 300

// sequential sends seqWarmup and then n timed requests to url, one after
// another from one client on one keep-alive connection, keys cycling over
// keys API keys. It returns the timed requests' latencies, sorted, each from
// sending the request to reading the last byte of its reply; how many failed
// (transport errors and replies other than 2xx, as the limits admit all);
// and how many connections the timed requests opened (0 when the one
// connection held).
func sequential(url string, n, keys int) (lat []time.Duration, errs int64, dials int) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 1, MaxConnsPerHost: 1}}
	defer client.CloseIdleConnections()
	trace := &httptrace.ClientTrace{GotConn: func(c httptrace.GotConnInfo) {
		if !c.Reused {
			dials++
		}
	}}
	one := func(i int) error {
		req, _ := http.NewRequest("GET", url, nil)
		req.Header.Set("X-API-Key", "k"+strconv.Itoa(i%keys))
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode/100 != 2 {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return err
	}
	for i := 0; i < seqWarmup; i++ {
		_ = one(i)
	}
	dials = 0
	lat = make([]time.Duration, n)
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if one(i) != nil {
			errs++
		}
		lat[i] = time.Since(t0)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, errs, dials
}

// forEach calls f(0), ..., f(n-1) from workers goroutines, each taking the
// next index, and returns how many calls failed.
func forEach(n, workers int, f func(i int) error) (errs int64) {
	var next int64 = -1
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(atomic.AddInt64(&next, 1))
				if i >= n {
					return
				}
				if f(i) != nil {
					atomic.AddInt64(&errs, 1)
				}
			}
		}()
	}
	wg.Wait()
	return errs
}

// get sends GET url with the X-API-Key key and reads the reply.
func get(client *http.Client, url, key string) error {
	req, _ := http.NewRequest("GET", url, nil)
	req.Header.Set("X-API-Key", key)
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

func pct(lat []time.Duration, p float64) float64 {
	if len(lat) == 0 {
		return 0
	}
	return float64(lat[int(float64(len(lat)-1)*p/100)]) / float64(time.Millisecond)
}

// fill sends n requests with distinct keys to route, as fast as workers allow.
func fill(url string, n, workers int, prefix string) (errs int64) {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: workers}}
	errs = forEach(n, workers, func(i int) error { return get(client, url, prefix+strconv.Itoa(i)) })
	client.CloseIdleConnections()
	return errs
}

// memoryPerKey fills route with n distinct keys on an empty Redis and
// returns used_memory delta per key, the mean MEMORY USAGE of sampled keys,
// and the number of keys.
func (b *bench) memoryPerKey(route string, n int, rep int) (perKey, usage float64, keys int64, err error) {
	if _, err = b.redis.Do("FLUSHALL"); err != nil {
		return
	}
	time.Sleep(200 * time.Millisecond)
	m0, err := b.redis.Info("memory")
	if err != nil {
		return
	}
	if errs := fill(b.traefik.URL("/"+route), n, 32, fmt.Sprintf("mem%d-", rep)); errs > 0 {
		err = fmt.Errorf("%d requests failed", errs)
		return
	}
	m1, err := b.redis.Info("memory")
	if err != nil {
		return
	}
	v, err := b.redis.Do("DBSIZE")
	if err != nil {
		return
	}
	keys = v.(int64)
	u0, _ := strconv.ParseFloat(m0["used_memory"], 64)
	u1, _ := strconv.ParseFloat(m1["used_memory"], 64)
	if keys > 0 {
		perKey = (u1 - u0) / float64(keys)
	}
	var sum float64
	var sampled int
	for i := 0; i < 200; i++ {
		k, err := b.redis.Do("RANDOMKEY")
		if err != nil || k == nil {
			break
		}
		u, err := b.redis.Do("MEMORY", "USAGE", k, "SAMPLES", "0")
		if n, ok := u.(int64); err == nil && ok {
			sum += float64(n)
			sampled++
		}
	}
	if sampled > 0 {
		usage = sum / float64(sampled)
	}
	return perKey, usage, keys, nil
}

// stat is one figure's runs.
type stat []float64

func (s stat) median() float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	c := append(stat(nil), s...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

func (s stat) lo() float64 { c := append(stat(nil), s...); sort.Float64s(c); return c[0] }
func (s stat) hi() float64 { c := append(stat(nil), s...); sort.Float64s(c); return c[len(c)-1] }

// fmtStat prints "median [lo–hi]" with the given precision.
func fmtStat(s stat, prec int) string {
	if len(s) == 0 {
		return "—"
	}
	f := "%." + strconv.Itoa(prec) + "f"
	return fmt.Sprintf(f+" ["+f+"–"+f+"]", s.median(), s.lo(), s.hi())
}

type results struct {
	rps, rpsReject         map[string]stat
	ratio, ratioReject     map[string]stat
	p50, p99, p999         map[string]stat // added, ms
	raw50, raw99, raw999   map[string]stat // absolute, ms
	seq50, seq99           map[string]stat // sequential, added, ms
	seqRaw50, seqRaw99     map[string]stat // sequential, absolute, ms
	cmds, bytes, scripts   map[string]stat // per request, admit pass
	cmdsRej, bytesRej      map[string]stat
	memPerKey, memUsage    map[string]stat
	memKeys                map[string]stat
	conns64, conns512      map[string]stat // Redis connections during saturation
	rate                   float64
	non2xxAdmit, errsFixed int64
	errsSeq                int64
}

func newResults() *results {
	m := func() map[string]stat { return map[string]stat{} }
	return &results{rps: m(), rpsReject: m(), ratio: m(), ratioReject: m(), p50: m(), p99: m(), p999: m(),
		raw50: m(), raw99: m(), raw999: m(), seq50: m(), seq99: m(), seqRaw50: m(), seqRaw99: m(),
		cmds: m(), bytes: m(), scripts: m(), cmdsRej: m(), bytesRej: m(),
		memPerKey: m(), memUsage: m(), memKeys: m(), conns64: m(), conns512: m()}
}

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

func markdown(res *results, machine string, reps int, wrkDur, fixedDur time.Duration, seq, conns, keys, memKeys int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n\nEach figure: median [min–max] of %d runs. Load: %d API keys (X-API-Key). Saturation: `wrk -t2 -c%d -d%s`. Fixed rate: %.0f requests/s for %s from 64 connections, latency timed from when each request was due (coordinated omission corrected). Sequential: one client on one keep-alive connection sends %d requests one after another (after %d to warm up), nothing else running, each timed from sending to the end of its reply.\n\n",
		machine, reps, keys, conns, wrkDur, res.rate, fixedDur, seq, seqWarmup)
	b.WriteString("| | no middleware | Traefik rateLimit (memory) | Traefik rateLimit (redis) | Tollgate |\n|---|---|---|---|---|\n")
	row := func(name string, m map[string]stat, prec int, skipNone bool) {
		fmt.Fprintf(&b, "| %s |", name)
		for _, rt := range routes {
			if skipNone && rt == "none" || len(m[rt]) == 0 {
				b.WriteString(" — |")
				continue
			}
			fmt.Fprintf(&b, " %s |", fmtStat(m[rt], prec))
		}
		b.WriteString("\n")
	}
	row("throughput, nothing rejected (req/s)", res.rps, 0, false)
	row("… ratio to no middleware", res.ratio, 2, false)
	row("throughput, almost all rejected (req/s)", res.rpsReject, 0, false)
	row("… ratio to no middleware", res.ratioReject, 2, false)
	row(fmt.Sprintf("latency p50 at %.0f req/s (ms)", res.rate), res.raw50, 3, false)
	row("… added p50 (ms)", res.p50, 3, true)
	row("latency p99 (ms)", res.raw99, 3, false)
	row("… added p99 (ms)", res.p99, 3, true)
	row("latency p99.9 (ms)", res.raw999, 3, false)
	row("… added p99.9 (ms)", res.p999, 3, true)
	row("sequential latency p50 (ms)", res.seqRaw50, 3, false)
	row("… added p50 (ms)", res.seq50, 3, true)
	row("sequential latency p99 (ms)", res.seqRaw99, 3, false)
	row("… added p99 (ms)", res.seq99, 3, true)
	row("Redis round trips (script calls) per request", res.scripts, 2, true)
	row(fmt.Sprintf("Redis connections during saturation, wrk -c%d", conns), res.conns64, 0, true)
	row("Redis connections during saturation, wrk -c512", res.conns512, 0, true)
	row("Redis commands per request, those inside the script included (admitted)", res.cmds, 2, true)
	row("Redis bytes in+out per request (admitted)", res.bytes, 0, true)
	row("Redis commands per request, inside the script included (rejected)", res.cmdsRej, 2, true)
	row("Redis bytes in+out per request (rejected)", res.bytesRej, 0, true)
	if memKeys > 0 {
		row(fmt.Sprintf("Redis keys after %d distinct clients", memKeys), res.memKeys, 0, true)
		row("Redis memory per key, used_memory delta (B)", res.memPerKey, 0, true)
		row("Redis memory per key, MEMORY USAGE (B)", res.memUsage, 0, true)
	}
	fmt.Fprintf(&b, "\nNon-2xx responses in the nothing-rejected runs: %d; failed requests in the fixed-rate runs: %d; in the sequential runs (errors and non-2xx): %d.\n", res.non2xxAdmit, res.errsFixed, res.errsSeq)
	return b.String()
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
