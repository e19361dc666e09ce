package tollgate

import (
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
