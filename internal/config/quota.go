package config

import (
	"sync"
	"time"
)

// maxQuotas bounds the quotas of one owner.
const maxQuotas = 8

// maxQuotaLimit bounds a quota's limit: the script's numbers stay exact.
const maxQuotaLimit = 1000000000000

// QuotaShape is a quota's calendar: its limit, window and zone, and the
// windows around the last instant asked (window).
type QuotaShape struct {
	Limit  int64
	Kind   int
	Loc    *time.Location
	Mu     sync.Mutex
	Bounds []int64 // bucket.WindowBounds at the last look (the root's quotaWindow, under Mu); nil before the first
}
