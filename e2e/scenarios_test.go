package e2e

// The scenario suite: every scenario runs twice, with the plugin compiled
// into the test binary and interpreted by Yaegi v0.16.1 through a loader
// that mirrors Traefik's, against a real redis-server started per scenario.
// A "pod" is one Factory: under Yaegi each has its own interpreter and so
// its own registry and fallback buckets, as separate Traefik processes do.

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var goPath string

func TestMain(m *testing.M) {
	// Password files the tests write live under the temporary directory:
	// allowed, for the loaders in this process and the Traefiks it starts.
	os.Setenv("TOLLGATE_SECRET_DIRS", os.TempDir())
	TraefikNice = 10 // Redis keeps a core of its own under a burst, as deployed
	dir, err := os.MkdirTemp("", "tollgate-gopath")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if goPath, err = GoPath(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// kinds are the two ways the suite loads the plugin.
var kinds = []string{"compiled", "yaegi"}

// env is one scenario's world: a Redis and a way to make pods.
type env struct {
	t     *testing.T
	kind  string
	redis *Redis
	logs  *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// forEachKind runs body once per kind with a fresh redis-server.
// startRedis starts a redis-server for the test (skipped without one, but
// under CI), killed at its end.
func startRedis(t *testing.T) *Redis {
	t.Helper()
	r, err := StartRedis(t.TempDir())
	if err != nil {
		if NeedRedis(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	return r
}

func forEachKind(t *testing.T, body func(t *testing.T, e *env)) {
	for _, kind := range kinds {
		kind := kind
		t.Run(kind, func(t *testing.T) {
			body(t, &env{t: t, kind: kind, redis: startRedis(t), logs: &syncBuffer{}})
		})
	}
}

// pod returns a new Factory: compiled, or a new interpreter.
func (e *env) pod() Factory {
	e.t.Helper()
	if e.kind == "compiled" {
		return Compiled{}
	}
	y, err := NewYaegi(goPath, e.logs)
	if err != nil {
		e.t.Fatal(err)
	}
	return y
}

var okHandler = http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
	rw.WriteHeader(http.StatusOK)
	_, _ = rw.Write([]byte("ok"))
})

// handler builds a middleware on pod f with options merged over base.
func (e *env) handler(f Factory, name string, options map[string]interface{}) http.Handler {
	e.t.Helper()
	h, err := f.New(context.Background(), okHandler, options, name)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return h
}

// opts returns options for a limit on this env's Redis, keyed by X-API-Key.
func (e *env) opts(kv ...interface{}) map[string]interface{} {
	return withOptions(map[string]interface{}{
		"sourceCriterion": map[string]interface{}{"requestHeaderName": "X-API-Key"},
		"redis":           map[string]interface{}{"endpoints": []interface{}{e.redis.Addr}, "timeout": "1s"},
	}, kv...)
}

// withOptions sets key/value pairs on options m ("redis.x" keys go into
// m["redis"]) and returns m.
func withOptions(m map[string]interface{}, kv ...interface{}) map[string]interface{} {
	for i := 0; i+1 < len(kv); i += 2 {
		k := kv[i].(string)
		if strings.HasPrefix(k, "redis.") {
			m["redis"].(map[string]interface{})[strings.TrimPrefix(k, "redis.")] = kv[i+1]
			continue
		}
		m[k] = kv[i+1]
	}
	return m
}

func do(h http.Handler, method, path, key string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, nil)
	req.RemoteAddr = "192.0.2.1:1234"
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

func uniqueKey(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}

// sortDurations sorts ds in place, shortest first.
func sortDurations(ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
}

// count tallies status codes.
func count(codes []int) map[int]int {
	m := map[int]int{}
	for _, c := range codes {
		m[c]++
	}
	return m
}
