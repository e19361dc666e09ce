package e2e

// The load driver of the multi-region world (region.go): flows of requests
// to the regions' pods, their samples, and the readings of those samples.

import (
	"fmt"
	"math"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

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
