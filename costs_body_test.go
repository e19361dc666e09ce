package tollgate

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate-dev/tollgate/internal/config"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// bodyCostHandler is costHandler with a backend of its own and jsonFields
// [usage.total_tokens].
func bodyCostHandler(t *testing.T, addr string, next http.HandlerFunc, mutate func(*config.Config)) *Tollgate {
	t.Helper()
	return handlerWith(t, addr, next, func(c *config.Config) {
		c.Average, c.Period, c.Burst = 25, "1m", 25
		c.Class = "body-" + strconv.FormatInt(atomic.AddInt64(&backendSeq, 1), 10)
		c.ResponseCost = &config.ResponseCost{JSONFields: []string{"usage.total_tokens"}, Max: 1000}
		if mutate != nil {
			mutate(c)
		}
	})
}

// A JSON body's usage is charged: 25 tokens, 10 a response, the 4th
// request refused; the body reaches the client whole.
func TestResponseCostFromJSONBody(t *testing.T) {
	addr := redistest.Start(t)
	body := `{"id":"cmpl-1","choices":[{"text":"` + strings.Repeat("a", 3000) + `"}],"usage":{"prompt_tokens":4,"completion_tokens":6,"total_tokens":10}}`
	h := bodyCostHandler(t, addr, func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("Content-Type", "application/json")
		rw.Write([]byte(body[:1000]))
		rw.Write([]byte(body[1000:]))
	}, nil)
	for i, want := range []int{200, 200, 200, 429, 429} {
		rec := serve(h, "k")
		settle(t, h)
		if rec.Code != want {
			t.Fatalf("request %d: %d (RateLimit %q), want %d", i+1, rec.Code, rec.Header().Get("RateLimit"), want)
		}
		if want == 200 && rec.Body.String() != body {
			t.Fatalf("request %d: the body changed (%d bytes of %d)", i+1, rec.Body.Len(), len(body))
		}
	}
	if n := atomic.LoadInt64(&h.top.ps[0].Metrics.CostCharged); n != 27 {
		t.Errorf("%d tokens charged, want 27 (3 x 9)", n)
	}
}

// An event stream's usage is charged (the last value per path), and
// each event reaches the client as it is written: the backend writes the
// next event only once the client has read the one before (through a
// real server, whose ResponseWriter is compiled code's, as Traefik's), so
// an event held back would stall the stream.
func TestResponseCostFromEventStream(t *testing.T) {
	addr := redistest.Start(t)
	events := []string{
		"data: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\n\n",
		"data: {\"choices\":[{\"delta\":{\"content\":\"lo\"}}],\"usage\":{\"total_tokens\":3}}\n\n",
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":6,\"total_tokens\":10}}\n\n",
		"data: [DONE]\n\n",
	}
	read := make(chan int, len(events))
	h := bodyCostHandler(t, addr, func(rw http.ResponseWriter, req *http.Request) {
		rw.Header().Set("Content-Type", "text/event-stream")
		for i, e := range events {
			rw.Write([]byte(e))
			select {
			case <-read:
			case <-req.Context().Done():
				return
			case <-time.After(5 * time.Second):
				t.Errorf("event %d: not read by the client within 5 s (held back?)", i+1)
				return
			}
		}
	}, nil)
	served := make(chan bool, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		h.ServeHTTP(rw, req)
		served <- true // the response charged (queued) before the next request
	}))
	defer srv.Close()
	for i, want := range []int{200, 200, 200, 429} {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-API-Key", "k")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want {
			resp.Body.Close()
			t.Fatalf("request %d: %d, want %d", i+1, resp.StatusCode, want)
		}
		if want == 200 {
			br := bufio.NewReader(resp.Body)
			for j, e := range events {
				got := ""
				for !strings.HasSuffix(got, "\n\n") {
					line, err := br.ReadString('\n')
					if err != nil {
						t.Fatalf("request %d, event %d: %v after %q", i+1, j+1, err, got)
					}
					got += line
				}
				if got != e {
					t.Fatalf("request %d, event %d: %q, want %q", i+1, j+1, got, e)
				}
				read <- j
			}
		}
		resp.Body.Close()
		<-served
		settle(t, h)
	}
}

// The cost header is taken out of the client's response unless
// keepHeader; the header wins over the body when both are set.
func TestResponseCostHeaderKept(t *testing.T) {
	addr := redistest.Start(t)
	next := func(rw http.ResponseWriter, _ *http.Request) {
		rw.Header().Set("X-Usage-Tokens", "5")
		rw.Header().Set("X-Other", "o")
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(201)
		rw.Write([]byte(`{"usage":{"total_tokens":20}}`))
	}
	for _, keep := range []bool{false, true} {
		h := bodyCostHandler(t, addr, next, func(c *config.Config) {
			c.ResponseCost.Header = "X-Usage-Tokens"
			c.ResponseCost.KeepHeader = keep
		})
		rec := serve(h, "k")
		settle(t, h)
		if got := rec.Header().Get("X-Usage-Tokens"); (got == "5") != keep || rec.Code != 201 || rec.Header().Get("X-Other") != "o" || rec.Body.String() != `{"usage":{"total_tokens":20}}` {
			t.Errorf("keepHeader %t: %d, X-Usage-Tokens %q, X-Other %q, body %q", keep, rec.Code, got, rec.Header().Get("X-Other"), rec.Body.String())
		}
		if n := atomic.LoadInt64(&h.top.ps[0].Metrics.CostCharged); n != 4 {
			t.Errorf("keepHeader %t: %d tokens charged, want 4 (the header's 5, not the body's 20)", keep, n)
		}
	}
}

// Bodies that name no cost, or that are compressed, charge the request's
// cost only, and are counted.
func TestResponseCostBodiesNotRead(t *testing.T) {
	addr := redistest.Start(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"usage":{"total_tokens":20}}`))
	zw.Close()
	for _, tc := range []struct {
		desc     string
		ctype    string
		encoding string
		body     []byte
		missing  int64
		encoded  int64
		invalid  int64
	}{
		{"no usage", "application/json", "", []byte(`{"id":1}`), 1, 0, 0},
		{"text", "text/plain", "", []byte(`{"usage":{"total_tokens":20}}`), 1, 0, 0},
		{"gzip", "application/json", "gzip", gz.Bytes(), 0, 1, 0},
		{"a negative count", "application/json", "", []byte(`{"usage":{"total_tokens":-20}}`), 0, 0, 1},
		{"over max", "application/json", "", []byte(`{"usage":{"total_tokens":20000}}`), 0, 0, 1},
	} {
		h := bodyCostHandler(t, addr, func(rw http.ResponseWriter, _ *http.Request) {
			rw.Header().Set("Content-Type", tc.ctype)
			if tc.encoding != "" {
				rw.Header().Set("Content-Encoding", tc.encoding)
			}
			rw.Write(tc.body)
		}, nil)
		rec := serve(h, "k")
		settle(t, h)
		m := h.top.ps[0].Metrics
		if rec.Code != 200 || !bytes.Equal(rec.Body.Bytes(), tc.body) || atomic.LoadInt64(&m.CostCharged) != 0 ||
			atomic.LoadInt64(&m.CostMissing) != tc.missing || atomic.LoadInt64(&m.CostEncoded) != tc.encoded || atomic.LoadInt64(&m.CostInvalid) != tc.invalid {
			t.Errorf("%s: %d, charged %d, missing %d, encoded %d, invalid %d; want nothing charged, %d, %d, %d", tc.desc, rec.Code,
				atomic.LoadInt64(&m.CostCharged), atomic.LoadInt64(&m.CostMissing), atomic.LoadInt64(&m.CostEncoded), atomic.LoadInt64(&m.CostInvalid),
				tc.missing, tc.encoded, tc.invalid)
		}
		if got := serve(h, "k").Header().Get("RateLimit"); !strings.Contains(got, ";r=23;") {
			t.Errorf("%s: RateLimit %q, want the requests' cost only (25 - 2)", tc.desc, got)
		}
	}
}

// hijackRecorder is a ResponseWriter that can be hijacked.
type hijackRecorder struct {
	*httptest.ResponseRecorder
	hijacked bool
}

func (r *hijackRecorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.hijacked = true
	c1, c2 := net.Pipe()
	c2.Close()
	return c1, bufio.NewReadWriter(bufio.NewReader(c1), bufio.NewWriter(c1)), nil
}

// A WebSocket upgrade on a responseCost route reaches the client's
// connection: the wrapper hands Hijack through.
func TestResponseCostHijack(t *testing.T) {
	addr := redistest.Start(t)
	var err error
	h := bodyCostHandler(t, addr, func(rw http.ResponseWriter, _ *http.Request) {
		hj, ok := rw.(http.Hijacker)
		if !ok {
			err = net.ErrClosed
			return
		}
		var c net.Conn
		c, _, err = hj.Hijack()
		if c != nil {
			c.Close()
		}
	}, nil)
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("X-API-Key", "k")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	rec := &hijackRecorder{ResponseRecorder: httptest.NewRecorder()}
	h.ServeHTTP(rec, req)
	settle(t, h)
	if err != nil || !rec.hijacked {
		t.Fatalf("hijack: %v, hijacked %t", err, rec.hijacked)
	}
}
