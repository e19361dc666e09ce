package tollgate

import (
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/tollgate-dev/tollgate/internal/bucket"
	"github.com/tollgate-dev/tollgate/internal/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// dump renders a response's status, sorted headers and body.
func dump(rec *httptest.ResponseRecorder) string {
	var keys []string
	for k := range rec.Header() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(http.StatusText(rec.Code) + "\n")
	for _, k := range keys {
		b.WriteString(k + ": " + strings.Join(rec.Header()[k], ", ") + "\n")
	}
	b.WriteString("\n" + rec.Body.String())
	return b.String()
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs:\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

func testSet(t *testing.T) *policySet {
	t.Helper()
	api, err := config.CompileLimit("", 100, "1m", 20, 1)
	if err != nil {
		t.Fatal(err)
	}
	api.Name = "api"
	login, err := config.CompileLimit("rules[0].", 5, "1m", 5, 1)
	if err != nil {
		t.Fatal(err)
	}
	login.Name, login.KeySuffix, login.FailClosed = "login", ":login", true
	return newPolicySet([]*config.Policy{api, login}, len(bucket.ClientKey("", "")))
}

func TestHeadersGolden(t *testing.T) {
	set := testSet(t)
	for _, tc := range []struct {
		desc, file string
		mode       int
		allowed    bool
		d          []int64
	}{
		{desc: "allowed, ietf", file: "allowed-ietf.txt", mode: config.HeadersIETF, allowed: true,
			d: []int64{1, 17, 0, 1800, 4, 0, 12000}},
		{desc: "allowed, legacy", file: "allowed-legacy.txt", mode: config.HeadersLegacy, allowed: true,
			d: []int64{1, 17, 0, 1800, 4, 0, 12000}},
		{desc: "refused by login, both", file: "refused-both.txt", mode: config.HeadersIETF | config.HeadersLegacy,
			d: []int64{0, 16, 0, 2400, 0, 11001, 60000}},
		{desc: "allowed, draft 07", file: "allowed-draft07.txt", mode: config.HeadersDraft07, allowed: true,
			d: []int64{1, 17, 0, 1800, 4, 0, 12000}},
		{desc: "refused by login, draft 07", file: "refused-draft07.txt", mode: config.HeadersDraft07,
			d: []int64{0, 16, 0, 2400, 0, 11001, 60000}},
		{desc: "refused, no headers", file: "refused-none.txt", mode: 0,
			d: []int64{0, 0, 400, 12000, 3, 0, 24000}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			rec := httptest.NewRecorder()
			setHeaders(rec.Header(), tc.mode, set, tc.d)
			if tc.allowed {
				rec.WriteHeader(http.StatusOK)
			} else {
				writeQuotaExceeded(rec, set, tc.d)
			}
			golden(t, tc.file, dump(rec))
		})
	}
	t.Run("unavailable", func(t *testing.T) {
		rec := httptest.NewRecorder()
		writeUnavailable(rec, set, 3)
		golden(t, "unavailable.txt", dump(rec))
	})
}

func TestRetryAfterIsAtLeastOneSecond(t *testing.T) {
	set := testSet(t)
	rec := httptest.NewRecorder()
	writeQuotaExceeded(rec, set, []int64{0, 0, 1, 0, 0, 0, 0})
	if got := rec.Header().Get("Retry-After"); got != "1" {
		t.Fatalf("Retry-After = %q for a 1 ms wait, want 1", got)
	}
}

func TestCeilSecs(t *testing.T) {
	for _, tc := range []struct{ ms, want int64 }{{-5, 0}, {0, 0}, {1, 1}, {999, 1}, {1000, 1}, {1001, 2}, {60000, 60}} {
		if got := ceilSecs(tc.ms); got != tc.want {
			t.Fatalf("ceilSecs(%d) = %d, want %d", tc.ms, got, tc.want)
		}
	}
}
