package usage

import (
	"strings"
	"testing"
)

func paths(t *testing.T, ps ...string) [][]string {
	t.Helper()
	var out [][]string
	for _, p := range ps {
		keys, bad := ParsePath(p)
		if bad != "" {
			t.Fatalf("ParsePath(%q): %s", p, bad)
		}
		out = append(out, keys)
	}
	return out
}

// scan writes body to a Scanner in chunks of n bytes and returns its result.
func scan(t *testing.T, ps [][]string, window int, ctype, enc, body string, n int) (int64, int) {
	t.Helper()
	s := New(ps, 1000000, window, ctype, enc)
	if s == nil {
		return -1, -1
	}
	for len(body) > 0 {
		k := n
		if k > len(body) {
			k = len(body)
		}
		s.Write([]byte(body[:k]))
		body = body[k:]
	}
	return s.Result()
}

func TestJSONBodies(t *testing.T) {
	total := paths(t, "usage.total_tokens")
	inOut := paths(t, "usage.input_tokens", "usage.output_tokens")
	big := `{"id":"x","choices":[{"text":"` + strings.Repeat("a", 5000) + `"}],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`
	for _, tc := range []struct {
		desc    string
		ps      [][]string
		window  int
		ctype   string
		body    string
		want    int64
		wantRes int
	}{
		{"openai", total, 1 << 20, "application/json", `{"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}`, 7, Found},
		{"anthropic: the sum", inOut, 1 << 20, "application/json; charset=utf-8", `{"usage":{"input_tokens":10,"output_tokens":25}}`, 35, Found},
		{"one of two paths", inOut, 1 << 20, "application/json", `{"usage":{"output_tokens":25}}`, 25, Found},
		{"+json", total, 1 << 20, "application/vnd.api+json", `{"usage":{"total_tokens":9}}`, 9, Found},
		{"no usage", total, 1 << 20, "application/json", `{"id":"x"}`, 0, Missing},
		{"not json", total, 1 << 20, "application/json", `<html>`, 0, Missing},
		{"over the window: the tail", total, 256, "application/json", big, 7, Found},
		{"over the window, usage not in the tail", total, 64, "application/json", `{"usage":{"total_tokens":7},"pad":"` + strings.Repeat("b", 500) + `"}`, 0, Missing},
		{"a key inside a string before the real one", total, 128, "application/json", `{"text":"` + strings.Repeat("c", 300) + `\"usage\": {\"total_tokens\": 900}","usage":{"total_tokens":5}}`, 5, Found},
		{"negative", total, 1 << 20, "application/json", `{"usage":{"total_tokens":-3}}`, 0, Invalid},
		{"a fraction", total, 1 << 20, "application/json", `{"usage":{"total_tokens":1.5}}`, 0, Invalid},
		{"an exponent", total, 1 << 20, "application/json", `{"usage":{"total_tokens":1e3}}`, 0, Invalid},
		{"huge", total, 1 << 20, "application/json", `{"usage":{"total_tokens":123456789012345678901234567890}}`, 0, Invalid},
		{"a string", total, 1 << 20, "application/json", `{"usage":{"total_tokens":"12"}}`, 0, Invalid},
		{"an object", total, 1 << 20, "application/json", `{"usage":{"total_tokens":{"n":1}}}`, 0, Invalid},
		{"over max", total, 1 << 20, "application/json", `{"usage":{"total_tokens":1000001}}`, 0, Invalid},
		{"duplicate keys: the last", total, 1 << 20, "application/json", `{"usage":{"total_tokens":1,"total_tokens":8}}`, 8, Found},
		{"deep nesting", total, 1 << 20, "application/json", strings.Repeat("[", 20000) + strings.Repeat("]", 20000), 0, Missing},
	} {
		for _, n := range []int{1, 7, 1 << 20} {
			got, res := scan(t, tc.ps, tc.window, tc.ctype, "", tc.body, n)
			if got != tc.want || res != tc.wantRes {
				t.Errorf("%s, chunks of %d: %d, result %d; want %d, %d", tc.desc, n, got, res, tc.want, tc.wantRes)
			}
		}
	}
}

func TestEventStreams(t *testing.T) {
	total := paths(t, "usage.total_tokens")
	inOut := paths(t, "usage.input_tokens", "usage.output_tokens")
	openai := "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n" +
		"data: {\"choices\":[{\"delta\":{\"content\":\" there\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n" +
		"data: [DONE]\n\n"
	anthropic := "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":25,\"output_tokens\":1}}}\r\n\r\n" +
		"event: content_block_delta\r\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"Hello\"}}\r\n\r\n" +
		"event: message_delta\r\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":15}}\r\n\r\n" +
		"event: message_stop\r\ndata: {\"type\":\"message_stop\"}\r\n\r\n"
	for _, tc := range []struct {
		desc    string
		ps      [][]string
		body    string
		want    int64
		wantRes int
	}{
		{"openai with include_usage", total, openai, 7, Found},
		{"anthropic: message_delta's output, the top-level usage only", paths(t, "usage.output_tokens"), anthropic, 15, Found},
		{"anthropic: input in message_start, nested", paths(t, "message.usage.input_tokens", "usage.output_tokens"), anthropic, 40, Found},
		{"the last value counts", total, "data: {\"usage\":{\"total_tokens\":3}}\n\ndata: {\"usage\":{\"total_tokens\":9}}\n\n", 9, Found},
		{"nothing reported", inOut, "data: {\"text\":\"a\"}\n\ndata: [DONE]\n\n", 0, Missing},
		{"cut before the blank line", total, "data: {\"usage\":{\"total_tokens\":4}}", 4, Found},
		{"an event over two data lines", total, "data: {\"usage\":\ndata: {\"total_tokens\":6}}\n\n", 6, Found},
		{"non-JSON events skipped", total, "data: hello\n\ndata: {\"usage\":{\"total_tokens\":2}}\n\n", 2, Found},
		{"a bad value", total, "data: {\"usage\":{\"total_tokens\":-1}}\n\n", 0, Invalid},
		{"a line over the bound is skipped", total, "data: {\"pad\":\"" + strings.Repeat("x", maxEvent+10) + "\",\"usage\":{\"total_tokens\":5}}\n\ndata: {\"usage\":{\"total_tokens\":3}}\n\n", 3, Found},
	} {
		for _, n := range []int{1, 5, 1 << 21} {
			if n == 1 && len(tc.body) > 100000 {
				continue
			}
			got, res := scan(t, tc.ps, 1<<20, "text/event-stream", "", tc.body, n)
			if got != tc.want || res != tc.wantRes {
				t.Errorf("%s, chunks of %d: %d, result %d; want %d, %d", tc.desc, n, got, res, tc.want, tc.wantRes)
			}
		}
	}
}

func TestNotRead(t *testing.T) {
	total := paths(t, "usage.total_tokens")
	if s := New(total, 10, 1024, "text/plain", ""); s != nil {
		t.Error("text/plain: a scanner")
	}
	if s := New(total, 10, 1024, "", ""); s != nil {
		t.Error("no content type: a scanner")
	}
	s := New(total, 10, 1024, "application/json", "gzip")
	s.Write([]byte{0x1f, 0x8b, 1, 2})
	if n, res := s.Result(); n != 0 || res != Encoded {
		t.Errorf("gzip: %d, %d; want 0, Encoded", n, res)
	}
	if s := New(total, 10, 1024, "application/json", "identity"); s == nil {
		t.Error("identity encoding: no scanner")
	}
}

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		in string
		ok bool
	}{
		{"usage.total_tokens", true}, {"a", true}, {"", false}, {"a..b", false}, {".a", false},
		{"a.b.c.d.e.f.g.h", true}, {"a.b.c.d.e.f.g.h.i", false}, {`a"b`, false}, {"a b", false}, {strings.Repeat("a", 300), false},
	} {
		_, bad := ParsePath(tc.in)
		if (bad == "") != tc.ok {
			t.Errorf("ParsePath(%q): %q, want ok %t", tc.in, bad, tc.ok)
		}
	}
}

// Streams and bodies on the edges: a byte order mark, two spaces after
// "data:", a media type with a bad parameter, a JSON value per line, a
// flood of blank lines, the client gone before the blank line.
func TestEdges(t *testing.T) {
	total := paths(t, "usage.total_tokens")
	for _, tc := range []struct {
		desc, ctype, body string
		want              int64
		wantRes           int
	}{
		{"a BOM before the first event", "text/event-stream", "\xef\xbb\xbfdata: {\"usage\":{\"total_tokens\":4}}\n\n", 4, Found},
		{"two spaces after data:", "text/event-stream", "data:  {\"usage\":{\"total_tokens\":4}}\n\n", 4, Found},
		{"a bad media type parameter", "application/json; charset", `{"usage":{"total_tokens":4}}`, 4, Found},
		{"a JSON value per line", "application/json", "{\"id\":1}\n{\"usage\":{\"total_tokens\":5}}\n", 5, Found},
		{"a flood of blank lines", "text/event-stream", strings.Repeat("\n", 100000) + "data: {\"usage\":{\"total_tokens\":6}}\n\n" + strings.Repeat("\r\n", 1000), 6, Found},
		{"a huge JSON body of numbers", "application/json", "[" + strings.Repeat("123456,", 150000) + "0]", 0, Missing},
	} {
		for _, n := range []int{3, 1 << 21} {
			got, res := scan(t, total, 1<<20, tc.ctype, "", tc.body, n)
			if got != tc.want || res != tc.wantRes {
				t.Errorf("%s, chunks of %d: %d, result %d; want %d, %d", tc.desc, n, got, res, tc.want, tc.wantRes)
			}
		}
	}
}

// TestPathsAlongTheWay: the whole body is not decoded into a tree: the
// paths are read one level at a time, so a body's size costs a scan, not
// a copy of every value it holds.
func TestPathsAlongTheWay(t *testing.T) {
	body := []byte(`{"data":[` + strings.Repeat(`{"embedding":[0.1,0.2,0.3]},`, 20000) + `{}],"usage":{"total_tokens":11}}`)
	s := New(paths(t, "usage.total_tokens"), 1000, 1<<21, "application/json", "")
	s.Write(body)
	if n, res := s.Result(); n != 11 || res != Found {
		t.Fatalf("%d, %d; want 11, Found", n, res)
	}
}
