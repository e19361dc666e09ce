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
// 429 the violated policy's t equals Retry-After.

import (
	"net/http"
	"strconv"
	"strings"
)

const (
	problemQuota    = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// policyHeader is the RateLimit-Policy value of ps.
func policyHeader(ps []*policy) string {
	items := make([]string, len(ps))
	for i, p := range ps {
		items[i] = `"` + p.name + `";q=` + strconv.FormatInt(p.average, 10) + ";w=" + strconv.FormatInt(p.periodSecs, 10)
	}
	return strings.Join(items, ", ")
}

// ceilSecs converts ms to whole seconds, rounding up.
func ceilSecs(ms int64) int64 {
	if ms <= 0 {
		return 0
	}
	return (ms + 999) / 1000
}

// setHeaders writes the rate-limit headers of one decision.
func setHeaders(h http.Header, mode int, set *policySet, res []result) {
	if mode&headersIETF != 0 {
		h.Set("RateLimit-Policy", set.policyHeader)
		b := make([]byte, 0, 32*len(res))
		for i := range res {
			if i > 0 {
				b = append(b, ", "...)
			}
			b = append(b, set.quoted[i]...)
			b = append(b, ";r="...)
			b = strconv.AppendInt(b, res[i].remaining, 10)
			b = append(b, ";t="...)
			b = strconv.AppendInt(b, ceilSecs(res[i].waitMS), 10)
		}
		h.Set("RateLimit", string(b))
	}
	if mode&headersLegacy != 0 {
		// The legacy trio describes one policy: the one with the fewest
		// tokens left (on a refusal, the longest wait).
		j := 0
		for i := range res {
			if res[i].waitMS > res[j].waitMS || (res[i].waitMS == res[j].waitMS && res[i].remaining < res[j].remaining) {
				j = i
			}
		}
		h.Set("X-RateLimit-Limit", strconv.FormatInt(set.ps[j].average, 10))
		h.Set("X-RateLimit-Remaining", strconv.FormatInt(res[j].remaining, 10))
		h.Set("X-RateLimit-Reset", strconv.FormatInt(ceilSecs(res[j].fullMS), 10))
	}
}

// writeProblem answers with an RFC 9457 problem: status, Retry-After
// (seconds, at least 1) and a JSON body naming the policies concerned.
func writeProblem(rw http.ResponseWriter, status int, typ, title, detail string, policies []string, retryAfter int64) {
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
	h := rw.Header()
	h.Set("Retry-After", ra)
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("Cache-Control", "no-store")
	rw.WriteHeader(status)
	_, _ = rw.Write(b)
}

// writeQuotaExceeded answers 429 for the policies whose wait is not zero.
func writeQuotaExceeded(rw http.ResponseWriter, set *policySet, res []result) {
	var names []string
	var wait int64
	for i := range res {
		if res[i].waitMS > 0 {
			names = append(names, set.ps[i].name)
			if res[i].waitMS > wait {
				wait = res[i].waitMS
			}
		}
	}
	retry := ceilSecs(wait)
	if retry < 1 {
		retry = 1
	}
	detail := "request quota exhausted for " + strings.Join(names, ", ") + "; retry after " + strconv.FormatInt(retry, 10) + " s"
	writeProblem(rw, http.StatusTooManyRequests, problemQuota, "Too Many Requests", detail, names, retry)
}

// writeUnavailable answers 503 for failureMode closed policies while Redis
// is unavailable.
func writeUnavailable(rw http.ResponseWriter, set *policySet, retry int64) {
	var names []string
	for _, p := range set.ps {
		if p.failClosed {
			names = append(names, p.name)
		}
	}
	detail := "rate limit store unavailable and " + strings.Join(names, ", ") + " fails closed; retry after " + strconv.FormatInt(retry, 10) + " s"
	writeProblem(rw, http.StatusServiceUnavailable, problemCapacity, "Service Unavailable", detail, names, retry)
}
