package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeAdmin is an admin endpoint keeping the contract of docs/admin.md
// for one class, api (a policy api, a quota daily, a concurrency cap),
// that records every request it gets. With a reply set (setReply), the
// reply answers instead, after the request is recorded.
type fakeAdmin struct {
	srv *httptest.Server

	mu    sync.Mutex
	reqs  []recorded
	reply func(w http.ResponseWriter, r *http.Request) // nil: the contract
}

// recorded is a request as the fake admin endpoint got it.
type recorded struct {
	method   string
	path     string
	rawQuery string
	query    url.Values
	header   http.Header
	host     string
	body     string
}

func newFakeAdmin(t *testing.T) *fakeAdmin {
	t.Helper()
	f := &fakeAdmin{}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// setReply makes reply answer the next requests; nil: the contract.
func (f *fakeAdmin) setReply(reply func(w http.ResponseWriter, r *http.Request)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reply = reply
}

// requests returns the requests received so far.
func (f *fakeAdmin) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// only returns the one request received, failing the test unless there
// was exactly one.
func (f *fakeAdmin) only(t *testing.T) recorded {
	t.Helper()
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("the endpoint got %d requests, want 1", len(reqs))
	}
	return reqs[0]
}

func (f *fakeAdmin) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	f.mu.Lock()
	f.reqs = append(f.reqs, recorded{
		method: r.Method, path: r.URL.Path, rawQuery: r.URL.RawQuery, query: r.URL.Query(),
		header: r.Header.Clone(), host: r.Host, body: string(body),
	})
	reply := f.reply
	f.mu.Unlock()
	if reply != nil {
		reply(w, r)
		return
	}
	contract(w, r, body)
}

// contract answers as the admin endpoint does.
func contract(w http.ResponseWriter, r *http.Request, body []byte) {
	q := r.URL.Query()
	class, key := q.Get("class"), strings.Join(q["key"], ",") // several: a composite key, joined as the endpoint shows it
	switch {
	case class == "":
		writeProblem(w, 400, "Bad parameter", "class is required", "class")
		return
	case class != "api":
		writeProblem(w, 400, "Bad parameter", fmt.Sprintf("class %q is not configured", class), "class")
		return
	case key == "":
		writeProblem(w, 400, "Bad parameter", "key is required", "key")
		return
	}
	switch {
	case r.Method == http.MethodGet:
		writeState(w, key, "null")
	case r.Method == http.MethodDelete && q.Get("override") == "1":
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodDelete:
		if p, ok := q["policy"]; ok && p[0] != "api" && p[0] != "daily" {
			writeProblem(w, 400, "Bad parameter", fmt.Sprintf("class api has no policy %q", p[0]), "policy")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case r.Method == http.MethodPut:
		var o struct {
			Average, Burst int64
			Period, TTL    string
		}
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&o); err != nil {
			writeProblem(w, 400, "Bad override", err.Error(), "")
			return
		}
		if _, err := time.ParseDuration(o.Period); err != nil || o.Average <= 0 || o.Burst <= 0 {
			writeProblem(w, 400, "Bad override", "average, burst and period are required", "")
			return
		}
		expires := "null"
		if o.TTL != "" {
			expires = `"2026-12-07T19:00:00Z"`
		}
		writeState(w, key, fmt.Sprintf(`{"average":%d,"burst":%d,"period":%q,"expiresAt":%s}`, o.Average, o.Burst, o.Period, expires))
	default:
		w.Header().Set("Allow", "GET, PUT, DELETE")
		writeProblem(w, 405, "Method not allowed", r.Method+" is not one of GET, PUT, DELETE", "")
	}
}

// stateJSON is the state of key in class api, with override (JSON) on
// policy api, as the endpoint sends it: with a field the tool does not
// know (generation).
func stateJSON(key, override string) string {
	k, _ := json.Marshal(key)
	return `{"class":"api","key":` + string(k) + `,"policies":[{"name":"api","limit":20,"window":60,"remaining":13,"reset":21,"override":` + override +
		`}],"quotas":[{"name":"daily","limit":1000,"remaining":990,"reset":3600}],"concurrency":{"max":5,"inFlight":1},"generation":7}`
}

func writeState(w http.ResponseWriter, key, override string) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, stateJSON(key, override))
}

func writeProblem(w http.ResponseWriter, status int, title, detail, field string) {
	p := map[string]interface{}{"type": "https://tollgate.dev/problems/admin", "title": title, "status": status, "detail": detail}
	if field != "" {
		p["field"] = field
	}
	b, _ := json.Marshal(p)
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// runTool runs the tool with args and the environment env (nothing else
// of the process's), and returns its exit status and output.
func runTool(env map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = runEnv(args, func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}
