package e2e

// The fleet's steady traffic: flows of requests driven until stopped,
// every reply sampled, and the readings of those samples.

import (
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"
)

// flow is one client sending the same request at a steady pace, round-robin
// over the replicas.
type flow struct {
	key, method, path string
	every             time.Duration
}

type sample struct {
	flow
	reply
}

// driver runs flows until Stop and records every reply.
type driver struct {
	mu      sync.Mutex
	samples []sample
	stop    chan struct{}
	wg      sync.WaitGroup
}

func (fe *fleetEnv) drive(flows ...flow) *driver {
	d := &driver{stop: make(chan struct{})}
	for fi, f := range flows {
		d.wg.Add(1)
		go func(fi int, f flow) {
			defer d.wg.Done()
			tick := time.NewTicker(f.every)
			defer tick.Stop()
			for i := fi; ; i++ {
				r := fe.send(i, f.method, f.path, f.key)
				d.mu.Lock()
				d.samples = append(d.samples, sample{f, r})
				d.mu.Unlock()
				select {
				case <-d.stop:
					return
				case <-tick.C:
				}
			}
		}(fi, f)
	}
	return d
}

// Stop ends the flows and waits for them.
func (d *driver) Stop() {
	close(d.stop)
	d.wg.Wait()
}

// window returns the samples of key sent in [from, to).
func (d *driver) window(key string, from, to time.Time) []sample {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []sample
	for _, s := range d.samples {
		if s.key == key && !s.at.Before(from) && s.at.Before(to) {
			out = append(out, s)
		}
	}
	return out
}

// failures returns the samples of key, from any time, that are neither 200
// nor 429.
func (d *driver) failures(key string) []sample {
	var out []sample
	for _, s := range d.window(key, time.Time{}, time.Now().Add(time.Hour)) {
		if s.err != nil || (s.status != 200 && s.status != 429) {
			out = append(out, s)
		}
	}
	return out
}

func (s sample) String() string {
	if s.err != nil {
		return fmt.Sprintf("%s %s %s at %s: %v", s.key, s.method, s.path, s.at.Format("15:04:05.000"), s.err)
	}
	return fmt.Sprintf("%s %s %s at %s on replica %d: %d %s", s.key, s.method, s.path, s.at.Format("15:04:05.000"), s.replica, s.status, s.body)
}

func admitted(ss []sample) (n int, perReplica map[int]int) {
	perReplica = map[int]int{}
	for _, s := range ss {
		if s.err == nil && s.status == 200 {
			n++
			perReplica[s.replica]++
		}
	}
	return n, perReplica
}

// waitScriptCalls waits until Redis has run a script and returns when.
func waitScriptCalls(t *testing.T, r *Redis, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if n, err := r.ScriptCalls(); err == nil && n > 0 {
			return time.Now()
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("Redis ran no script within %v", within)
	return time.Time{}
}

// percentile returns the p-th percentile (0-100) of the latencies.
func percentile(ss []sample, p float64) time.Duration {
	var ls []time.Duration
	for _, s := range ss {
		ls = append(ls, s.latency)
	}
	if len(ls) == 0 {
		return 0
	}
	sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
	return ls[int(float64(len(ls)-1)*p/100)]
}
