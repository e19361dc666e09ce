package client_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"sync/atomic"

	"github.com/tollgate-dev/tollgate/client"
)

func ExampleNewTransport() {
	// A stand-in for an API behind Tollgate: it refuses the first request
	// (Retry-After 0, so that the example runs at once), then admits.
	var n int32
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("RateLimit-Policy", `"api";q=100;w=1`)
		if atomic.AddInt32(&n, 1) == 1 {
			w.Header().Set("RateLimit", `"api";r=0;t=1`)
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		w.Header().Set("RateLimit", `"api";r=99;t=0`)
		fmt.Fprint(w, "ok")
	}))
	defer api.Close()

	stats := &client.Stats{}
	c := &http.Client{Transport: client.NewTransport(nil, client.Record(stats))}
	resp, err := c.Get(api.URL)
	if err != nil {
		log.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := stats.Snapshot()
	fmt.Println(resp.StatusCode, string(body))
	fmt.Printf("refusals %d, retries %d, returned %d\n", s.Refusals, s.Retries, s.Returned)
	// Output:
	// 200 ok
	// refusals 1, retries 1, returned 0
}
