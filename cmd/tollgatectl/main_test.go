package main

import (
	"bytes"
	"encoding/base64"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// goldenState is the table of the fake endpoint's state for key K.
const goldenState = `class:  api
key:    K

POLICY  LIMIT  WINDOW  REMAINING  RESET  OVERRIDE
api     20     1m      13         21s    -

QUOTA  LIMIT  REMAINING  RESET
daily  1000   990        1h

concurrency: 1 in flight, max 5
`

// goldenStateJSON is the same state with -o json: the endpoint's JSON,
// its unknown field included, re-indented.
const goldenStateJSON = `{
  "class": "api",
  "key": "K",
  "policies": [
    {
      "name": "api",
      "limit": 20,
      "window": 60,
      "remaining": 13,
      "reset": 21,
      "override": null
    }
  ],
  "quotas": [
    {
      "name": "daily",
      "limit": 1000,
      "remaining": 990,
      "reset": 3600
    }
  ],
  "concurrency": {
    "max": 5,
    "inFlight": 1
  },
  "generation": 7
}
`

// TestRequests: each command sends the contract's request (method,
// query, body), with basic auth and the -H headers.
func TestRequests(t *testing.T) {
	cases := []struct {
		desc   string
		args   []string
		method string
		query  url.Values
		body   string // "": none
	}{
		{desc: "inspect", args: []string{"inspect", "-class", "api", "-key", "K"},
			method: "GET", query: url.Values{"class": {"api"}, "key": {"K"}}},
		{desc: "reset", args: []string{"reset", "-class", "api", "-key", "K"},
			method: "DELETE", query: url.Values{"class": {"api"}, "key": {"K"}}},
		{desc: "reset one policy", args: []string{"reset", "-class", "api", "-key", "K", "-policy", "daily"},
			method: "DELETE", query: url.Values{"class": {"api"}, "key": {"K"}, "policy": {"daily"}}},
		{desc: "override", args: []string{"override", "-class", "api", "-key", "K", "-average", "1000", "-burst", "50", "-period", "1m", "-ttl", "24h"},
			method: "PUT", query: url.Values{"class": {"api"}, "key": {"K"}},
			body: `{"average":1000,"burst":50,"period":"1m","ttl":"24h"}`},
		{desc: "override without ttl or period", args: []string{"override", "-class", "api", "-key", "K", "-average", "7", "-burst", "3"},
			method: "PUT", query: url.Values{"class": {"api"}, "key": {"K"}},
			body: `{"average":7,"burst":3,"period":"1s"}`},
		{desc: "override delete", args: []string{"override", "-class", "api", "-key", "K", "-delete"},
			method: "DELETE", query: url.Values{"class": {"api"}, "key": {"K"}, "override": {"1"}}},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeAdmin(t)
			args := append([]string{"-url", f.srv.URL + "/tollgate/admin", "-user", "ops", "-password", "pa:ss",
				"-H", "X-Tenant: blue", "-H", "X-Trace:  a b ", "-H", "x-trace: c", "-H", "Host: admin.internal"}, tc.args...)
			code, stdout, stderr := runTool(nil, args...)
			if code != 0 {
				t.Fatalf("exit %d, want 0; stderr: %s", code, stderr)
			}
			if stderr != "" {
				t.Errorf("stderr = %q, want nothing", stderr)
			}
			if stdout == "" {
				t.Error("stdout is empty")
			}
			r := f.only(t)
			if r.method != tc.method {
				t.Errorf("method = %s, want %s", r.method, tc.method)
			}
			if r.path != "/tollgate/admin" {
				t.Errorf("path = %q, want /tollgate/admin", r.path)
			}
			if !reflect.DeepEqual(r.query, tc.query) {
				t.Errorf("query = %v, want %v", r.query, tc.query)
			}
			if r.body != tc.body {
				t.Errorf("body = %q, want %q", r.body, tc.body)
			}
			if ct := r.header.Get("Content-Type"); tc.body != "" && ct != "application/json" {
				t.Errorf("Content-Type = %q, want application/json", ct)
			}
			wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte("ops:pa:ss"))
			if got := r.header.Get("Authorization"); got != wantAuth {
				t.Errorf("Authorization = %q, want %q", got, wantAuth)
			}
			if got := r.header["X-Tenant"]; !reflect.DeepEqual(got, []string{"blue"}) {
				t.Errorf("X-Tenant = %q, want [blue]", got)
			}
			if got := r.header["X-Trace"]; !reflect.DeepEqual(got, []string{"a b", "c"}) {
				t.Errorf("X-Trace = %q, want [a b c]", got)
			}
			if r.host != "admin.internal" {
				t.Errorf("Host = %q, want admin.internal", r.host)
			}
		})
	}
}

// TestOutput: the table and json outputs of each command, golden.
func TestOutput(t *testing.T) {
	overridden := strings.Replace(goldenState,
		"api     20     1m      13         21s    -\n",
		"api     20     1m      13         21s    1000/1m burst 50 until 2026-12-07T19:00:00Z\n", 1)
	cases := []struct {
		desc string
		args []string
		want string
	}{
		{desc: "inspect", args: []string{"inspect", "-class", "api", "-key", "K"}, want: goldenState},
		{desc: "inspect json", args: []string{"-o", "json", "inspect", "-class", "api", "-key", "K"}, want: goldenStateJSON},
		{desc: "override", args: []string{"override", "-class", "api", "-key", "K", "-average", "1000", "-burst", "50", "-period", "1m", "-ttl", "24h"},
			want: overridden},
		{desc: "override without ttl", args: []string{"override", "-class", "api", "-key", "K", "-average", "1000", "-burst", "50", "-period", "1m"},
			want: strings.Replace(goldenState, "21s    -\n", "21s    1000/1m burst 50 until removed\n", 1)},
		{desc: "override json", args: []string{"-o", "json", "override", "-class", "api", "-key", "K", "-average", "1000", "-burst", "50", "-period", "1m", "-ttl", "24h"},
			want: strings.Replace(goldenStateJSON, `"override": null`, `"override": {
        "average": 1000,
        "burst": 50,
        "period": "1m",
        "expiresAt": "2026-12-07T19:00:00Z"
      }`, 1)},
		{desc: "reset", args: []string{"reset", "-class", "api", "-key", "K"},
			want: "ok: the key's buckets refilled and its quotas reset (class \"api\")\n"},
		{desc: "reset one policy", args: []string{"reset", "-class", "api", "-key", "K", "-policy", "daily"},
			want: "ok: policy \"daily\" of the key reset (class \"api\")\n"},
		{desc: "reset json", args: []string{"-o", "json", "reset", "-class", "api", "-key", "K"}, want: "{\"ok\":true}\n"},
		{desc: "override delete", args: []string{"override", "-class", "api", "-key", "K", "-delete"},
			want: "ok: the key's override removed (class \"api\")\n"},
		{desc: "override delete json", args: []string{"override", "-class", "api", "-key", "K", "-delete", "-o", "json"}, want: "{\"ok\":true}\n"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeAdmin(t)
			code, stdout, stderr := runTool(nil, append([]string{"-url", f.srv.URL}, tc.args...)...)
			if code != 0 || stderr != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, stderr)
			}
			if stdout != tc.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", stdout, tc.want)
			}
		})
	}
}

// TestEnvironment: -url, -user and -password default to the environment;
// the flags win over it; run reads the process's environment.
func TestEnvironment(t *testing.T) {
	f := newFakeAdmin(t)
	env := map[string]string{envURL: f.srv.URL + "/env", envUser: "env-user", envPassword: "env-pass"}
	basic := func(user, pass string) string {
		return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	}

	if code, _, stderr := runTool(env, "inspect", "-class", "api", "-key", "K"); code != 0 {
		t.Fatalf("from the environment: exit %d: %s", code, stderr)
	}
	r := f.requests()[0]
	if r.path != "/env" || r.header.Get("Authorization") != basic("env-user", "env-pass") {
		t.Errorf("from the environment: path %q, Authorization %q", r.path, r.header.Get("Authorization"))
	}

	if code, _, stderr := runTool(env, "inspect", "-url", f.srv.URL+"/flag", "-user", "u", "-password", "p", "-class", "api", "-key", "K"); code != 0 {
		t.Fatalf("flags over the environment: exit %d: %s", code, stderr)
	}
	r = f.requests()[1]
	if r.path != "/flag" || r.header.Get("Authorization") != basic("u", "p") {
		t.Errorf("flags over the environment: path %q, Authorization %q", r.path, r.header.Get("Authorization"))
	}

	if code, _, stderr := runTool(map[string]string{envURL: f.srv.URL}, "inspect", "-class", "api", "-key", "K"); code != 0 {
		t.Fatalf("no auth: exit %d: %s", code, stderr)
	}
	if got := f.requests()[2].header.Get("Authorization"); got != "" {
		t.Errorf("no user: Authorization = %q, want none", got)
	}

	if code, _, stderr := runTool(env, "inspect", "-password", "", "-class", "api", "-key", "K"); code != 0 {
		t.Fatalf("an empty -password: exit %d: %s", code, stderr)
	}
	if got := f.requests()[3].header.Get("Authorization"); got != basic("env-user", "") {
		t.Errorf("an empty -password over the environment's: Authorization = %q, want %q", got, basic("env-user", ""))
	}

	t.Setenv(envURL, f.srv.URL+"/process")
	t.Setenv(envUser, "proc")
	t.Setenv(envPassword, "proc-pass")
	var out, errOut bytes.Buffer
	if code := run([]string{"-o", "json", "inspect", "-class", "api", "-key", "K"}, &out, &errOut); code != 0 {
		t.Fatalf("run: exit %d: %s", code, errOut.String())
	}
	r = f.requests()[4]
	if r.path != "/process" || r.header.Get("Authorization") != basic("proc", "proc-pass") || out.String() != goldenStateJSON {
		t.Errorf("run: path %q, Authorization %q, stdout:\n%s", r.path, r.header.Get("Authorization"), out.String())
	}
}

// TestURLQuery: -url's own query parameters are kept, but never one of
// the contract's: a URL cannot turn a reset into an override's removal.
func TestURLQuery(t *testing.T) {
	f := newFakeAdmin(t)
	code, _, stderr := runTool(nil, "-url", f.srv.URL+"/admin?token=t%20x&class=evil&override=1&policy=api#frag",
		"reset", "-class", "api", "-key", "K")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := f.only(t)
	if want := "class=api&key=K&token=t%20x"; r.rawQuery != want {
		t.Errorf("query = %q, want %q", r.rawQuery, want)
	}
}

// TestKeyRoundTrip: a key of any bytes reaches the endpoint as it was
// given, percent-encoded (a space as %20), and the state of that key is
// printed.
func TestKeyRoundTrip(t *testing.T) {
	keys := []string{
		"a&b=c",
		"with space",
		"  lead and trail  ",
		"ünïcødé 🚦 日本",
		"a+b%41%zz;c,d",
		"/path?q=1#frag",
		"key=K&class=evil&override=1",
		"\"quoted\" 'single' \\back",
	}
	for _, key := range keys {
		t.Run(key, func(t *testing.T) {
			f := newFakeAdmin(t)
			code, stdout, stderr := runTool(nil, "-url", f.srv.URL, "inspect", "-class", "api", "-key", key)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			r := f.only(t)
			if got := r.query["key"]; len(got) != 1 || got[0] != key {
				t.Errorf("the endpoint got key %q, want %q", got, key)
			}
			if got := r.query["class"]; len(got) != 1 || got[0] != "api" {
				t.Errorf("the endpoint got class %q, want [api]", got)
			}
			if len(r.query) != 2 {
				t.Errorf("query %q has %d parameters, want 2", r.rawQuery, len(r.query))
			}
			if strings.Contains(r.rawQuery, "+") || strings.Contains(r.rawQuery, " ") {
				t.Errorf("raw query %q holds a + or a space, want %%20 and %%2B", r.rawQuery)
			}
			if want := "key:    " + key + "\n"; !strings.Contains(stdout, want) {
				t.Errorf("stdout does not show the key:\n%s", stdout)
			}
		})
	}
	t.Run("not UTF-8", func(t *testing.T) {
		f := newFakeAdmin(t)
		key := "bad\xff\xfebytes"
		code, stdout, stderr := runTool(nil, "-url", f.srv.URL, "inspect", "-class", "api", "-key", key)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if got := f.only(t).query.Get("key"); got != key {
			t.Errorf("the endpoint got key %q, want %q", got, key)
		}
		// JSON carries U+FFFD back, printed as such.
		if !strings.Contains(stdout, "key:    bad\ufffd\ufffdbytes\n") {
			t.Errorf("stdout:\n%s", stdout)
		}
	})
}

// TestCompositeKey: -key repeated sends one key parameter per header of
// a class keyed by several (requestHeaderNames), in order.
func TestCompositeKey(t *testing.T) {
	f := newFakeAdmin(t)
	code, stdout, stderr := runTool(nil, "-url", f.srv.URL, "inspect", "-class", "api", "-key", "tenant a", "-key", "user,1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if got := f.only(t).query["key"]; len(got) != 2 || got[0] != "tenant a" || got[1] != "user,1" {
		t.Errorf("the endpoint got keys %q, want [\"tenant a\" \"user,1\"]", got)
	}
	if !strings.Contains(stdout, "key:    tenant a,user,1\n") {
		t.Errorf("stdout:\n%s", stdout)
	}
}

// TestUsageErrors: a usage error exits 2 before anything is sent, says
// what is wrong, and never prints the key.
func TestUsageErrors(t *testing.T) {
	const key = "SECRET-KEY"
	cases := []struct {
		desc string
		args []string // after -url
		want string   // in stderr
	}{
		{desc: "no command", args: nil, want: "a command is needed"},
		{desc: "unknown command", args: []string{"inspekt"}, want: `unknown command "inspekt"`},
		{desc: "unknown flag", args: []string{"inspect", "-clas", "api", "-key", key}, want: "flag provided but not defined: -clas"},
		{desc: "no class", args: []string{"inspect", "-key", key}, want: "-class is required"},
		{desc: "no key", args: []string{"reset", "-class", "api"}, want: "-key is required"},
		{desc: "empty key", args: []string{"inspect", "-class", "api", "-key", ""}, want: "-key is required"},
		{desc: "empty policy", args: []string{"reset", "-class", "api", "-key", key, "-policy", ""}, want: "-policy is empty"},
		{desc: "unquoted key", args: []string{"inspect", "-class", "api", "-key", "SECRET", "KEY"}, want: "1 unexpected argument(s)"},
		{desc: "no average", args: []string{"override", "-class", "api", "-key", key, "-burst", "5"}, want: "-average must be an integer above 0"},
		{desc: "zero burst", args: []string{"override", "-class", "api", "-key", key, "-average", "5", "-burst", "0"}, want: "-burst must be an integer above 0"},
		{desc: "negative average", args: []string{"override", "-class", "api", "-key", key, "-average", "-5", "-burst", "1"}, want: "-average must be an integer above 0"},
		{desc: "fractional average", args: []string{"override", "-class", "api", "-key", key, "-average", "1.5", "-burst", "1"}, want: `invalid value "1.5" for flag -average`},
		{desc: "bad period", args: []string{"override", "-class", "api", "-key", key, "-average", "5", "-burst", "1", "-period", "60"}, want: `-period "60" is not a Go duration`},
		{desc: "zero ttl", args: []string{"override", "-class", "api", "-key", key, "-average", "5", "-burst", "1", "-ttl", "0s"}, want: `-ttl "0s" must be above 0`},
		{desc: "empty ttl", args: []string{"override", "-class", "api", "-key", key, "-average", "5", "-burst", "1", "-ttl", ""}, want: `-ttl "" is not a Go duration`},
		{desc: "delete with a limit", args: []string{"override", "-class", "api", "-key", key, "-delete", "-average", "5"}, want: "-delete takes no -average"},
		{desc: "bad output", args: []string{"-o", "yaml", "inspect", "-class", "api", "-key", key}, want: `-o "yaml": want table or json`},
		{desc: "bad timeout", args: []string{"inspect", "-timeout", "0s", "-class", "api", "-key", key}, want: "-timeout must be above 0"},
		{desc: "header without colon", args: []string{"-H", "X-Token " + key, "inspect", "-class", "api", "-key", key}, want: "-H number 1: want 'Name: value'"},
		{desc: "bad header name", args: []string{"-H", "X Token: v", "inspect", "-class", "api", "-key", key}, want: `"X Token" is not a header name`},
		{desc: "header value with a newline", args: []string{"-H", "X-Token: " + key + "\r\nEvil: 1", "inspect", "-class", "api", "-key", key}, want: "-H X-Token: the value holds a control character"},
		{desc: "password without user", args: []string{"-password", "pw", "inspect", "-class", "api", "-key", key}, want: "a password without a user"},
		{desc: "user and Authorization", args: []string{"-user", "u", "-H", "Authorization: Bearer x", "inspect", "-class", "api", "-key", key}, want: "both basic auth (-user) and an Authorization header"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			f := newFakeAdmin(t)
			code, stdout, stderr := runTool(nil, append([]string{"-url", f.srv.URL}, tc.args...)...)
			if code != exitUsage {
				t.Errorf("exit %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr:\n%s\nwant it to hold %q", stderr, tc.want)
			}
			if strings.Contains(stderr, "SECRET") {
				t.Errorf("stderr holds the key:\n%s", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
			if n := len(f.requests()); n != 0 {
				t.Errorf("the endpoint got %d requests, want none", n)
			}
		})
	}

	urls := []struct{ desc, url, want string }{
		{"no URL", "", "no endpoint: set -url or $TOLLGATE_ADMIN_URL"},
		{"relative URL", "/admin", "-url must be an absolute http:// or https:// URL"},
		{"other scheme", "ftp://host/admin", "-url must be an absolute http:// or https:// URL"},
		{"not a URL", "http://a b:pw@[::1/x", "-url is not a URL"},
	}
	for _, tc := range urls {
		t.Run(tc.desc, func(t *testing.T) {
			code, _, stderr := runTool(map[string]string{envURL: tc.url}, "inspect", "-class", "api", "-key", key)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, exitUsage, tc.want)
			}
			if strings.Contains(stderr, "pw") {
				t.Errorf("stderr holds the URL's password: %q", stderr)
			}
		})
	}
}

// TestHelp: -h exits 0 and prints the usage, never the password from the
// environment.
func TestHelp(t *testing.T) {
	env := map[string]string{envPassword: "hunter2", envUser: "ops", envURL: "http://127.0.0.1:1"}
	for _, args := range [][]string{{"-h"}, {"help"}, {"inspect", "-h"}, {"override", "-help"}, {"-o", "json", "reset", "-h"}} {
		code, stdout, stderr := runTool(env, args...)
		if code != 0 {
			t.Errorf("%q: exit %d, want 0", args, code)
		}
		if !strings.Contains(stderr, "usage: tollgatectl") || !strings.Contains(stderr, "-timeout") {
			t.Errorf("%q: stderr is not the usage:\n%s", args, stderr)
		}
		if strings.Contains(stderr+stdout, "hunter2") {
			t.Errorf("%q: the help prints the password", args)
		}
	}
}
