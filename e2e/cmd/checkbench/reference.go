package main

// Reference points measured in the same run and the same interpreter as the
// plugin: redigo's Pool + Script.Do (what a plugin built the obvious way
// does), and a bare EVALSHA exchange with no plugin logic at all (the floor
// of an interpreted round trip). Both run the plugin's own bucket script,
// loaded from its source so the numbers compare like for like.

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/gomodule/redigo/redis"
	"github.com/tollgate-dev/tollgate/e2e"
	"github.com/traefik/yaegi/interp"
	"github.com/traefik/yaegi/stdlib"
)

const referenceSource = `package reference

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"
)

var (
	pool   *redis.Pool
	script *redis.Script
	conn   net.Conn
	br     *bufio.Reader
	call   []byte
	out    = make([]int64, 4)
)

// Setup prepares both references for the bucket script src at addr.
func Setup(addr, src string) error {
	pool = &redis.Pool{MaxIdle: 8, Dial: func() (redis.Conn, error) { return redis.Dial("tcp", addr) }}
	script = redis.NewScript(1, src)
	c := pool.Get()
	defer c.Close()
	if err := script.Load(c); err != nil {
		return err
	}
	var err error
	if conn, err = net.Dial("tcp", addr); err != nil {
		return err
	}
	br = bufio.NewReader(conn)
	sum := sha1.Sum([]byte(src))
	key := "tollgate:{reference-key-00}"
	call = []byte("*7\r\n$7\r\nEVALSHA\r\n$40\r\n" + hex.EncodeToString(sum[:]) + "\r\n$1\r\n1\r\n$" +
		strconv.Itoa(len(key)) + "\r\n" + key + "\r\n$5\r\n0.001\r\n$3\r\n1e9\r\n$1\r\n1\r\n")
	return nil
}

// Redigo is one check through redigo's Pool and Script.Do.
func Redigo() error {
	c := pool.Get()
	defer c.Close()
	_, err := redis.String(script.Do(c, "tollgate:{reference-key-01}", "0.001", "1e9", "1"))
	return err
}

// Bare is one check as a bare prepared EVALSHA on a raw socket.
func Bare() error {
	if err := conn.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := conn.Write(call); err != nil {
		return err
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return err
	}
	_, err = fmt.Sscan(string(line[1:len(line)-2]), &out[0], &out[1], &out[2], &out[3])
	return err
}
`

// references loads the reference package into a fresh interpreter whose
// GOPATH has the plugin's vendored (patched) redigo, and returns its checks.
func references(dir, addr string) (redigo, bare func() error, err error) {
	gp := filepath.Join(dir, "reference-gopath")
	src := filepath.Join(gp, "src", "reference")
	if err := os.MkdirAll(filepath.Join(gp, "src", "github.com", "gomodule"), 0o755); err != nil {
		return nil, nil, err
	}
	if err := os.Symlink(filepath.Join(e2e.RepoRoot(), "vendor", "github.com", "gomodule", "redigo"),
		filepath.Join(gp, "src", "github.com", "gomodule", "redigo")); err != nil {
		return nil, nil, err
	}
	if err := os.MkdirAll(src, 0o755); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(filepath.Join(src, "reference.go"), []byte(referenceSource), 0o644); err != nil {
		return nil, nil, err
	}
	i := interp.New(interp.Options{GoPath: gp})
	if err := i.Use(stdlib.Symbols); err != nil {
		return nil, nil, err
	}
	if _, err := i.Eval(`import "reference"`); err != nil {
		return nil, nil, err
	}
	lua, err := bucketScriptSource()
	if err != nil {
		return nil, nil, err
	}
	setup, err := i.Eval("reference.Setup")
	if err != nil {
		return nil, nil, err
	}
	if err := setup.Interface().(func(string, string) error)(addr, lua); err != nil {
		return nil, nil, fmt.Errorf("reference setup: %w", err)
	}
	r, err := i.Eval("reference.Redigo")
	if err != nil {
		return nil, nil, err
	}
	b, err := i.Eval("reference.Bare")
	if err != nil {
		return nil, nil, err
	}
	return r.Interface().(func() error), b.Interface().(func() error), nil
}

// bucketScriptSource reads the plugin's Lua script from bucket.go.
func bucketScriptSource() (string, error) {
	b, err := os.ReadFile(filepath.Join(e2e.RepoRoot(), "bucket.go"))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile("(?s)const bucketScript = `(.*?)`").FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("no bucketScript in bucket.go")
	}
	return string(m[1]), nil
}

// timeFunc measures f like sequential measures a handler.
func timeFunc(f func() error, n int) (figures, error) {
	for i := 0; i < 2000; i++ {
		if err := f(); err != nil {
			return figures{}, err
		}
	}
	return measure(n, func() { _ = f() }), nil
}

// cBenchmark runs the bucket script through redis-benchmark, Redis's own C
// client, one connection, n calls, and returns its p50: the floor of one
// check on this machine, with no Go at all.
func cBenchmark(r *e2e.Redis, n int) (string, error) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return "", err
	}
	lua, err := bucketScriptSource()
	if err != nil {
		return "", err
	}
	sha, err := redis.String(r.Do("SCRIPT", "LOAD", lua))
	if err != nil {
		return "", err
	}
	_, port, _ := net.SplitHostPort(r.Addr)
	out, err := exec.Command(bin, "-h", "127.0.0.1", "-p", port, "-n", strconv.Itoa(n), "-c", "1", "-q",
		"EVALSHA", sha, "1", "tollgate:{c-benchmark-key0}", "0.001", "1e9", "1").Output()
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`p50=([0-9.]+) msec`).FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("no p50 in %q", out)
	}
	ms, err := strconv.ParseFloat(string(m[1]), 64)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%.0f µs", ms*1000), nil
}
