package e2e

// The multi-region suite. A world is 2 or 3 regions, each with
// its own redis-server and pods, and a DelayProxy (40 ms each way) per
// directed link: region A's peer entry for B is the proxy A->B in front of
// B's Redis, so every byte one region reads from another crosses a link
// the test can count, cut and restore.
//
// Pods are real Traefik replicas (2 per region, each region's fleet
// watching a dynamic file of its own) or in-process middlewares built by
// the scenario suite's loaders (compiled, and one Yaegi interpreter per
// pod). The scenarios are functions of the world, whatever its pods.
//
// Every limit is 20 a second, burst 20, keyed by X-Api-Key, interval 1 s.
// Measured figures are logged as "FIGURE name=value".

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	regionAverage  = 20 // per second: the global limit
	regionBurst    = 20
	regionInterval = time.Second
	regionDelay    = 40 * time.Millisecond // each way, on every link
	regionPods     = 2                     // per region
)

// figure logs a measured figure, greppable: "FIGURE name=value".
func figure(t *testing.T, name string, format string, args ...interface{}) {
	t.Helper()
	t.Logf("FIGURE %s=%s", name, fmt.Sprintf(format, args...))
}

// startRegionWorld starts the regions' Redis servers and links (skipped
// without redis-server, but under CI).
func startRegionWorld(t *testing.T, specs ...RegionSpec) *RegionWorld {
	t.Helper()
	w, err := StartRegions(t.TempDir(), regionDelay, specs...)
	if err != nil {
		if NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	return w
}

func twoRegions() []RegionSpec {
	return []RegionSpec{{Name: "eu-west", Weight: 1}, {Name: "us-east", Weight: 1}}
}

// regionOpts is the limit of the suite for region r: class api, on r's
// Redis, with the region block; kv overrides.
func regionOpts(w *RegionWorld, r *Region, kv ...interface{}) map[string]interface{} {
	return limitOpts(r.Redis.Addr, append([]interface{}{
		"class", "api", "average", regionAverage, "period", "1s", "burst", regionBurst,
		"replicas", regionPods, "decisionHeader", "X-Tollgate-Decision",
		"redis.timeout", "250ms", "redis.probeInterval", "1s",
		"region", w.Options(r, regionInterval.String()),
	}, kv...)...)
}

// strictKV makes regionOpts the fail-closed class "strict" (/strict).
var strictKV = []interface{}{"class", "strict", "failureMode", "closed"}

func withKV(base []interface{}, kv ...interface{}) []interface{} {
	return append(append([]interface{}{}, base...), kv...)
}

// traefikPod is a Traefik replica of a region.
type traefikPod struct {
	name string
	tr   *Traefik
}

func (p *traefikPod) Name() string { return p.name }

func (p *traefikPod) Do(path, key string) PodReply {
	req, _ := http.NewRequest("GET", p.tr.URL(path), nil)
	req.Header.Set("X-Api-Key", key)
	resp, err := fleetClient.Do(req)
	if err != nil {
		return PodReply{Err: err}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return PodReply{Status: resp.StatusCode, Header: resp.Header}
}

func (p *traefikPod) Metrics() (string, error) {
	status, _, body, err := getBody(p.tr.URL(metricsPath))
	if err == nil && status != 200 {
		err = fmt.Errorf("%s: GET %s: %d", p.name, metricsPath, status)
	}
	return string(body), err
}

// kill ends the process at once (SIGKILL: it releases nothing).
func (p *traefikPod) kill() {
	_ = p.tr.process.cmd.Process.Kill()
	<-p.tr.process.done
}

// regionDynamic is a region fleet's dynamic configuration: the limited
// routers / (class api) and /strict (class strict, failing closed), and
// the metrics router.
func regionDynamic(w *RegionWorld, r *Region, kv ...interface{}) map[string]interface{} {
	return withMetricsRouter(dynamicConf(
		route{"api", "PathPrefix(`/`)", regionOpts(w, r, kv...)},
		route{"strict", "PathPrefix(`/strict`)", regionOpts(w, r, withKV(kv, strictKV...)...)},
	))
}

// needTraefik skips the test without a Traefik binary (fails under CI).
func needTraefik(t *testing.T) {
	t.Helper()
	if _, err := TraefikBinary(); err != nil {
		if NeedTraefik(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
}

// startRegionFleets starts regionPods Traefik replicas per region, the
// regions' fleets at once.
func startRegionFleets(t *testing.T, w *RegionWorld, kv ...interface{}) {
	t.Helper()
	type started struct {
		r   *Region
		f   *Fleet
		err error
	}
	ch := make(chan started, len(w.Regions))
	for _, r := range w.Regions {
		dir := t.TempDir()
		go func(r *Region) {
			f, err := StartFleetWith(dir, regionPods, regionDynamic(w, r, kv...), nil)
			ch <- started{r, f, err}
		}(r)
	}
	var firstErr error
	for range w.Regions {
		s := <-ch
		if s.err != nil {
			if firstErr == nil {
				firstErr = s.err
			}
			continue
		}
		f, r := s.f, s.r
		t.Cleanup(func() {
			f.Stop()
			if t.Failed() {
				for _, tr := range f.Replicas {
					t.Logf("%s/%s log:\n%s", r.Name, tr.Name, tr.Log())
				}
			}
		})
		for _, tr := range f.Replicas {
			r.AddPod(&traefikPod{name: r.Name + "/" + tr.Name, tr: tr})
		}
		if err := f.WaitRouters("enabled", "api@file", "strict@file", "tollgate-metrics@file"); err != nil && firstErr == nil {
			firstErr = fmt.Errorf("region %s: %w", r.Name, err)
		}
	}
	if firstErr != nil {
		if NeedTraefik(firstErr) {
			t.Skip(firstErr)
		}
		t.Fatal(firstErr)
	}
}

// inProcessPod is a pod built by a Factory in this process: its api and
// strict middlewares and its metrics middleware.
type inProcessPod struct {
	name                 string
	api, strict, metrics http.Handler
}

func (p *inProcessPod) Name() string { return p.name }

func (p *inProcessPod) Do(path, key string) PodReply {
	h := p.api
	if strings.HasPrefix(path, "/strict") {
		h = p.strict
	}
	rec := do(h, "GET", path, key)
	return PodReply{Status: rec.Code, Header: rec.Header()}
}

func (p *inProcessPod) Metrics() (string, error) {
	rec := httptest.NewRecorder()
	p.metrics.ServeHTTP(rec, httptest.NewRequest("GET", metricsPath, nil))
	if rec.Code != 200 {
		return "", fmt.Errorf("%s: metrics: %d", p.name, rec.Code)
	}
	return rec.Body.String(), nil
}

// startRegionPods builds regionPods pods of kind per region. Compiled, the
// pods share this process's registry (one instance); under Yaegi each pod
// is an interpreter of its own, as a Traefik process is.
func startRegionPods(t *testing.T, w *RegionWorld, kind string, kv ...interface{}) {
	t.Helper()
	e := &env{t: t, kind: kind, logs: &syncBuffer{}}
	t.Cleanup(func() {
		if t.Failed() && e.logs.String() != "" {
			t.Logf("plugin stderr:\n%s", e.logs.String())
		}
	})
	for _, r := range w.Regions {
		for i := 0; i < regionPods; i++ {
			f := e.pod()
			r.AddPod(&inProcessPod{
				name:    fmt.Sprintf("%s/%s-%d", r.Name, kind, i+1),
				api:     e.handler(f, "api@file", regionOpts(w, r, kv...)),
				strict:  e.handler(f, "strict@file", regionOpts(w, r, withKV(kv, strictKV...)...)),
				metrics: e.handler(f, "tollgate-metrics@file", map[string]interface{}{"serveMetrics": true}),
			})
		}
	}
}

// regionScenario is one scenario, run against a world of either kind of
// pods.
type regionScenario struct {
	name string
	run  func(t *testing.T, w *RegionWorld)
}

func runRegionScenarios(t *testing.T, w *RegionWorld, ss ...regionScenario) {
	for _, s := range ss {
		s := s
		t.Run(s.name, func(t *testing.T) { s.run(t, w) })
	}
}

// The core scenarios, run compiled, under Yaegi and on Traefik.
var coreRegionScenarios = []regionScenario{
	{"OneRegion", scenarioOneRegion},
	{"Split7030", scenarioSplit},
	{"FailClosedStatic", scenarioFailClosedStatic},
	{"LinkCut", scenarioLinkCut},
}

func TestRegionInProcess(t *testing.T) {
	for _, kind := range kinds {
		kind := kind
		t.Run(kind, func(t *testing.T) {
			w := startRegionWorld(t, twoRegions()...)
			startRegionPods(t, w, kind)
			runRegionScenarios(t, w, coreRegionScenarios...)
		})
	}
}

func TestRegionFleet(t *testing.T) {
	needTraefik(t)
	w := startRegionWorld(t, twoRegions()...)
	startRegionFleets(t, w)
	// The destructive ones last: a link cut and restored, a pod killed,
	// a Redis killed.
	runRegionScenarios(t, w,
		regionScenario{"OneRegion", scenarioOneRegion},
		regionScenario{"Split7030", scenarioSplit},
		regionScenario{"ClientMoves", scenarioClientMoves},
		regionScenario{"PeerCommandsPerInterval", scenarioPeerCommands},
		regionScenario{"LinkCut", scenarioLinkCut},
		regionScenario{"LeaderKilled", scenarioLeaderKilled},
		regionScenario{"RedisKilled", scenarioRedisKilled},
	)
}

func TestRegionThreeRegions(t *testing.T) {
	// Floors of 1/30 each: all traffic in one region gets 1 - 2/30.
	w := startRegionWorld(t, RegionSpec{"eu-west", 1}, RegionSpec{"us-east", 1}, RegionSpec{"ap-south", 1})
	startRegionPods(t, w, "compiled")
	runRegionScenarios(t, w, regionScenario{"OneRegion", scenarioOneRegion})
}

// ---- readings ----

func ppmOf(share float64) int64 { return int64(math.Round(share * 1e6)) }

// shareOrStatic is a share as read, the static share when absent.
func shareOrStatic(r *Region, ppm int64, present bool) int64 {
	if !present {
		return ppmOf(r.Static())
	}
	return ppm
}

// atStatic: the hash is gone or holds the static share (±0.1%).
func atStatic(r *Region, ppm int64, present bool) bool {
	return !present || abs64(ppm-ppmOf(r.Static())) <= 1000
}

func abs64(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// allInOneShare is the share of a region that has all of a key's traffic:
// 1 minus the others' floors.
func allInOneShare(w *RegionWorld, r *Region) float64 {
	s := 1.0
	for _, o := range w.Regions {
		if o != r {
			s -= o.Floor()
		}
	}
	return s
}

// demandShare is the share region r earns by the model (the plugin's
// shares.go, written out: it is the spec) when each region asks demand[i]
// tokens a second: its guarantee (its need of the limit, at least its
// floor, at most its static share), then the spare by excess need, past
// every need by need.
func demandShare(w *RegionWorld, r *Region, demand []float64) float64 {
	var spare, excess, needs float64 = 1, 0, 0
	var mine, mineNeed, t float64
	for i, o := range w.Regions {
		need := math.Min(demand[i]/regionAverage, 1)
		g := math.Max(math.Min(need, o.Static()), o.Floor())
		spare -= g
		excess += math.Max(need-g, 0)
		needs += need
		if o == r {
			t, mine, mineNeed = g, math.Max(need-g, 0), need
		}
	}
	switch {
	case spare <= 0:
	case excess >= spare:
		t += spare * mine / excess
	case needs > 0:
		t += mine + (spare-excess)*mineNeed/needs
	default:
		t += spare * r.Static()
	}
	return t
}

// shareString formats a share reading.
func shareString(ppm, n int64, present bool) string {
	if !present {
		return "absent"
	}
	return fmt.Sprintf("%d(n=%d)", ppm, n)
}

// mustShare reads r's share of bk, failing the test on a Redis error.
func mustShare(t *testing.T, r *Region, bk string) (int64, int64, bool) {
	t.Helper()
	ppm, n, present, err := r.Share(bk)
	if err != nil {
		t.Fatalf("%s: HMGET %s}s: %v", r.Name, bk, err)
	}
	return ppm, n, present
}

// logShares logs every region's share of bk as a figure and returns the
// sum of those present.
func logShares(t *testing.T, w *RegionWorld, name, bk string) (sum int64) {
	t.Helper()
	var parts []string
	for _, r := range w.Regions {
		ppm, n, present, err := r.Share(bk)
		if err != nil {
			parts = append(parts, r.Name+":"+err.Error())
			continue
		}
		if present {
			sum += ppm
		}
		parts = append(parts, r.Name+":"+shareString(ppm, n, present))
	}
	figure(t, name, "%s", strings.Join(parts, ","))
	return sum
}

// regionTimeline logs each region's admitted requests per second of load.
func regionTimeline(t *testing.T, w *RegionWorld, l *RegionLoad, name string, secs int) {
	t.Helper()
	for _, r := range w.Regions {
		bins := Bins(l.Samples(r.Name, l.Start, l.Start.Add(time.Duration(secs)*time.Second)), l.Start, time.Second, secs)
		s := make([]string, len(bins))
		for i, b := range bins {
			s[i] = strconv.Itoa(b)
		}
		figure(t, name+"_admitted_per_s_"+r.Name, "%s", strings.Join(s, ","))
	}
}

// noFailures fails the test for any transport error or 5xx in ss.
func noFailures(t *testing.T, what string, ss []RegionSample) {
	t.Helper()
	if f := FailedSamples(ss); len(f) > 0 {
		t.Errorf("%s: %d of %d requests failed, first: %v", what, len(f), len(ss), f[0])
	}
}

// rateOf is the 200s of ss per second over d.
func rateOf(ss []RegionSample, d time.Duration) float64 {
	n, _ := CountAdmitted(ss)
	return float64(n) / d.Seconds()
}

// podMetric reads a metric of a pod's exposition.
func podMetric(p RegionPod, name string, labels map[string]string) (float64, bool, error) {
	body, err := p.Metrics()
	if err != nil {
		return 0, false, err
	}
	v, ok := MetricValue(body, name, labels)
	return v, ok, nil
}

// leaders returns the pods of r whose tollgate_region_leader is 1.
func leaders(r *Region) ([]RegionPod, error) {
	var out []RegionPod
	for _, p := range r.Pods() {
		v, _, err := podMetric(p, "tollgate_region_leader", map[string]string{"region": r.Name})
		if err != nil {
			return nil, err
		}
		if v == 1 {
			out = append(out, p)
		}
	}
	return out, nil
}

// sumMetric sums a metric over r's pods (compiled pods share a process:
// an increase is what to compare, not a total).
func sumMetric(r *Region, name string, labels map[string]string) float64 {
	var sum float64
	for _, p := range r.Pods() {
		if v, _, err := podMetric(p, name, labels); err == nil {
			sum += v
		}
	}
	return sum
}

// rateLimitR returns the r= of the RateLimit header's first item, or -1.
func rateLimitR(h string) int {
	for _, p := range strings.Split(strings.Split(h, ",")[0], ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(p), "r="); ok {
			n, err := strconv.Atoi(v)
			if err == nil {
				return n
			}
		}
	}
	return -1
}
