package e2e

// The multi-region world (issue 11): N regions, each with its own
// redis-server, a DelayProxy per directed link (region A's peer entry for
// B points at the proxy A->B, in front of B's Redis) and pods. A pod is
// anything that answers requests for a region (a real Traefik replica, or
// a middleware built in-process by a Factory): the load driver and the
// readings below do not care which, so one scenario runs against either.

import (
	"bufio"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"
)

// RegionSpec names a region and its static weight.
type RegionSpec struct {
	Name   string
	Weight int
}

// Region is one region of a RegionWorld.
type Region struct {
	Name   string
	Weight int
	Redis  *Redis
	Links  map[string]*DelayProxy // by peer name: this region's way to the peer's Redis
	mu     sync.Mutex
	pods   []RegionPod
	rr     uint64
	static float64 // weight / sum of weights
}

// RegionPod is one pod of a region.
type RegionPod interface {
	Name() string
	// Do sends GET path with the API key (X-Api-Key) and returns the reply.
	Do(path, key string) PodReply
	// Metrics returns the exposition of the pod's serveMetrics middleware.
	Metrics() (string, error)
}

// PodReply is what a pod answered.
type PodReply struct {
	Status int
	Header http.Header
	Err    error
}

// RegionWorld is the regions and their links.
type RegionWorld struct {
	Regions []*Region
	Delay   time.Duration // of every link, each way
}

// StartRegions starts a redis-server per region (each in a directory of
// its own under dir) and a DelayProxy per directed link.
func StartRegions(dir string, delay time.Duration, specs ...RegionSpec) (*RegionWorld, error) {
	w := &RegionWorld{Delay: delay}
	var sum int
	for _, s := range specs {
		sum += s.Weight
	}
	for _, s := range specs {
		rdir := filepath.Join(dir, "redis-"+s.Name)
		if err := os.MkdirAll(rdir, 0o755); err != nil {
			w.Close()
			return nil, err
		}
		r, err := StartRedis(rdir)
		if err != nil {
			w.Close()
			return nil, err
		}
		w.Regions = append(w.Regions, &Region{Name: s.Name, Weight: s.Weight, Redis: r, Links: map[string]*DelayProxy{},
			static: float64(s.Weight) / float64(sum)})
	}
	for _, a := range w.Regions {
		for _, b := range w.Regions {
			if a == b {
				continue
			}
			p, err := StartDelayProxy(b.Redis.Addr, delay)
			if err != nil {
				w.Close()
				return nil, err
			}
			a.Links[b.Name] = p
		}
	}
	return w, nil
}

// Close closes the links and kills the Redis servers (the pods are their
// starters' to stop).
func (w *RegionWorld) Close() {
	for _, r := range w.Regions {
		for _, p := range r.Links {
			p.Close()
		}
		if r.Redis != nil {
			r.Redis.Kill()
		}
	}
}

// Region returns the region named name, or nil.
func (w *RegionWorld) Region(name string) *Region {
	for _, r := range w.Regions {
		if r.Name == name {
			return r
		}
	}
	return nil
}

// Options returns the region block of r's middleware options: its name
// and weight, the interval, and every other region as a peer reached
// through r's link to it.
func (w *RegionWorld) Options(r *Region, interval string) map[string]interface{} {
	var peers []interface{}
	for _, p := range w.Regions {
		if p == r {
			continue
		}
		peers = append(peers, map[string]interface{}{
			"name": p.Name, "weight": p.Weight, "timeout": "1s",
			"endpoints": []interface{}{r.Links[p.Name].Addr()},
		})
	}
	return map[string]interface{}{"name": r.Name, "weight": r.Weight, "interval": interval, "peers": peers}
}

// Cut cuts the links between regions a and b, both ways.
func (w *RegionWorld) Cut(a, b string) {
	w.Region(a).Links[b].Cut()
	w.Region(b).Links[a].Cut()
}

// Restore restores the links between a and b.
func (w *RegionWorld) Restore(a, b string) error {
	if err := w.Region(a).Links[b].Restore(); err != nil {
		return err
	}
	return w.Region(b).Links[a].Restore()
}

// LinkStats returns the counters of every link, by "from->to".
func (w *RegionWorld) LinkStats() map[string]ProxyStats {
	m := map[string]ProxyStats{}
	for _, r := range w.Regions {
		for peer, p := range r.Links {
			m[r.Name+"->"+peer] = p.Stats()
		}
	}
	return m
}

// Static is the region's static share: its weight over the sum.
func (r *Region) Static() float64 { return r.static }

// Floor is the region's floor: a tenth of its static share.
func (r *Region) Floor() float64 { return r.static / 10 }

// AddPod adds a pod to the region's rotation.
func (r *Region) AddPod(p RegionPod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pods = append(r.pods, p)
}

// RemovePod takes p out of the rotation (before killing it).
func (r *Region) RemovePod(p RegionPod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, q := range r.pods {
		if q == p {
			r.pods = append(append([]RegionPod{}, r.pods[:i]...), r.pods[i+1:]...)
			return
		}
	}
}

// Pods returns the pods in rotation.
func (r *Region) Pods() []RegionPod {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RegionPod(nil), r.pods...)
}

// next returns the next pod, round robin.
func (r *Region) next() RegionPod {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pods) == 0 {
		return nil
	}
	r.rr++
	return r.pods[r.rr%uint64(len(r.pods))]
}

// Share reads the share a region keeps for a bucket key: the hash
// <key>}s in its Redis, field s (parts per million) and n (demand).
// present is false when the hash does not exist.
func (r *Region) Share(bucketKey string) (ppm, demand int64, present bool, err error) {
	vs, err := redis.Values(r.Redis.Do("HMGET", bucketKey+"}s", "s", "n"))
	if err != nil {
		return 0, 0, false, err
	}
	if len(vs) != 2 || vs[0] == nil {
		return 0, 0, false, nil
	}
	ppm, err = redis.Int64(vs[0], nil)
	if err != nil {
		return 0, 0, true, err
	}
	if vs[1] != nil {
		demand, _ = redis.Int64(vs[1], nil)
	}
	return ppm, demand, true, nil
}

// LeadKey is the key of the region's leader lease.
func (r *Region) LeadKey() string { return "tg{rg:" + r.Name + "}:lead" }

// ReportKey is the key of the region's report.
func (r *Region) ReportKey() string { return "tg{rg:" + r.Name + "}:report" }

// Lead returns who holds the region's lease ("" when nobody does).
func (r *Region) Lead() (string, error) {
	v, err := redis.String(r.Redis.Do("GET", r.LeadKey()))
	if err == redis.ErrNil {
		return "", nil
	}
	return v, err
}

// ReportLen returns the length of the region's report (0 when none).
func (r *Region) ReportLen() (int64, error) {
	return redis.Int64(r.Redis.Do("STRLEN", r.ReportKey()))
}

// MetricValue returns the sum of the series of metric name in an
// exposition whose labels include every label of want, and whether any
// matched.
func MetricValue(exposition, name string, want map[string]string) (float64, bool) {
	var sum float64
	found := false
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		labels := map[string]string{}
		if rest[0] == '{' {
			end := strings.LastIndexByte(rest, '}')
			if end < 0 {
				continue
			}
			for _, kv := range splitLabels(rest[1:end]) {
				if k, v, ok := strings.Cut(kv, "="); ok {
					labels[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
				}
			}
			rest = rest[end+1:]
		}
		match := true
		for k, v := range want {
			if labels[k] != v {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// splitLabels splits a="x",b="y" at the commas outside quotes.
func splitLabels(s string) []string {
	var out []string
	inQ, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			inQ = !inQ
		case ',':
			if !inQ {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// RegionFlow is one client's traffic in one region: Rate requests a
// second for Path, cycling through Keys, round robin over the region's
// pods.
type RegionFlow struct {
	Region string
	Path   string
	Keys   []string
	Rate   float64
}

// RegionSample is one request of a RegionLoad.
type RegionSample struct {
	Region, Key, Pod string
	At               time.Time
	Latency          time.Duration
	Status           int
	Decision         string // X-Tollgate-Decision
	RateLimit        string
	Policy           string // RateLimit-Policy
	Err              error
}

// Failed is a transport error or a 5xx.
func (s RegionSample) Failed() bool { return s.Err != nil || s.Status >= 500 }

func (s RegionSample) String() string {
	if s.Err != nil {
		return fmt.Sprintf("%s %s on %s at %s: %v", s.Region, s.Key, s.Pod, s.At.Format("15:04:05.000"), s.Err)
	}
	return fmt.Sprintf("%s %s on %s at %s: %d (%s) in %v", s.Region, s.Key, s.Pod, s.At.Format("15:04:05.000"), s.Status,
		s.Decision, s.Latency.Round(time.Millisecond))
}

// RegionLoad drives flows until Stop or its deadline.
type RegionLoad struct {
	Start   time.Time
	mu      sync.Mutex
	samples []RegionSample
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	skipped int64 // ticks dropped because maxInFlight requests were pending
}

// maxInFlight bounds a flow's pending requests.
const maxInFlight = 32

// Drive starts the flows; they stop at Stop, or after max at the latest.
func (w *RegionWorld) Drive(max time.Duration, flows ...RegionFlow) *RegionLoad {
	l := &RegionLoad{Start: time.Now(), stop: make(chan struct{})}
	deadline := time.AfterFunc(max, l.halt)
	for _, f := range flows {
		r := w.Region(f.Region)
		if r == nil || f.Rate <= 0 || len(f.Keys) == 0 {
			panic(fmt.Sprintf("bad flow %+v", f))
		}
		l.wg.Add(1)
		go func(f RegionFlow, r *Region) {
			defer l.wg.Done()
			sem := make(chan struct{}, maxInFlight)
			every := time.Duration(float64(time.Second) / f.Rate)
			tick := time.NewTicker(every)
			defer tick.Stop()
			var inflight sync.WaitGroup
			defer inflight.Wait()
			for i := 0; ; i++ {
				select {
				case sem <- struct{}{}:
					inflight.Add(1)
					go func(key string) {
						defer inflight.Done()
						defer func() { <-sem }()
						l.send(r, f.Path, key)
					}(f.Keys[i%len(f.Keys)])
				default:
					atomic.AddInt64(&l.skipped, 1)
				}
				select {
				case <-l.stop:
					return
				case <-tick.C:
				}
			}
		}(f, r)
	}
	go func() { l.wg.Wait(); deadline.Stop() }()
	return l
}

func (l *RegionLoad) send(r *Region, path, key string) {
	p := r.next()
	s := RegionSample{Region: r.Name, Key: key, At: time.Now()}
	if p == nil {
		s.Err = fmt.Errorf("region %s has no pod", r.Name)
	} else {
		s.Pod = p.Name()
		rep := p.Do(path, key)
		s.Latency = time.Since(s.At)
		s.Status, s.Err = rep.Status, rep.Err
		if rep.Header != nil {
			s.Decision = rep.Header.Get("X-Tollgate-Decision")
			s.RateLimit = rep.Header.Get("RateLimit")
			s.Policy = rep.Header.Get("RateLimit-Policy")
		}
	}
	l.mu.Lock()
	l.samples = append(l.samples, s)
	l.mu.Unlock()
}

func (l *RegionLoad) halt() { l.once.Do(func() { close(l.stop) }) }

// Stop ends the flows and waits for their requests.
func (l *RegionLoad) Stop() {
	l.halt()
	l.wg.Wait()
}

// Skipped is the number of ticks dropped because a flow had maxInFlight
// requests pending.
func (l *RegionLoad) Skipped() int64 { return atomic.LoadInt64(&l.skipped) }

// Samples returns the samples sent in [from, to) in region ("" for any).
func (l *RegionLoad) Samples(region string, from, to time.Time) []RegionSample {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []RegionSample
	for _, s := range l.samples {
		if (region == "" || s.Region == region) && !s.At.Before(from) && s.At.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// All returns every sample.
func (l *RegionLoad) All() []RegionSample {
	return l.Samples("", time.Time{}, time.Now().Add(time.Hour))
}

// Since returns the samples of region sent in [Start+from, Start+to).
func (l *RegionLoad) Since(region string, from, to time.Duration) []RegionSample {
	return l.Samples(region, l.Start.Add(from), l.Start.Add(to))
}

// CountAdmitted returns the 200s of ss and the number of samples.
func CountAdmitted(ss []RegionSample) (admitted, total int) {
	for _, s := range ss {
		if s.Err == nil && s.Status == http.StatusOK {
			admitted++
		}
	}
	return admitted, len(ss)
}

// FailedSamples returns the samples that failed (transport error or 5xx).
func FailedSamples(ss []RegionSample) []RegionSample {
	var out []RegionSample
	for _, s := range ss {
		if s.Failed() {
			out = append(out, s)
		}
	}
	return out
}

// Decisions tallies the decision header ("error" for a transport error).
func Decisions(ss []RegionSample) map[string]int {
	m := map[string]int{}
	for _, s := range ss {
		if s.Err != nil {
			m["error"]++
			continue
		}
		m[s.Decision]++
	}
	return m
}

// Bins returns the admitted requests per width from origin, n bins.
func Bins(ss []RegionSample, origin time.Time, width time.Duration, n int) []int {
	out := make([]int, n)
	for _, s := range ss {
		if s.Err != nil || s.Status != http.StatusOK {
			continue
		}
		i := int(s.At.Sub(origin) / width)
		if i >= 0 && i < n {
			out[i]++
		}
	}
	return out
}

// MaxWindow returns the most 200s of ss sent within any span of d, and
// when that span started.
func MaxWindow(ss []RegionSample, d time.Duration) (int, time.Time) {
	var at []time.Time
	for _, s := range ss {
		if s.Err == nil && s.Status == http.StatusOK {
			at = append(at, s.At)
		}
	}
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	best, bestAt := 0, time.Time{}
	j := 0
	for i := range at {
		for j < len(at) && at[j].Sub(at[i]) < d {
			j++
		}
		if j-i > best {
			best, bestAt = j-i, at[i]
		}
	}
	return best, bestAt
}

// Latency returns the p-th percentile (0-100) of the samples' latencies.
func Latency(ss []RegionSample, p float64) time.Duration {
	var ls []time.Duration
	for _, s := range ss {
		if s.Err == nil {
			ls = append(ls, s.Latency)
		}
	}
	if len(ls) == 0 {
		return 0
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	return ls[int(math.Round(float64(len(ls)-1)*p/100))]
}
