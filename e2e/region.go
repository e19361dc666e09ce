package e2e

// The multi-region world: N regions, each with its own redis-server, a
// DelayProxy per directed link (region A's peer entry for B points at the
// proxy A->B, in front of B's Redis) and pods. A pod is anything that
// answers requests for a region (a real Traefik replica, or a middleware
// built in-process by a Factory): the load driver and the readings
// (region_load.go) do not care which, so one scenario runs against either.

import (
	"net/http"
	"os"
	"path/filepath"
	"sync"
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
