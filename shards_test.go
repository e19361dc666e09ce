package tollgate

import (
	"math"
	"math/rand"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

func TestShardsSplitTheLimit(t *testing.T) {
	cfg := CreateConfig()
	cfg.Average, cfg.Period, cfg.Burst, cfg.Shards = 100, "1m", 20, 4
	cfg.Rules = []config.Rule{{Name: "search", Average: 40, Burst: 8}}
	s, err := config.Compile(cfg, "api")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*config.Policy{s.Top, s.Rules[0]} {
		if p.Shard.Interval != 4*p.Lim.Interval || p.Shard.Burst != p.Lim.Burst/4 || p.Shard.Cost != p.Lim.Cost {
			t.Fatalf("%s: shard %+v of %+v, want 1/4 of the rate and burst", p.Name, p.Shard, p.Lim)
		}
		// The local fallback shares the whole limit, not a shard's.
		if l := localShare(p, 1); l != p.Lim {
			t.Fatalf("%s: local share %+v, want the whole limit %+v", p.Name, l, p.Lim)
		}
	}
	set := newPolicySet([]*config.Policy{s.Top}, s.KeyLen)
	if call := string(set.cmd.Append(nil, "k", false)); !strings.Contains(call, "\r\n$1\r\n5\r\n") {
		t.Fatalf("call %q does not carry the shard's burst 5", call)
	}
}

func TestShardKeys(t *testing.T) {
	for _, tc := range []struct {
		shards int64
		keyLen int
	}{{1, 14}, {4, 16}, {16, 17}, {1024, 19}} {
		cfg := CreateConfig()
		cfg.Average, cfg.Burst, cfg.Shards = 100, 2000, tc.shards
		s, err := config.Compile(cfg, "api")
		if err != nil {
			t.Fatal(err)
		}
		if s.KeyLen != tc.keyLen {
			t.Fatalf("%d shards: key length %d, want %d", tc.shards, s.KeyLen, tc.keyLen)
		}
		if tc.shards == 1 {
			continue
		}
		key := bucket.ClientKey("api", "h:k")
		seen := map[string]bool{}
		for i := 0; i < 100*int(tc.shards); i++ {
			k := shardKey(s, key)
			if len(k) != s.KeyLen || !strings.HasPrefix(k, key[:len(key)-1]+":") || !strings.HasSuffix(k, "}") || strings.Count(k, "}") != 1 {
				t.Fatalf("shard key %q of %q: want %s:<n>} of length %d", k, key, key[:len(key)-1], s.KeyLen)
			}
			seen[k] = true
		}
		if int64(len(seen)) != tc.shards {
			t.Fatalf("%d shards: %d distinct keys picked", tc.shards, len(seen))
		}
	}
}

func TestShardedRemainingIsScaled(t *testing.T) {
	f := redistest.StartFake(t, "+1 3 0 2000\r\n") // the shard has 3 left
	h := handlerOn(t, f.Addr(), func(c *config.Config) { c.Burst, c.Shards = 20, 4 })
	if got := serve(h, t.Name()).Header().Get("RateLimit"); got != `"api";r=12;t=0` {
		t.Fatalf("RateLimit %q, want r = 4 shards x 3", got)
	}
}

// TestShardingErrorBound measures what a sharded limit admits when a client
// sends a burst at once into full buckets, with the bucket math itself
// (TakeAll) and random shard picks, over 2,000 trials per case:
//
//   - exactly burst requests: on average the README's figures (93.1 for
//     burst 100 over 4 shards, 947.1 for 1000 over 16; `go test -run
//     TestShardingErrorBound -v .` prints them and the worst trial), within
//     4 standard errors of the mean (0.1 to 0.8 requests here), and about
//     burst - 0.4*sqrt(burst*shards), the README's rule of thumb (within
//     40% of the effect it estimates; it is off by 5 to 32%);
//   - then, in the first 20 trials, burst more random requests and every
//     shard drained until it refuses: never more than burst in all, and
//     exactly the shards' whole tokens (burst, or 96 for 100 over 8 shards
//     of 12.5: the README's "choose burst a multiple of N").
//
// Mutations caught (split in compile.go): a shard given the whole burst
// (no burst /= n) admits up to N x burst, and a shard's burst rounded up
// (12.5 -> 13) 104 of 100: "more than the limit"; shards ignored (split
// keeps the whole limit) admits every request of the burst: the mean is
// burst, 7 to 53 requests off. The overflow uses a random source of its
// own, so the published means and worst cases stay those of seed 1.
func TestShardingErrorBound(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	more := rand.New(rand.NewSource(2))
	for _, tc := range []struct {
		burst, shards int
		mean          float64 // published (the README quotes 100/4 and 1000/16)
	}{{20, 2, 18.3}, {100, 4, 93.1}, {100, 8, 87.5}, {1000, 8, 966.8}, {1000, 16, 947.1}} {
		p, err := config.CompileLimit("", int64(tc.burst), "1h", int64(tc.burst), 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Split(int64(tc.shards)); err != nil {
			t.Fatal(err)
		}
		lims := []bucket.Limit{p.Shard}
		const trials, capped = 2000, 20
		wantCap := tc.burst - tc.burst%tc.shards // the shards' whole tokens
		total, sumSq, worst := 0.0, 0.0, tc.burst
		d := make([]int64, 4)
		tat := make([]float64, 1)
		take := func(tats []float64, s int) bool {
			tat[0] = tats[s]
			ok := bucket.TakeAll(lims, tat, 1e9, d) // all at one instant
			tats[s] = tat[0]
			return ok
		}
		for trial := 0; trial < trials; trial++ {
			tats := make([]float64, tc.shards) // full buckets
			admitted := 0
			for i := 0; i < tc.burst; i++ { // take, inlined: Yaegi runs this 4.4 million times
				s := rng.Intn(tc.shards)
				tat[0] = tats[s]
				if bucket.TakeAll(lims, tat, 1e9, d) {
					admitted++
				}
				tats[s] = tat[0]
			}
			total += float64(admitted)
			sumSq += float64(admitted) * float64(admitted)
			if admitted < worst {
				worst = admitted
			}
			if trial >= capped {
				continue
			}
			all := admitted
			for i := 0; i < tc.burst; i++ {
				if take(tats, more.Intn(tc.shards)) {
					all++
				}
			}
			for s := 0; s < tc.shards; s++ {
				for i := 0; i <= tc.burst && take(tats, s); i++ {
					all++
				}
			}
			if all > tc.burst || all != wantCap {
				t.Fatalf("burst %d, %d shards, trial %d: %d admitted from full buckets in all (%d of the first %d requests), want %d: never more than the limit",
					tc.burst, tc.shards, trial, all, admitted, tc.burst, wantCap)
			}
		}
		mean := total / trials
		se := math.Sqrt((sumSq/trials - mean*mean) / (trials - 1)) // of the mean
		bound := float64(tc.burst) - 0.4*math.Sqrt(float64(tc.burst*tc.shards))
		t.Logf("burst %4d over %2d shards: mean %.1f admitted (standard error %.2f; rule of thumb %.1f), worst %d",
			tc.burst, tc.shards, mean, se, bound, worst)
		if math.Abs(mean-tc.mean) > 4*se+0.05 {
			t.Fatalf("burst %d, %d shards: mean %.2f admitted, published %.1f (standard error %.2f)", tc.burst, tc.shards, mean, tc.mean, se)
		}
		if math.Abs(mean-bound) > 0.4*(float64(tc.burst)-bound) {
			t.Fatalf("burst %d, %d shards: mean %.1f admitted, the README's rule of thumb says about %.1f", tc.burst, tc.shards, mean, bound)
		}
	}
}
