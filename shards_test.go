package tollgate

import (
	"math"
	"math/rand"
	"strings"
	"testing"
)

func TestShardsSplitTheLimit(t *testing.T) {
	cfg := CreateConfig()
	cfg.Average, cfg.Period, cfg.Burst, cfg.Shards = 100, "1m", 20, 4
	cfg.Rules = []Rule{{Name: "search", Average: 40, Burst: 8}}
	s, err := compile(cfg, "api")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*policy{s.top, s.rules[0]} {
		if p.shard.interval != 4*p.lim.interval || p.shard.burst != p.lim.burst/4 || p.shard.cost != p.lim.cost {
			t.Fatalf("%s: shard %+v of %+v, want 1/4 of the rate and burst", p.name, p.shard, p.lim)
		}
		// The local fallback shares the whole limit, not a shard's.
		if l := p.localShare(1); l != p.lim {
			t.Fatalf("%s: local share %+v, want the whole limit %+v", p.name, l, p.lim)
		}
	}
	set := newPolicySet([]*policy{s.top}, s.keyLen)
	if !strings.Contains(string(set.cmd.tail), "\r\n5\r\n") {
		t.Fatalf("command tail %q does not carry the shard's burst 5", set.cmd.tail)
	}
}

func TestShardKeys(t *testing.T) {
	for _, tc := range []struct {
		shards int64
		keyLen int
	}{{1, 14}, {4, 16}, {16, 17}, {1024, 19}} {
		cfg := CreateConfig()
		cfg.Average, cfg.Burst, cfg.Shards = 100, 2000, tc.shards
		s, err := compile(cfg, "api")
		if err != nil {
			t.Fatal(err)
		}
		if s.keyLen != tc.keyLen {
			t.Fatalf("%d shards: key length %d, want %d", tc.shards, s.keyLen, tc.keyLen)
		}
		if tc.shards == 1 {
			continue
		}
		key := clientKey("api", "h:k")
		seen := map[string]bool{}
		for i := 0; i < 100*int(tc.shards); i++ {
			k := s.shardKey(key)
			if len(k) != s.keyLen || !strings.HasPrefix(k, key[:len(key)-1]+":") || !strings.HasSuffix(k, "}") || strings.Count(k, "}") != 1 {
				t.Fatalf("shard key %q of %q: want %s:<n>} of length %d", k, key, key[:len(key)-1], s.keyLen)
			}
			seen[k] = true
		}
		if int64(len(seen)) != tc.shards {
			t.Fatalf("%d shards: %d distinct keys picked", tc.shards, len(seen))
		}
	}
}

func TestShardedRemainingIsScaled(t *testing.T) {
	f := startFake(t, "+1 3 0 2000\r\n") // the shard has 3 left
	h := handlerOn(t, f.l.Addr().String(), func(c *Config) { c.Burst, c.Shards = 20, 4 })
	if got := serve(h, t.Name()).Header().Get("RateLimit"); got != `"api";r=12;t=0` {
		t.Fatalf("RateLimit %q, want r = 4 shards x 3", got)
	}
}

// TestShardingErrorBound measures what a sharded limit admits when a client
// sends exactly burst requests at once into full buckets, with the bucket
// math itself (takeAll) and random shard picks: never more than burst, on
// average about burst - 0.4*sqrt(burst*shards) (the README's bound), over
// 2,000 trials per case. `go test -run TestShardingErrorBound -v .` prints
// the figures.
func TestShardingErrorBound(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, tc := range []struct{ burst, shards int }{{20, 2}, {100, 4}, {100, 8}, {1000, 8}, {1000, 16}} {
		p, err := compileLimit("", int64(tc.burst), "1h", int64(tc.burst), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.split(int64(tc.shards)); err != nil {
			t.Fatal(err)
		}
		lims := []limit{p.shard}
		const trials = 2000
		total, worst := 0, tc.burst
		d := make([]int64, 4)
		for trial := 0; trial < trials; trial++ {
			tats := make([]float64, tc.shards) // full buckets
			admitted := 0
			for i := 0; i < tc.burst; i++ {
				s := rng.Intn(tc.shards)
				tat := []float64{tats[s]}
				if takeAll(lims, tat, 1e9, d) { // all at one instant
					admitted++
				}
				tats[s] = tat[0]
			}
			if admitted > tc.burst {
				t.Fatalf("burst %d, %d shards: %d admitted, more than the limit", tc.burst, tc.shards, admitted)
			}
			total += admitted
			if admitted < worst {
				worst = admitted
			}
		}
		mean := float64(total) / trials
		bound := float64(tc.burst) - 0.4*math.Sqrt(float64(tc.burst*tc.shards))
		t.Logf("burst %4d over %2d shards: mean %.1f admitted (bound %.1f), worst %d", tc.burst, tc.shards, mean, bound, worst)
		if math.Abs(mean-bound) > 0.05*float64(tc.burst)+0.5 {
			t.Fatalf("burst %d, %d shards: mean %.1f admitted, the README says about %.1f", tc.burst, tc.shards, mean, bound)
		}
	}
}
