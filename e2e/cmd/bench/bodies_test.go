package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
)

// usageOf is the usage object of a JSON document (a body, an event's
// data): nil when it has none or is no JSON.
func usageOf(doc []byte) map[string]int64 {
	var v struct {
		Usage map[string]int64 `json:"usage"`
	}
	if json.Unmarshal(doc, &v) != nil {
		return nil
	}
	return v.Usage
}

// fetch GETs path from the server at url and returns the response, its
// body read.
func fetch(t *testing.T, url, path string) (*http.Response, []byte) {
	t.Helper()
	resp, err := http.Get(url + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestBackendBodies: the bench's backend answers "ok" as the e2e Backend
// does on the other routes, and on each response-cost route its body, the
// same on the three routes of a body: a 4 KB JSON chat completion ending
// in its usage, or an event stream of 200 JSON events, the last of them
// before [DONE] carrying the usage; both name the total in X-Usage-Tokens.
func TestBackendBodies(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(serveBackend))
	defer srv.Close()
	for _, path := range []string{"/none", "/tollgate", "/redis", "/" + leased, "/" + refuseTollgate} {
		resp, body := fetch(t, srv.URL, path)
		if resp.StatusCode != http.StatusOK || string(body) != "ok\n" || resp.Header.Get("Content-Type") != "text/plain" {
			t.Errorf("%s: %d %q (%s), want 200 \"ok\\n\" (text/plain)", path, resp.StatusCode, body, resp.Header.Get("Content-Type"))
		}
	}
	want := map[string][]byte{}
	for _, c := range costRoutes {
		t.Run(c.route, func(t *testing.T) {
			resp, body := fetch(t, srv.URL, "/"+c.route)
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			if got, w := resp.Header.Get(usageTokensHeader), strconv.FormatInt(totalTokens(c.body), 10); got != w {
				t.Errorf("%s: %q, want %q", usageTokensHeader, got, w)
			}
			if w, ok := want[c.body]; ok && !bytes.Equal(body, w) {
				t.Errorf("body differs from the other routes' of %s", c.body)
			}
			want[c.body] = body
			switch c.body {
			case bodyJSON:
				checkJSONBody(t, resp, body)
			case bodySSE:
				checkSSEBody(t, resp, body)
			default:
				t.Fatalf("body %q", c.body)
			}
		})
	}
}

func checkJSONBody(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	if len(body) != jsonBodyLen || resp.ContentLength != jsonBodyLen {
		t.Errorf("%d bytes (Content-Length %d), want %d", len(body), resp.ContentLength, jsonBodyLen)
	}
	u := usageOf(body)
	if u == nil {
		t.Fatalf("no usage in %s", body)
	}
	if u["total_tokens"] != totalTokens(bodyJSON) || u["prompt_tokens"]+u["completion_tokens"] != u["total_tokens"] {
		t.Errorf("usage %v, want total_tokens %d, prompt and completion summing to it", u, totalTokens(bodyJSON))
	}
	if end := `"usage":{"prompt_tokens":250,"completion_tokens":750,"total_tokens":1000}}`; !bytes.HasSuffix(body, []byte(end)) {
		t.Errorf("body ends %q, want it to end in %s", body[len(body)-80:], end)
	}
}

func checkSSEBody(t *testing.T, resp *http.Response, body []byte) {
	t.Helper()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	if resp.ContentLength != -1 || len(body) != sseLen() {
		t.Errorf("Content-Length %d, %d bytes: want a stream (-1) of %d bytes", resp.ContentLength, len(body), sseLen())
	}
	events := strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n")
	if len(events) != sseEvents+1 || events[len(events)-1] != "data: [DONE]" {
		t.Fatalf("%d events, the last %q: want %d and [DONE]", len(events), events[len(events)-1], sseEvents+1)
	}
	for i, e := range events[:sseEvents] {
		data := strings.TrimPrefix(e, "data: ")
		if data == e || !json.Valid([]byte(data)) {
			t.Fatalf("event %d: %q is no data line of JSON", i, e)
		}
		u := usageOf([]byte(data))
		if i < sseEvents-1 && u != nil {
			t.Errorf("event %d carries a usage: %v", i, u)
		}
		if i == sseEvents-1 && (u["total_tokens"] != totalTokens(bodySSE) || u["prompt_tokens"]+u["completion_tokens"] != u["total_tokens"]) {
			t.Errorf("last event's usage %v, want total_tokens %d", u, totalTokens(bodySSE))
		}
		if len(data) > 200 {
			t.Errorf("event %d: %d bytes, want a small one", i, len(data))
		}
	}
}

// TestBackendFlushes: the backend writes each event of the stream on its
// own, flushed, as a streaming server does.
func TestBackendFlushes(t *testing.T) {
	rec := &flushCounter{ResponseRecorder: httptest.NewRecorder()}
	serveBackend(rec, httptest.NewRequest("GET", "/"+costRouteFor(bodySSE, readsBody), nil))
	if rec.flushes != sseEvents+1 || rec.writes != sseEvents+1 {
		t.Errorf("%d writes, %d flushes: want %d of each (every event and [DONE])", rec.writes, rec.flushes, sseEvents+1)
	}
}

type flushCounter struct {
	*httptest.ResponseRecorder
	writes, flushes int
}

func (f *flushCounter) Write(p []byte) (int, error) { f.writes++; return f.ResponseRecorder.Write(p) }
func (f *flushCounter) Flush()                      { f.flushes++; f.ResponseRecorder.Flush() }
