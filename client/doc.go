// Package client calls an API limited by Tollgate, or by any server that
// sends the IETF RateLimit headers, without being refused: its transport
// paces requests to what the server's buckets will admit, and retries a
// refusal after its Retry-After plus jitter, so that many requests
// refused together do not come back together.
//
//	stats := &client.Stats{}
//	c := &http.Client{Transport: client.NewTransport(nil, client.Record(stats))}
//
// It is plain compiled Go, standard library only; Traefik never loads it.
//
// # What it reads
//
// Each form Tollgate's headers option sends: ietf (the RFC 9651
// structured fields of draft-ietf-httpapi-ratelimit-headers, each
// RateLimit item matched to its RateLimit-Policy item by name and
// partition key pk), draft07 (a RateLimit dictionary limit, remaining,
// reset and a RateLimit-Policy limit;w;burst), legacy (X-RateLimit-Limit,
// -Remaining, -Reset, the reset in seconds or, from 10^9 on, a Unix time)
// and both (the ietf part is read). The structured fields go through a
// bounded parser (a field of at most 4 KB, 32 members, 16 parameters, 32
// items in an inner list): a field that does not parse, or passes a
// bound, is ignored, and so is an item with a negative or non-integer r
// or t. Times are cut at ten years and counts at 2^40. A policy whose
// quota unit qu is not "requests" (Tollgate's concurrency caps) is not
// paced.
//
// # The pacing model
//
// Every policy a response names is taken to be a token bucket (a GCRA):
// one token comes back every interval I = w/q seconds, and the bucket
// holds at most its burst. The transport keeps a copy of each, per host
// name (without the port: replicas reached on several ports share it),
// policy name and partition key. The copy is one instant Z: it holds
// (now-Z)/I tokens, at most the burst (draft07 says it; otherwise the
// largest r+1 a response has shown), so its next token is free at Z+I.
//
// A request takes a token from each policy its host's last response
// named: at once when one is free and nobody waits, else in line, served
// one token per I as they come back. Sending it takes the token from the
// copy (Z += I). So a busy transport sends one request per I, and after
// an idle time up to the burst at once.
//
// Every response moves Z later when it shows less than the copy counts:
// "r tokens left, none renewed for t seconds" implies Z = s + t - r*I,
// where s is when the request left, plus I for each request sent after
// it and not answered yet (the server's r could not count them; the
// answers already in are taken to be counted). Tollgate's t is 0 while a
// token is left, and the wait for the next, rounded up to whole seconds,
// when none is: so with r = 0 a t within a second of I is read as min(I,
// t). A draft07 reset is the time until the bucket is full, rounded up:
// Z = s + (t-1) - burst*I, or s - r*I if later. Z never moves earlier:
// the copy counts on no more than both its own accounts and the server's
// last word allow.
// With a fixed window, the r tokens left are so spread to end at the
// reset, and then come one per I; with Tollgate's bucket, a response
// showing less than the copy (another client spends the same budget; a
// lower limit) holds the line back at once.
//
// Without a rate (legacy headers, or a RateLimit item without its
// policy), the interval is t/r: the r tokens left spread evenly until the
// reset. That never exceeds a fixed window, but against a token bucket
// (Tollgate's legacy mode says no window) it sends far less than the
// limit: choose the ietf or draft07 headers.
//
// Before a host's first response with limits, requests are not paced:
// the transport cannot know the limit. A wait in line ends at the
// request's turn, at its context's end (RoundTrip then returns the
// context's error at once) or when the request's waits would pass
// MaxWait: then it is sent unpaced and the server decides.
//
// # Retries
//
// A 429 or 503 with Retry-After (seconds, or an HTTP date read against
// the response's Date) is retried after Retry-After plus full jitter: a
// wait in [Retry-After, 2*Retry-After) drawn from a sequence that spreads
// the retries of refusals that came together evenly over the window (any
// n draws in a row fall about 1/n apart). Each policy keeps a token for
// each retry at the instant it comes back: fresh requests leave it one,
// so the retries go at their jittered instants, not in a queue. Only
// idempotent requests are retried (see RetryAll), only when the body can
// be sent again (none, or GetBody set), at most MaxRetries times and
// while the request's waits stay within MaxWait; otherwise the refusal is
// returned as it came.
//
// # Memory and concurrency
//
// The transport is safe for concurrent use. It keeps per policy one
// instant, the interval, the burst, the requests in flight and those
// waiting (both bounded by the caller's concurrency), and per host the
// names of its policies: at most MaxPolicies policies and 1024 hosts, the
// least recently used forgotten past that. Nothing runs between requests:
// a timer per policy with waiters hands out its tokens, and stops when
// the line is empty.
package client
