package tollgate

// What clients are told: the IETF RateLimit-Policy / RateLimit headers
// (draft-ietf-httpapi-ratelimit-headers, structured-field form), or the
// legacy X-RateLimit-* trio, on every response; and on refusal an RFC 9457
// application/problem+json body with Retry-After.
//
//	RateLimit-Policy: "api";q=100;w=60, "login";q=5;w=60
//	RateLimit: "api";r=17;t=0, "login";r=4;t=0
//
// r is the whole tokens left after this request (before it, when refused);
// t the seconds, rounded up, until a request of this cost can pass, so on a
// 429 the violated policy's t equals Retry-After; a calendar quota's t is
// the seconds to its window's end (quota.go).

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
)

const (
	problemQuota    = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// ceilSecs converts ms to whole seconds, rounding up.
func ceilSecs(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return (ms + 999) / 1000
}

// setHeaders writes the rate-limit headers of decision d (see TakeAll). The
// common case, IETF headers for one policy, is all it does itself.
func setHeaders(h http.Header, mode int, set *policySet, d []int64) {
	if mode == headersIETF && len(set.ps) == 1 && !set.quotas {
		h.Set("RateLimit-Policy", set.policyHeader)
		h.Set("RateLimit", set.quoted[0]+";r="+strconv.FormatInt(d[1], 10)+";t="+strconv.FormatInt((d[2]+999)/1000, 10))
		return
	}
	setAllHeaders(h, mode, set, d)
}

// setAllHeaders is setHeaders for any mode and number of policies.
func setAllHeaders(h http.Header, mode int, set *policySet, d []int64) {
	if mode&headersIETF != 0 {
		ph := set.policyHeader
		if set.quotas {
			ph = quotaCall(set).policyHeader
		}
		h.Set("RateLimit-Policy", ph)
		h.Set("RateLimit", rateLimitValue(set, d))
	}
	if mode&(headersLegacy|headersDraft07) == 0 {
		return
	}
	// The legacy trio and the draft 07 form describe one policy: the one
	// with the fewest tokens left (on a refusal, the longest wait).
	j := 0
	for i := 1; i < len(set.ps); i++ {
		if d[2+3*i] > d[2+3*j] || (d[2+3*i] == d[2+3*j] && d[1+3*i] < d[1+3*j]) {
			j = i
		}
	}
	limit := strconv.FormatInt(set.ps[j].Average, 10)
	remaining := strconv.FormatInt(d[1+3*j], 10)
	reset := strconv.FormatInt(ceilSecs(d[3+3*j]), 10)
	if set.ps[j].Cap != nil {
		reset = strconv.FormatInt(ceilSecs(d[2+3*j]), 10) // a cap's third number is its slot
	}
	if mode&headersLegacy != 0 {
		h.Set("X-RateLimit-Limit", limit)
		h.Set("X-RateLimit-Remaining", remaining)
		h.Set("X-RateLimit-Reset", reset)
	}
	if mode&headersDraft07 != 0 {
		p := set.ps[j]
		burst := ";burst=" + strconv.FormatInt(int64(p.Lim.Burst), 10)
		if p.Quota != nil || p.Cap != nil {
			burst = "" // a quota and a cap have none
		}
		h.Set("RateLimit-Policy", limit+";w="+strconv.FormatInt(quotaSecs(p), 10)+burst)
		h.Set("RateLimit", "limit="+limit+", remaining="+remaining+", reset="+reset)
	}
}

// rateLimitValue is the RateLimit value of decision d over set.
func rateLimitValue(set *policySet, d []int64) string {
	b := make([]byte, 0, 32*len(set.ps))
	for i, p := range set.ps {
		if i > 0 {
			b = append(b, ", "...)
		}
		t := d[2+3*i] // a rate's: until a request fits; a quota's: until its window ends
		if p.Quota != nil {
			t = d[3+3*i]
		}
		b = strconv.AppendInt(append(append(b, set.quoted[i]...), ";r="...), d[1+3*i], 10)
		b = strconv.AppendInt(append(b, ";t="...), ceilSecs(t), 10)
	}
	return string(b)
}

// writeProblem answers with an RFC 9457 problem (see problem).
func writeProblem(rw http.ResponseWriter, status int, typ, title, detail string, policies []string, retryAfter int64) {
	b := problem(rw.Header(), status, typ, title, detail, policies, retryAfter)
	rw.WriteHeader(status)
	_, _ = rw.Write(b)
}

// problem sets in h the headers of an RFC 9457 problem, with Retry-After
// (seconds, at least 1), and returns its JSON body naming the policies
// concerned.
func problem(h http.Header, status int, typ, title, detail string, policies []string, retryAfter int64) []byte {
	if retryAfter < 1 {
		retryAfter = 1
	}
	ra := strconv.FormatInt(retryAfter, 10)
	b := make([]byte, 0, 320)
	b = append(b, `{"type":`...)
	b = strconv.AppendQuote(b, typ)
	b = append(b, `,"title":`...)
	b = strconv.AppendQuote(b, title)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(status), 10)
	b = append(b, `,"detail":`...)
	b = strconv.AppendQuote(b, detail)
	b = append(b, `,"violated-policies":[`...)
	for i, p := range policies {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, p)
	}
	b = append(b, `],"retry_after":`...)
	b = append(b, ra...)
	b = append(b, "}\n"...)
	h.Set("Retry-After", ra)
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	return b
}

// violated returns the policies of a refusal (those with a wait) and the
// longest wait, ms.
func violated(set *policySet, d []int64) (names []string, waitMS int64) {
	for i, p := range set.ps {
		if w := d[2+3*i]; w > 0 {
			names = append(names, p.Name)
			if w > waitMS {
				waitMS = w
			}
		}
	}
	return names, waitMS
}

// writeQuotaExceeded answers 429 for the policies whose wait is not zero.
func writeQuotaExceeded(rw http.ResponseWriter, set *policySet, d []int64) {
	b := quotaExceeded(rw.Header(), set, d)
	rw.WriteHeader(http.StatusTooManyRequests)
	_, _ = rw.Write(b)
}

// quotaExceeded sets in h the headers of writeQuotaExceeded's problem and
// returns its body.
func quotaExceeded(h http.Header, set *policySet, d []int64) []byte {
	names, wait := violated(set, d)
	retry := ceilSecs(wait)
	if retry < 1 {
		retry = 1
	}
	detail := "request quota exhausted for " + strings.Join(names, ", ") + "; retry after " + strconv.FormatInt(retry, 10) + " s"
	if capsOnly(set, d) {
		detail = "concurrency limit reached for " + strings.Join(names, ", ") + ": too many requests in flight; retry after " + strconv.FormatInt(retry, 10) + " s"
	}
	return problem(h, http.StatusTooManyRequests, problemQuota, "Too Many Requests", detail, names, retry)
}

// writeUnavailable answers 503 for failureMode closed policies while Redis
// is unavailable.
func writeUnavailable(rw http.ResponseWriter, set *policySet, retry int64) {
	var names []string
	for _, p := range set.ps {
		if p.FailClosed {
			names = append(names, p.Name)
		}
	}
	detail := "rate limit store unavailable and " + strings.Join(names, ", ") + " fails closed; retry after " + strconv.FormatInt(retry, 10) + " s"
	writeProblem(rw, http.StatusServiceUnavailable, problemCapacity, "Service Unavailable", detail, names, retry)
}

// quotaSecs is the length of p's current window in seconds (a quota), or
// its period's (a rate).
func quotaSecs(p *config.Policy) int64 {
	if p.Quota == nil {
		return p.PeriodSecs
	}
	b := quotaWindow(p.Quota, quotaNow())
	return bucket.WindowSeconds(b[1], b[2])
}

// capsOnly reports whether every policy that refused decision d is a
// concurrency cap.
func capsOnly(set *policySet, d []int64) bool {
	for i, p := range set.ps {
		if d[2+3*i] > 0 && p.Cap == nil {
			return false
		}
	}
	return true
}
