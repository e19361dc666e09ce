package main

// cappedSource adds the probe of a concurrency cap, set up by
// stagesSource's setup.
const cappedSource = `package tollgate

import (
	"context"

	"github.com/tollgate-dev/tollgate/internal/config"
)

// probeC has a cap of 10^6 per client beside the rate (never full).
var probeC *Tollgate

func probeCappedSetup() error {
	cfg := probeConfig(probeAddr)
	cfg.Concurrency = &config.Concurrency{Max: 1000000, Key: "client"}
	cfg.Redis.DB = 5
	h, err := New(context.Background(), probeNext, cfg, "probe-capped")
	if err != nil {
		return err
	}
	probeC = h.(*Tollgate)
	return nil
}

// ProbeServeCapped is ServeHTTP admitted by Redis, a rate and a slot
// taken in one call, the slot given back in a second call when next
// returns.
func ProbeServeCapped(n int) {
	for i := 0; i < n; i++ {
		probeC.ServeHTTP(probeRW, probeReq)
	}
}
`
