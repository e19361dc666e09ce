package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// maxReply bounds what is read of a reply, in bytes: one key's state is a
// few KB, and a reply past this is not the admin endpoint's.
const maxReply = 1 << 20

// An endpoint is the admin endpoint as the global flags describe it.
type endpoint struct {
	base    *url.URL   // -url without its query and fragment
	query   url.Values // -url's query, less the parameters a call sets
	where   string     // base as messages name it: no user info, no query
	header  http.Header
	host    string // -H Host; empty: the URL's
	user    string // empty: no basic auth (but the URL's user info, if any)
	pass    string
	timeout time.Duration

	transport *http.Transport
	client    *http.Client
}

// contractParams are the query parameters a call sets; -url's own are
// dropped, so that a URL cannot add one to a call that has none.
var contractParams = []string{"class", "key", "policy", "override"}

// endpoint checks -url and -H and returns the endpoint they describe.
// Its errors are usage errors.
func (g *globals) endpoint() (*endpoint, error) {
	if g.url == "" {
		return nil, errors.New("no endpoint: set -url or $" + envURL)
	}
	u, err := url.Parse(g.url)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return nil, fmt.Errorf("-url is not a URL: %v", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return nil, errors.New("-url must be an absolute http:// or https:// URL")
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("-url's query: %v", err)
	}
	for _, p := range contractParams {
		q.Del(p)
	}
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	header, host, err := parseHeaders(g.headers)
	if err != nil {
		return nil, err
	}
	if g.user != "" && header.Get("Authorization") != "" {
		return nil, errors.New("both basic auth (-user) and an Authorization header (-H)")
	}
	where := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path, RawPath: u.RawPath}

	var tr *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		tr = dt.Clone() // its proxy settings, its own idle connections
	} else {
		tr = &http.Transport{Proxy: http.ProxyFromEnvironment}
	}
	return &endpoint{
		base: u, query: q, where: where.String(),
		header: header, host: host, user: g.user, pass: g.password, timeout: g.timeout,
		transport: tr,
		client: &http.Client{
			Transport: tr,
			Timeout:   g.timeout,
			// A redirect is reported, not followed: a DELETE that became
			// a GET, or credentials sent elsewhere, are worse than an error.
			CheckRedirect: func(_ *http.Request, _ []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// close releases the endpoint's idle connections.
func (e *endpoint) close() { e.transport.CloseIdleConnections() }

// A result is what a call returned: for a state call, the key's state and
// the reply's JSON as sent; for the others, nothing.
type result struct {
	state *state
	raw   []byte
}

// do makes the call c and checks its reply. Its errors name the endpoint
// but never the key (the query is not in them).
func (e *endpoint) do(c call) (*result, error) {
	var body io.Reader
	if c.body != nil {
		body = bytes.NewReader(c.body)
	}
	req, err := http.NewRequest(c.method, e.base.String(), body)
	if err != nil {
		return nil, fmt.Errorf("making the request to %s: %v", e.where, causeOf(err))
	}
	req.URL.RawQuery = encodeQuery(c.params, e.query)
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", "tollgatectl")
	if c.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for name, values := range e.header {
		req.Header[name] = values
	}
	if e.host != "" {
		req.Host = e.host
	}
	if e.user != "" {
		req.SetBasicAuth(e.user, e.pass)
	}

	resp, err := e.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) && ue.Timeout() {
			return nil, fmt.Errorf("calling %s: no answer within %v", e.where, e.timeout)
		}
		return nil, fmt.Errorf("calling %s: %v", e.where, causeOf(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxReply+1))
	if err != nil {
		return nil, fmt.Errorf("reading the reply of %s (%d): %v", e.where, resp.StatusCode, err)
	}
	tooLarge := len(b) > maxReply

	switch {
	case resp.StatusCode == http.StatusOK && c.state:
		if tooLarge {
			return nil, errors.New("the reply is larger than 1 MiB: not Tollgate's state of one key (is -url the admin endpoint?)")
		}
		if !isJSON(resp.Header.Get("Content-Type"), "application/json") {
			return nil, fmt.Errorf("the reply is not JSON but %s: not Tollgate's admin endpoint?", contentType(resp.Header))
		}
		st, err := decodeState(b, c.param("class"), c.param("key"))
		if err != nil {
			return nil, err
		}
		return &result{state: st, raw: b}, nil
	case resp.StatusCode == http.StatusNoContent && !c.state:
		return &result{}, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return nil, redirected(req.URL, resp)
	case resp.StatusCode >= 400:
		return nil, refusal(resp, b, tooLarge)
	}
	want := http.StatusNoContent
	if c.state {
		want = http.StatusOK
	}
	return nil, fmt.Errorf("the endpoint answered %d where Tollgate's admin endpoint answers %d: is -url its route?", resp.StatusCode, want)
}

// causeOf is err without the *url.Error around it, whose text holds the
// URL and so the key.
func causeOf(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// encodeQuery is the query of a call: its params in order, then -url's
// own (sorted by name). Every name and value is percent-encoded, a space
// as %20 (not +, which not every decoder reads as a space).
func encodeQuery(params []param, extra url.Values) string {
	var b strings.Builder
	add := func(name, value string) {
		if b.Len() > 0 {
			b.WriteByte('&')
		}
		b.WriteString(escape(name))
		b.WriteByte('=')
		b.WriteString(escape(value))
	}
	for _, p := range params {
		add(p.name, p.value)
	}
	names := make([]string, 0, len(extra))
	for n := range extra {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, v := range extra[n] {
			add(n, v)
		}
	}
	return b.String()
}

// escape percent-encodes s for a query: QueryEscape, whose + for a space
// becomes %20 (a + of s is already %2B).
func escape(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// isJSON reports whether the media type of Content-Type ct is want or,
// for application/json, any +json type.
func isJSON(ct, want string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return mt == want || want == "application/json" && strings.HasSuffix(mt, "+json")
}

// contentType names a reply's Content-Type in a message.
func contentType(h http.Header) string {
	ct := h.Get("Content-Type")
	if ct == "" {
		return "no Content-Type"
	}
	return quote(ct, 60)
}

// redirected is the error of a redirect: where it points, without its
// query (which may hold the key).
func redirected(from *url.URL, resp *http.Response) error {
	where := "nowhere (no Location)"
	if loc := resp.Header.Get("Location"); loc != "" {
		where = "an address that is not a URL"
		if to, err := from.Parse(loc); err == nil {
			to = &url.URL{Scheme: to.Scheme, Host: to.Host, Path: to.Path, RawPath: to.RawPath}
			where = quote(to.String(), 200)
		}
	}
	return fmt.Errorf("the endpoint redirected (%d) to %s: give -url the address to call", resp.StatusCode, where)
}

// problem is an RFC 9457 problem report, the fields the tool prints.
type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	Field  string `json:"field"`
}

// refusal is the error of a reply with status 400 or more: its problem's
// title, detail and field, or what it is when it is not a problem.
func refusal(resp *http.Response, body []byte, tooLarge bool) error {
	code := resp.StatusCode
	status := strconv.Itoa(code)
	if text := http.StatusText(code); text != "" {
		status += " " + text
	}
	msg := "the endpoint refused (" + status + ")"
	if code >= 500 {
		msg = "the endpoint failed (" + status + ")"
	}
	var p problem
	ct := resp.Header.Get("Content-Type")
	switch {
	case tooLarge:
		msg += " with a reply larger than 1 MiB"
	case (isJSON(ct, "application/problem+json") || isJSON(ct, "application/json")) &&
		json.Unmarshal(body, &p) == nil && (p.Title != "" || p.Detail != "" || p.Type != ""):
		title := p.Title
		if title == "" {
			title = p.Type
		}
		msg += ": " + printable(title, 200)
		if p.Detail != "" {
			msg += ": " + printable(p.Detail, 1000)
		}
		if p.Field != "" {
			msg += " (field " + quote(p.Field, 80) + ")"
		}
	default:
		msg += " without a problem report (" + contentType(resp.Header) + ")"
		if s := printable(strings.TrimSpace(string(body)), 200); s != "" {
			msg += ": " + s
		}
	}
	switch code {
	case http.StatusUnauthorized:
		msg += "; check -user and -password ($" + envUser + ", $" + envPassword + ")"
	case http.StatusNotFound:
		msg += "; is -url the admin endpoint's route?"
	}
	return errors.New(msg)
}
