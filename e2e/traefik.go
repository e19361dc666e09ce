package e2e

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ErrNoTraefik reports that the Traefik binary has not been built.
var ErrNoTraefik = errors.New("Traefik is not built: run scripts/traefik.sh (or set TOLLGATE_TRAEFIK)")

// TraefikBinary returns the Traefik to run: $TOLLGATE_TRAEFIK, else the one
// scripts/traefik.sh builds into .build/traefik.
func TraefikBinary() (string, error) {
	p := os.Getenv("TOLLGATE_TRAEFIK")
	if p == "" {
		p = filepath.Join(RepoRoot(), ".build", "traefik")
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("%w: %v", ErrNoTraefik, err)
	}
	return p, nil
}

// NeedTraefik decides what a test does without a Traefik binary or
// redis-server: skip, unless CI is set, where it fails.
func NeedTraefik(err error) (skip bool) {
	return (errors.Is(err, ErrNoTraefik) || errors.Is(err, ErrNoRedis)) && os.Getenv("CI") == ""
}

// TraefikNice, above 0, runs every Traefik at that niceness. The test
// suites share two cores between redis-server and three Traefiks, where a
// deployment gives Redis its own: a burst that saturates the cores would
// otherwise keep Redis off them past a 5 ms check budget now and then, and
// a test of the plugin's decisions would measure the scheduler. The
// benchmarks leave it at 0.
var TraefikNice = 0

// Traefik is one Traefik process: its entrypoint "web" serves the routers,
// its entrypoint "traefik" the API, ping, pprof and Prometheus metrics.
type Traefik struct {
	Name string
	Web  string // host:port of the web entrypoint
	API  string // host:port of the traefik entrypoint
	*process
}

// StartTraefik runs bin in dir (where plugins-local/ must be) with a static
// configuration that watches dynamicFile. The extra map is merged into the
// static configuration, map by map (e.g. "entryPoints": {"web":
// {"forwardedHeaders": ...}} adds to the web entrypoint).
func StartTraefik(bin, dir, name, dynamicFile string, extra map[string]interface{}) (*Traefik, error) {
	// A port taken between FreePort and Traefik's bind (by a program that
	// does not ask FreePort) ends that Traefik at start: the next try has
	// new ports.
	var err error
	for try := 0; try < bindTries; try++ {
		var web, api int
		if web, err = FreePort(); err != nil {
			return nil, err
		}
		if api, err = FreePort(); err != nil {
			return nil, err
		}
		var t *Traefik
		if t, err = startTraefik(bin, dir, name, dynamicFile, extra, web, api); !errors.Is(err, errPortTaken) {
			return t, err
		}
	}
	return nil, err
}

// startTraefik is one try of StartTraefik, on the ports given; errPortTaken
// when one is taken.
func startTraefik(bin, dir, name, dynamicFile string, extra map[string]interface{}, webPort, apiPort int) (*Traefik, error) {
	var err error
	t := &Traefik{Name: name, Web: fmt.Sprintf("127.0.0.1:%d", webPort), API: fmt.Sprintf("127.0.0.1:%d", apiPort)}
	static := map[string]interface{}{
		"global": map[string]interface{}{"checkNewVersion": false, "sendAnonymousUsage": false},
		"entryPoints": map[string]interface{}{
			"web":     map[string]interface{}{"address": t.Web},
			"traefik": map[string]interface{}{"address": t.API},
		},
		"api":     map[string]interface{}{"insecure": true, "debug": true, "dashboard": false},
		"ping":    map[string]interface{}{},
		"metrics": map[string]interface{}{"prometheus": map[string]interface{}{}},
		"log":     map[string]interface{}{"level": "ERROR", "noColor": true},
		"providers": map[string]interface{}{
			// Apply every rewrite of the dynamic file, not one per 2 s.
			"providersThrottleDuration": "10ms",
			"file":                      map[string]interface{}{"filename": dynamicFile, "watch": true},
		},
		"experimental": map[string]interface{}{
			"localPlugins": map[string]interface{}{"tollgate": map[string]interface{}{"moduleName": ModuleName}},
		},
	}
	mergeMaps(static, extra)
	b, err := yaml.Marshal(static)
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(dir, name+".yml")
	if err := os.WriteFile(conf, b, 0o644); err != nil {
		return nil, err
	}
	args := []string{"--configFile=" + conf}
	if TraefikNice > 0 {
		// nice execs Traefik: the process (its PID, its signals) is Traefik's.
		args = append([]string{"-n", strconv.Itoa(TraefikNice), bin}, args...)
		bin = "nice"
	}
	if t.process, err = startProcess("traefik "+name, dir, filepath.Join(dir, name+".log"), "http://"+t.API+"/ping",
		60*time.Second, bin, args...); err != nil {
		return nil, err
	}
	if !t.own() {
		// Another Traefik answered on the API port: this one could not
		// bind it, and ends.
		t.Stop()
		return nil, fmt.Errorf("%w: traefik %s: another server answers on %s", errPortTaken, name, t.API)
	}
	return t, nil
}

// own reports whether the Traefik answering on t.API is t: its web
// entrypoint's address is t.Web.
func (t *Traefik) own() bool {
	resp, err := http.Get("http://" + t.API + "/api/entrypoints/web")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	var ep struct{ Address string }
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode == http.StatusOK && yaml.Unmarshal(b, &ep) == nil && ep.Address == t.Web // JSON is YAML
}

// mergeMaps merges src into dst: a map into the map of the same key,
// anything else replacing what dst holds.
func mergeMaps(dst, src map[string]interface{}) {
	for k, v := range src {
		if sm, ok := v.(map[string]interface{}); ok {
			if dm, ok := dst[k].(map[string]interface{}); ok {
				mergeMaps(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// URL returns the web entrypoint's URL for path.
func (t *Traefik) URL(path string) string { return "http://" + t.Web + path }

// RouterStatus returns the status Traefik's API gives the router (e.g.
// "enabled", "disabled"), or "" when it does not know it.
func (t *Traefik) RouterStatus(name string) string {
	resp, err := http.Get("http://" + t.API + "/api/http/routers/" + name)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	var r struct{ Status string }
	b, _ := io.ReadAll(resp.Body)
	_ = yaml.Unmarshal(b, &r) // JSON is YAML
	return r.Status
}

// Goroutines returns the process's goroutine count (pprof), after a
// garbage collection (pprof's heap profile with gc=1): goroutines that end
// when their owner is collected (go-cache's janitors, which Traefik's
// reloads leave behind until then) are not counted.
func (t *Traefik) Goroutines() (int, error) {
	if resp, err := http.Get("http://" + t.API + "/debug/pprof/heap?gc=1"); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(50 * time.Millisecond) // finalizers run after the collection
	}
	resp, err := http.Get("http://" + t.API + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n')
	if err != nil {
		return 0, err
	}
	// "goroutine profile: total 123"
	f := strings.Fields(line)
	if len(f) == 0 {
		return 0, fmt.Errorf("pprof: %q", line)
	}
	return strconv.Atoi(f[len(f)-1])
}

// GoroutineDump returns the process's goroutines grouped by stack (pprof
// debug=1), for a failure message.
func (t *Traefik) GoroutineDump() string {
	resp, err := http.Get("http://" + t.API + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// Metric returns the sum of a Prometheus counter or gauge over its labels.
func (t *Traefik) Metric(name string) (float64, error) {
	resp, err := http.Get("http://" + t.API + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return 0, err
	}
	sum, _ := MetricValue(string(b), name, nil)
	return sum, nil
}

// Fleet is N Traefik replicas, one dynamic configuration file they all
// watch, and a backend they all route to.
type Fleet struct {
	Dir      string
	Dynamic  string // path of the dynamic configuration file
	Backend  *Backend
	Replicas []*Traefik
}

// StartFleet starts n replicas in dir with the dynamic configuration conf
// (see WriteDynamic). The caller stops it with Stop.
func StartFleet(dir string, n int, conf map[string]interface{}) (*Fleet, error) {
	return StartFleetWith(dir, n, conf, nil)
}

// StartFleetWith is StartFleet with static merged into every replica's
// static configuration (StartTraefik's extra).
func StartFleetWith(dir string, n int, conf, static map[string]interface{}) (*Fleet, error) {
	bin, err := TraefikBinary()
	if err != nil {
		return nil, err
	}
	if err := InstallLocalPlugin(dir); err != nil {
		return nil, err
	}
	f := &Fleet{Dir: dir, Dynamic: filepath.Join(dir, "dynamic", "dynamic.yml")}
	if f.Backend, err = StartBackend(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(f.Dynamic), 0o755); err != nil {
		f.Stop()
		return nil, err
	}
	if err := f.WriteDynamic(conf); err != nil {
		f.Stop()
		return nil, err
	}
	type started struct {
		i   int
		t   *Traefik
		err error
	}
	ch := make(chan started, n)
	for i := 0; i < n; i++ {
		go func(i int) {
			t, err := StartTraefik(bin, dir, fmt.Sprintf("traefik-%d", i+1), f.Dynamic, static)
			ch <- started{i, t, err}
		}(i)
	}
	f.Replicas = make([]*Traefik, n)
	var firstErr error
	for i := 0; i < n; i++ {
		s := <-ch
		f.Replicas[s.i] = s.t
		if s.err != nil && firstErr == nil {
			firstErr = s.err
		}
	}
	if firstErr != nil {
		f.Stop()
		return nil, firstErr
	}
	return f, nil
}

// WriteDynamic replaces the dynamic configuration atomically (write, then
// rename, so the watchers never read half a file). The service "backend",
// pointing at the fleet's backend, is added when conf has http.routers.
func (f *Fleet) WriteDynamic(conf map[string]interface{}) error {
	if h, ok := conf["http"].(map[string]interface{}); ok && f.Backend != nil {
		if _, ok := h["services"]; !ok {
			h["services"] = map[string]interface{}{"backend": map[string]interface{}{
				"loadBalancer": map[string]interface{}{"servers": []interface{}{
					map[string]interface{}{"url": "http://" + f.Backend.Addr}}}}}
		}
	}
	b, err := yaml.Marshal(conf)
	if err != nil {
		return err
	}
	tmp := f.Dynamic + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, f.Dynamic)
}

// WaitRouters waits until every replica reports each router's status as
// want ("enabled", or "" for gone).
func (f *Fleet) WaitRouters(want string, routers ...string) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, t := range f.Replicas {
		for _, r := range routers {
			for t.RouterStatus(r) != want {
				if time.Now().After(deadline) {
					return fmt.Errorf("%s: router %s status %q, want %q", t.Name, r, t.RouterStatus(r), want)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	return nil
}

// Stop stops every replica and the backend.
func (f *Fleet) Stop() {
	for _, t := range f.Replicas {
		if t != nil {
			t.Stop()
		}
	}
	if f.Backend != nil {
		f.Backend.Close()
	}
}
