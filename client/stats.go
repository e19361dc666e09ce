package client

import (
	"sync/atomic"
	"time"
)

// Stats counts what a transport did since it was made. Give one to
// NewTransport with Record; the transport adds to its fields atomically
// while it runs, so read them with Snapshot, at any time and from any
// goroutine. The zero value is ready to use.
//
// For a dashboard, the three to plot are:
//   - Returned per second, against Requests: the refusals the
//     application saw. The transport exists to keep it near zero; when it
//     rises, the budget is spent (MaxWait, MaxRetries) or the method may
//     not be retried.
//   - Refusals per second: how often the server said no. Near zero when
//     this process is alone on its budget; steadily above zero when other
//     clients share it, or after the limit was lowered.
//   - WaitTime over Requests: the latency pacing and retries add to each
//     request, on average; Waits over Requests, how many waited at all.
//
// Retries is what the transport spent to turn refusals into answers;
// Refusals minus Returned of them succeeded or are under way.
type Stats struct {
	Requests int64         // requests given to RoundTrip
	Waits    int64         // requests the pacer held back before sending
	Retries  int64         // requests sent again after a refusal
	Refusals int64         // 429 and 503 answers received, retried or not
	Returned int64         // of the refusals, those returned to the caller
	WaitTime time.Duration // total time requests waited: pacing and Retry-After
}

// Snapshot returns a copy of s, each field read atomically.
func (s *Stats) Snapshot() Stats {
	return Stats{
		Requests: atomic.LoadInt64(&s.Requests),
		Waits:    atomic.LoadInt64(&s.Waits),
		Retries:  atomic.LoadInt64(&s.Retries),
		Refusals: atomic.LoadInt64(&s.Refusals),
		Returned: atomic.LoadInt64(&s.Returned),
		WaitTime: time.Duration(atomic.LoadInt64((*int64)(&s.WaitTime))),
	}
}
