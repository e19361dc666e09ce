package main

import (
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The bench's backend: the service of every router (dynamicConf's
// "backend"). On every path but the response-cost routes' it answers as
// the e2e Backend does, 200 "ok\n" as text/plain; on those it answers
// what an LLM API answers (responsecost.go reads the cost from them):
//
//   - bodyJSON: a chat completion, application/json, jsonBodyLen bytes
//     with a Content-Length, ending in its usage object
//     ({"usage":{"prompt_tokens":..,"completion_tokens":..,"total_tokens":..}});
//   - bodySSE: a streamed chat completion, text/event-stream, sseEvents
//     small events ("data: {...}"), each written and flushed on its own as
//     a streaming server does, the last of them carrying the usage, then
//     "data: [DONE]".
//
// Both carry the usage's total in an X-Usage-Tokens header too, which the
// header-reading route (responseCost: {header: X-Usage-Tokens}) charges:
// so every route of a body gets the same response, and the header route
// isolates the writer's wrapper and the charge from the body's scan. The
// bodies are built once; serving one copies nothing.
type backend struct {
	addr   string
	server *http.Server
}

// The bodies: what bodyOf's routes answer.
const (
	bodyJSON = "json"
	bodySSE  = "sse"
)

// The bodies' sizes and usages.
const (
	jsonBodyLen       = 4096
	jsonPromptTokens  = 250
	jsonOutputTokens  = 750
	sseEvents         = 200 // the usage's included, [DONE] not
	ssePromptTokens   = 250
	sseOutputTokens   = sseEvents - 1 // one per content event
	usageTokensHeader = "X-Usage-Tokens"
)

// totalTokens is what body's usage names, total_tokens: the cost a route
// with responseCost charges for it (less the check's 1).
func totalTokens(body string) int64 {
	if body == bodySSE {
		return ssePromptTokens + sseOutputTokens
	}
	return jsonPromptTokens + jsonOutputTokens
}

var (
	jsonBody  = chatCompletion()
	sseChunks = chatStream()
)

// chatCompletion is bodyJSON's body: an OpenAI chat completion whose
// content pads it to jsonBodyLen bytes.
func chatCompletion() []byte {
	usage := fmt.Sprintf(`"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`,
		jsonPromptTokens, jsonOutputTokens, totalTokens(bodyJSON))
	head := `{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"bench",` +
		`"choices":[{"index":0,"message":{"role":"assistant","content":"`
	tail := `"},"finish_reason":"stop"}],` + usage
	pad := jsonBodyLen - len(head) - len(tail)
	words := strings.Repeat("lorem ipsum ", pad/12+1)[:pad]
	return []byte(head + words + tail)
}

// chatStream is bodySSE's chunks, each written and flushed alone: the
// content events, the usage event, [DONE].
func chatStream() [][]byte {
	var chunks [][]byte
	for i := 0; i < sseOutputTokens; i++ {
		chunks = append(chunks, []byte(fmt.Sprintf(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":{"content":"tok%03d "},"finish_reason":null}]}`+"\n\n", i)))
	}
	chunks = append(chunks, []byte(fmt.Sprintf(`data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d}}`+"\n\n",
		ssePromptTokens, sseOutputTokens, totalTokens(bodySSE))))
	return append(chunks, []byte("data: [DONE]\n\n"))
}

// startBackend serves the bench's backend on a free loopback port.
func startBackend() (*backend, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &backend{addr: l.Addr().String()}
	b.server = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(serveBackend)}
	go func() { _ = b.server.Serve(l) }()
	return b, nil
}

// close stops the server.
func (b *backend) close() { _ = b.server.Close() }

// jsonLen and jsonTotal are bodyJSON's headers' values.
var (
	jsonLen   = strconv.Itoa(len(jsonBody))
	jsonTotal = strconv.FormatInt(totalTokens(bodyJSON), 10)
	sseTotal  = strconv.FormatInt(totalTokens(bodySSE), 10)
)

// serveBackend answers req: its path's body (bodyOf), else "ok\n".
func serveBackend(rw http.ResponseWriter, req *http.Request) {
	h := rw.Header()
	switch bodyOf(req.URL.Path) {
	case bodyJSON:
		h["Content-Type"] = []string{"application/json"}
		h["Content-Length"] = []string{jsonLen}
		h[usageTokensHeader] = []string{jsonTotal}
		_, _ = rw.Write(jsonBody)
	case bodySSE:
		h["Content-Type"] = []string{"text/event-stream"}
		h["Cache-Control"] = []string{"no-cache"}
		h[usageTokensHeader] = []string{sseTotal}
		f, _ := rw.(http.Flusher)
		for _, c := range sseChunks {
			if _, err := rw.Write(c); err != nil {
				return
			}
			if f != nil {
				f.Flush()
			}
		}
	default:
		h["Content-Type"] = []string{"text/plain"}
		_, _ = rw.Write([]byte("ok\n"))
	}
}

// bodyOf is the body the backend answers on path: a response-cost
// route's, else "".
func bodyOf(path string) string {
	if c, ok := costRouteOf(strings.TrimPrefix(path, "/")); ok {
		return c.body
	}
	return ""
}

// sseLen is bodySSE's length, bytes ([DONE] included).
func sseLen() int {
	n := 0
	for _, c := range sseChunks {
		n += len(c)
	}
	return n
}
