package redistest

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// LookServer finds redis-server on PATH.
func LookServer() (string, error) {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, "redis-server")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("redis-server not found on PATH (apt-get install -y redis-server)")
}

// needServer returns redis-server's path; without one the test is
// skipped, unless CI is set: then it fails.
func needServer(t testing.TB) string {
	t.Helper()
	bin, err := LookServer()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err.Error() + "; required under CI")
		}
		t.Skip(err.Error())
	}
	return bin
}

// Start starts a redis-server (no persistence) on a free loopback port
// for the test, with extra arguments ("{port}" in one is the port), and
// returns its address.
func Start(t testing.TB, extra ...string) string {
	t.Helper()
	bin := needServer(t)
	dir := t.TempDir()
	var last string
	// A port free a moment ago may be taken by then: another try.
	for attempt := 0; attempt < 3; attempt++ {
		port := FreePort(t)
		logName := filepath.Join(dir, "redis-"+port+".log")
		logf, err := os.Create(logName)
		if err != nil {
			t.Fatal(err)
		}
		devnull, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		args := []string{bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--daemonize", "no", "--loglevel", "warning"}
		for _, e := range extra {
			args = append(args, strings.Replace(e, "{port}", port, -1))
		}
		proc, err := os.StartProcess(bin, args, &os.ProcAttr{Dir: dir, Files: []*os.File{devnull, logf, logf}})
		devnull.Close()
		logf.Close()
		if err != nil {
			t.Fatalf("starting redis-server: %v", err)
		}
		addr := "127.0.0.1:" + port
		if ready(addr, proc.Pid) {
			t.Cleanup(func() {
				_ = proc.Kill()
				_, _ = proc.Wait()
			})
			return addr
		}
		_ = proc.Kill()
		_, _ = proc.Wait()
		out, _ := os.ReadFile(logName)
		last = string(out)
	}
	t.Fatalf("redis-server did not start: %s", last)
	return ""
}

// StartCluster starts a redis-server in cluster mode that serves every
// slot, and returns its address: it refuses a transaction over keys of
// two slots (CROSSSLOT) like any Cluster.
func StartCluster(t testing.TB) string {
	t.Helper()
	addr := Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes-{port}.conf")
	Do(t, addr, "CLUSTER", "ADDSLOTSRANGE", "0", "16383")
	for i := 0; i < 250; i++ {
		if v := Do(t, addr, "CLUSTER", "INFO"); len(v) == 1 && strings.Contains(v[0], "cluster_state:ok") {
			return addr
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the one-node cluster never reached cluster_state:ok")
	return ""
}

// ready waits up to 10 s for the redis-server of process pid to answer on
// addr (and not another one that took the port).
func ready(addr string, pid int) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if v, err := do(addr, "INFO", "server"); err == nil {
			return len(v) == 1 && strings.Contains(v[0], "process_id:"+strconv.Itoa(pid)+"\r\n")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// FreePort is a loopback port free a moment ago.
func FreePort(t testing.TB) string {
	t.Helper()
	nc, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	a := nc.Addr().String()
	return a[strings.LastIndex(a, ":")+1:]
}

// Do runs one command on addr and returns its reply as strings (see
// ReadReply); it fails the test on a connection's error.
func Do(t testing.TB, addr string, args ...string) []string {
	t.Helper()
	v, err := do(addr, args...)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func do(addr string, args ...string) ([]string, error) {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	_ = nc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := nc.Write(Command(args...)); err != nil {
		return nil, err
	}
	return ReadReply(bufio.NewReader(nc))
}

// Command is args as a RESP command.
func Command(args ...string) []byte {
	b := []byte("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b = append(b, "$"+strconv.Itoa(len(a))+"\r\n"+a+"\r\n"...)
	}
	return b
}

// ReadReply reads one reply as strings: a status, integer or bulk string
// as one, an array of them (not nested) as its elements, a nil as none;
// an error reply is one string starting with "-".
func ReadReply(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redistest: empty reply line")
	}
	if line[0] != '*' {
		v, isNil, err := scalar(br, line)
		if err != nil || isNil {
			return nil, err
		}
		return []string{v}, nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n > 1<<20 {
		return nil, errors.New("redistest: bad array length")
	}
	var out []string
	for i := 0; i < n; i++ {
		el, err := br.ReadString('\n')
		if err != nil {
			return nil, err
		}
		v, _, err := scalar(br, strings.TrimSuffix(el, "\r\n"))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// scalar is the value of a non-array reply whose first line is line.
func scalar(br *bufio.Reader, line string) (v string, isNil bool, err error) {
	if line == "" {
		return "", false, errors.New("redistest: empty reply line")
	}
	switch line[0] {
	case '+', ':':
		return line[1:], false, nil
	case '-':
		return line, false, nil
	case '$':
		size, err := strconv.Atoi(line[1:])
		if err != nil || size > 64<<20 {
			return "", false, errors.New("redistest: bad bulk length")
		}
		if size < 0 {
			return "", true, nil
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(br, b); err != nil {
			return "", false, err
		}
		return string(b[:size]), false, nil
	}
	return "", false, errors.New("redistest: unexpected reply " + strconv.Quote(line))
}

// WaitFor polls cond for up to 2 s and fails the test, naming what, if it
// never holds.
func WaitFor(t testing.TB, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
