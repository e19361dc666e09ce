package main

import (
	"net/http"
	"strings"
	"testing"
)

// TestRefusals: a refusal prints its problem's title, detail and field
// on stderr and exits 1; a refusal that is not a problem is named by its
// status and content.
func TestRefusals(t *testing.T) {
	cases := []struct {
		desc  string
		args  []string
		reply func(w http.ResponseWriter, r *http.Request) // nil: the contract's
		want  string                                       // stderr
	}{
		{desc: "unknown class", args: []string{"inspect", "-class", "nope", "-key", "K"},
			want: "tollgatectl inspect: the endpoint refused (400 Bad Request): Bad parameter: class \"nope\" is not configured (field \"class\")\n"},
		{desc: "unknown policy", args: []string{"reset", "-class", "api", "-key", "K", "-policy", "nope"},
			want: "tollgatectl reset: the endpoint refused (400 Bad Request): Bad parameter: class api has no policy \"nope\" (field \"policy\")\n"},
		{desc: "Redis down", args: []string{"override", "-class", "api", "-key", "K", "-average", "1", "-burst", "1"},
			reply: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, 503, "Redis unavailable", "dial tcp 10.0.0.5:6379: connection refused", "")
			},
			want: "tollgatectl override: the endpoint failed (503 Service Unavailable): Redis unavailable: dial tcp 10.0.0.5:6379: connection refused\n"},
		{desc: "method not allowed", args: []string{"inspect", "-class", "api", "-key", "K"},
			reply: func(w http.ResponseWriter, _ *http.Request) {
				writeProblem(w, 405, "Method not allowed", "", "")
			},
			want: "tollgatectl inspect: the endpoint refused (405 Method Not Allowed): Method not allowed\n"},
		{desc: "problem without title", args: []string{"inspect", "-class", "api", "-key", "K"},
			reply: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(409)
				_, _ = w.Write([]byte(`{"type":"https://tollgate.dev/problems/conflict","extra":[1,2]}`))
			},
			want: "tollgatectl inspect: the endpoint refused (409 Conflict): https://tollgate.dev/problems/conflict\n"},
		{desc: "basic auth", args: []string{"inspect", "-class", "api", "-key", "K"},
			reply: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("WWW-Authenticate", `Basic realm="traefik"`)
				w.Header().Set("Content-Type", "text/plain; charset=utf-8")
				w.WriteHeader(401)
				_, _ = w.Write([]byte("401 Unauthorized\n"))
			},
			want: "tollgatectl inspect: the endpoint refused (401 Unauthorized) without a problem report (\"text/plain; charset=utf-8\"): " +
				"401 Unauthorized; check -user and -password ($TOLLGATE_ADMIN_USER, $TOLLGATE_ADMIN_PASSWORD)\n"},
		{desc: "no route", args: []string{"reset", "-class", "api", "-key", "K"},
			reply: func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) },
			want: "tollgatectl reset: the endpoint refused (404 Not Found) without a problem report (\"text/plain; charset=utf-8\"): " +
				"404 page not found; is -url the admin endpoint's route?\n"},
		{desc: "problem that is not one", args: []string{"inspect", "-class", "api", "-key", "K"},
			reply: func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(500)
				_, _ = w.Write([]byte(`{"title":42}`))
			},
			want: "tollgatectl inspect: the endpoint failed (500 Internal Server Error) without a problem report (\"application/problem+json\"): {\"title\":42}\n"},
		{desc: "empty 502", args: []string{"inspect", "-class", "api", "-key", "K"},
			reply: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(502) },
			want:  "tollgatectl inspect: the endpoint failed (502 Bad Gateway) without a problem report (no Content-Type)\n"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeAdmin(t)
			f.setReply(tc.reply)
			code, stdout, stderr := runTool(nil, append([]string{"-url", f.srv.URL}, tc.args...)...)
			if code != exitFailed {
				t.Errorf("exit %d, want %d", code, exitFailed)
			}
			if stderr != tc.want {
				t.Errorf("stderr:\n%q\nwant:\n%q", stderr, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

// TestMalformedReplies: a reply that is not what the contract says exits
// 1 with a message that says so, prints nothing on stdout, never the key
// on stderr, and never panics.
func TestMalformedReplies(t *testing.T) {
	const key = "SECRET-KEY"
	json200 := func(body string) func(w http.ResponseWriter, r *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(body))
		}
	}
	huge := `{"class":"api","key":"` + key + `","policies":[],"pad":"` + strings.Repeat("x", maxReply) + `"}`
	inspect := []string{"inspect", "-class", "api", "-key", key}
	reset := []string{"reset", "-class", "api", "-key", key}
	cases := []struct {
		desc  string
		args  []string
		reply func(w http.ResponseWriter, r *http.Request)
		want  string // in stderr
	}{
		{desc: "HTML", args: inspect, reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<html>" + key + "</html>"))
		}, want: `the reply is not JSON but "text/html"`},
		{desc: "no Content-Type", args: inspect, reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header()["Content-Type"] = nil
			_, _ = w.Write([]byte(stateJSON(key, "null")))
		}, want: "the reply is not JSON but no Content-Type"},
		{desc: "not JSON", args: inspect, reply: json200("<html>" + key), want: "the reply is not Tollgate's state of a key: invalid character '<'"},
		{desc: "truncated", args: inspect, reply: json200(stateJSON(key, "null")[:60]), want: "the reply is not Tollgate's state of a key: unexpected end of JSON input"},
		{desc: "trailing data", args: inspect, reply: json200(stateJSON(key, "null") + "{}"), want: "the reply is not Tollgate's state of a key: invalid character '{' after top-level value"},
		{desc: "an array", args: inspect, reply: json200(`[]`), want: "the reply is not Tollgate's state of a key: json: cannot unmarshal array"},
		{desc: "null", args: inspect, reply: json200(`null`), want: "the reply is not Tollgate's state of a key: it has no class or no policies"},
		{desc: "another object", args: inspect, reply: json200(`{"status":"ok"}`), want: "it has no class or no policies"},
		{desc: "no policies", args: inspect, reply: json200(`{"class":"api","key":"` + key + `","policies":null}`), want: "it has no class or no policies"},
		{desc: "a limit as text", args: inspect, reply: json200(strings.Replace(stateJSON(key, "null"), `"limit":20`, `"limit":"20"`, 1)),
			want: "json: cannot unmarshal string into Go struct field"},
		{desc: "a fractional limit", args: inspect, reply: json200(strings.Replace(stateJSON(key, "null"), `"limit":20`, `"limit":20.5`, 1)),
			want: "json: cannot unmarshal number 20.5"},
		{desc: "a limit past int64", args: inspect, reply: json200(strings.Replace(stateJSON(key, "null"), `"limit":20`, `"limit":1e400`, 1)),
			want: "json: cannot unmarshal number 1e400"},
		{desc: "an override as a number", args: inspect, reply: json200(stateJSON(key, "5")), want: "json: cannot unmarshal number into Go struct field"},
		{desc: "another key", args: inspect, reply: json200(stateJSON("other", "null")), want: "it is about another class or key"},
		{desc: "another class", args: inspect, reply: json200(strings.Replace(stateJSON(key, "null"), `"class":"api"`, `"class":"web"`, 1)),
			want: "it is about another class or key"},
		{desc: "larger than 1 MiB", args: inspect, reply: json200(huge), want: "the reply is larger than 1 MiB"},
		{desc: "a refusal larger than 1 MiB", args: inspect, reply: func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(400)
			_, _ = w.Write([]byte(huge))
		}, want: "the endpoint refused (400 Bad Request) with a reply larger than 1 MiB\n"},
		{desc: "204 for a GET", args: inspect, reply: func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) },
			want: "the endpoint answered 204 where Tollgate's admin endpoint answers 200"},
		{desc: "200 for a DELETE", args: reset, reply: json200(stateJSON(key, "null")),
			want: "the endpoint answered 200 where Tollgate's admin endpoint answers 204"},
		{desc: "a redirect", args: reset, reply: func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "https://elsewhere.example/admin?key="+key, http.StatusFound)
		}, want: `the endpoint redirected (302) to "https://elsewhere.example/admin": give -url the address to call`},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeAdmin(t)
			f.setReply(tc.reply)
			code, stdout, stderr := runTool(nil, append([]string{"-url", f.srv.URL}, tc.args...)...)
			if code != exitFailed {
				t.Errorf("exit %d, want %d", code, exitFailed)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr:\n%s\nwant it to hold %q", stderr, tc.want)
			}
			if strings.Contains(stderr, key) {
				t.Errorf("stderr holds the key:\n%.300s", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %.200q, want nothing", stdout)
			}
			if n := len(f.requests()); n != 1 {
				t.Errorf("the endpoint got %d requests, want 1 (a redirect is not followed)", n)
			}
		})
	}
}

// TestHostileText: text from the endpoint reaches the terminal with its
// control characters escaped, in the table and in an error.
func TestHostileText(t *testing.T) {
	f := newFakeAdmin(t)
	f.setReply(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"class":"api","key":"K","policies":[{"name":"a\u001b[2J\tb\u202e\n","limit":1,"window":1,"remaining":1,"reset":1,` +
				`"override":{"average":1,"burst":1,"period":"1s\r","expiresAt":"\u0007"}}],"quotas":[{"name":"q\u0000\ud800","limit":1,"remaining":1,"reset":1}]}`))
			return
		}
		writeProblem(w, 400, "Bad\x1b]0;pwned\x07", "line\nbreak \xff", "f\tx")
	})
	code, stdout, stderr := runTool(nil, "-url", f.srv.URL, "inspect", "-class", "api", "-key", "K")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{`a\u001b[2J\u0009b\u202e\u000a  `, `1/1s\u000d burst 1 until \u0007`, `q\u0000` + "\ufffd  "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("stdout:\n%s\nwant it to hold %q", stdout, want)
		}
	}
	code, _, stderr = runTool(nil, "-url", f.srv.URL, "reset", "-class", "api", "-key", "K")
	want := "tollgatectl reset: the endpoint refused (400 Bad Request): Bad\\u001b]0;pwned\\u0007: line\\u000abreak \ufffd (field \"f\\u0009x\")\n"
	if code != exitFailed || stderr != want {
		t.Errorf("exit %d, stderr:\n%q\nwant %d and:\n%q", code, stderr, exitFailed, want)
	}
	for _, out := range []string{stdout, stderr} {
		if strings.ContainsAny(out, "\x00\x07\x1b\r\t\u202e") {
			t.Errorf("a control character reached the terminal: %q", out)
		}
	}
}

// TestKeyNotInNetworkErrors: an endpoint that cannot be reached or does
// not answer in time is named without the query, so without the key.
func TestKeyNotInNetworkErrors(t *testing.T) {
	const key = "SECRET-KEY"
	t.Run("refused", func(t *testing.T) {
		f := newFakeAdmin(t)
		u := f.srv.URL
		f.srv.Close()
		code, _, stderr := runTool(nil, "-url", u+"/admin", "inspect", "-class", "api", "-key", key)
		if code != exitFailed || !strings.Contains(stderr, "calling "+u+"/admin: ") {
			t.Errorf("exit %d, stderr %q; want %d and the endpoint named", code, stderr, exitFailed)
		}
		if strings.Contains(stderr, key) || strings.Contains(stderr, "class=") {
			t.Errorf("stderr holds the query: %q", stderr)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		f := newFakeAdmin(t)
		release := make(chan struct{})
		defer close(release)
		f.setReply(func(_ http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		code, _, stderr := runTool(nil, "-url", f.srv.URL, "-timeout", "50ms", "inspect", "-class", "api", "-key", key)
		want := "tollgatectl inspect: calling " + f.srv.URL + ": no answer within 50ms\n"
		if code != exitFailed || stderr != want {
			t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, exitFailed, want)
		}
	})
}

// FuzzReply: no reply body, whatever its status, makes the tool panic,
// and a state it accepts prints in both formats. (go test runs the
// seeds; go test -fuzz FuzzReply explores.)
func FuzzReply(f *testing.F) {
	f.Add(200, stateJSON("K", "null"))
	f.Add(200, stateJSON("K", `{"average":1,"burst":1,"period":"1s","expiresAt":null}`))
	f.Add(200, `{"class":"api","key":"K","policies":[null],"quotas":[null],"concurrency":{}}`)
	f.Add(200, `{"class":"api","key":"K","policies":[{"window":-9223372036854775808,"reset":9223372036854775807}]}`)
	f.Add(400, `{"title":"t","detail":"d","field":"f"}`)
	f.Add(400, `{"title":["x"]}`)
	f.Add(204, ``)
	f.Fuzz(func(t *testing.T, status int, body string) {
		if status < 200 || status > 599 {
			return
		}
		srv := newFakeAdmin(t)
		srv.setReply(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		})
		for _, format := range []string{"table", "json"} {
			code, _, stderr := runTool(nil, "-url", srv.srv.URL, "-o", format, "inspect", "-class", "api", "-key", "K")
			if code != 0 && code != exitFailed {
				t.Fatalf("-o %s: exit %d: %s", format, code, stderr)
			}
		}
	})
}
