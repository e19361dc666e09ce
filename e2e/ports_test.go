package e2e

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/gomodule/redigo/redis"
)

func TestFreePortReserved(t *testing.T) {
	// A port FreePort hands out is below the ephemeral range (no outgoing
	// connection takes it as its local port) and locked for this process
	// (no other test process's FreePort hands it out, even while its
	// server is down).
	seen := map[int]bool{}
	for i := 0; i < 20; i++ {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("FreePort handed out %d twice", p)
		}
		seen[p] = true
		if low := ephemeralLow(); p >= low {
			t.Fatalf("FreePort: %d, in the ephemeral range (from %d)", p, low)
		}
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "tollgate-e2e-ports", strconv.Itoa(p)), os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("port %d has no lock file: %v", p, err)
		}
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		f.Close()
		if err == nil {
			t.Fatalf("port %d: its lock could be taken again: not reserved", p)
		}
	}
}

func TestRedisStartOnATakenPort(t *testing.T) {
	// Another redis-server holds the port: that one answers PING, but the
	// start is not taken for done (errPortTaken); a first start moves to
	// another port.
	a := startRedis(t)
	b := &Redis{Addr: a.Addr, port: a.port, dir: t.TempDir(), bin: a.bin}
	t.Cleanup(b.Kill)
	if err := b.start(); !errors.Is(err, errPortTaken) {
		t.Fatalf("redis-server started on %s, held by another: %v, want errPortTaken", a.Addr, err)
	}
	if err := b.startNew(); err != nil {
		t.Fatal(err)
	}
	info, err := b.Info("server")
	if err != nil {
		t.Fatal(err)
	}
	if b.Addr == a.Addr || info["process_id"] != strconv.Itoa(b.cmd.Process.Pid) {
		t.Fatalf("after the retry: %s (process %s), want its own server on a port other than %s", b.Addr, info["process_id"], a.Addr)
	}
	// A cluster node whose bus port is taken moves both.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := &Redis{Addr: "127.0.0.1", dir: t.TempDir(), bin: a.bin, bus: l.Addr().(*net.TCPAddr).Port,
		extra: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"}}
	t.Cleanup(c.Kill)
	if c.port, err = FreePort(); err != nil {
		t.Fatal(err)
	}
	c.Addr = "127.0.0.1:" + strconv.Itoa(c.port)
	if err := c.start(); !errors.Is(err, errPortTaken) {
		t.Fatalf("cluster node with its bus port taken: %v, want errPortTaken", err)
	}
	if err := c.startNew(); err != nil {
		t.Fatal(err)
	}
	if s, err := redis.String(c.Do("CLUSTER", "MYID")); err != nil || s == "" {
		t.Fatalf("cluster node after the retry: CLUSTER MYID %q %v", s, err)
	}
}

func TestTraefikStartOnATakenPort(t *testing.T) {
	// A web port held by another program ends Traefik at start; an API
	// port where another Traefik answers is not taken for this one's. Both
	// are errPortTaken, which StartTraefik answers with new ports.
	bin, err := TraefikBinary()
	if err != nil {
		if NeedTraefik(err) {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := InstallLocalPlugin(dir); err != nil {
		t.Fatal(err)
	}
	dyn := filepath.Join(dir, "dynamic.yml")
	if err := os.WriteFile(dyn, []byte("http: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	first, err := StartTraefik(bin, dir, "first", dyn, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(first.Stop)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	free := func() int {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	taken := l.Addr().(*net.TCPAddr).Port
	if tr, err := startTraefik(bin, dir, "web-taken", dyn, nil, taken, free()); !errors.Is(err, errPortTaken) {
		if tr != nil {
			tr.Stop()
		}
		t.Fatalf("Traefik on a taken web port: %v, want errPortTaken", err)
	}
	_, api, _ := net.SplitHostPort(first.API)
	apiPort, _ := strconv.Atoi(api)
	if tr, err := startTraefik(bin, dir, "api-taken", dyn, nil, free(), apiPort); !errors.Is(err, errPortTaken) {
		if tr != nil {
			tr.Stop()
		}
		t.Fatalf("Traefik on the API port of another: %v, want errPortTaken", err)
	}
}
