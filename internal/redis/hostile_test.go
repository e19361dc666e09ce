package redis

// A hostile or broken server must not be able to make a read allocate what
// a reply claims rather than what it sends: "*99999999999" preallocated is
// an out-of-memory error, which no recover stops, and Traefik dies with
// it. redigo reads the handshake (AUTH, CLIENT SETNAME, SELECT) and the
// topology queries (CLUSTER SLOTS, SENTINEL); resp.go reads the rest
// (resp_test.go). Both bound every length (patches/redigo-bounds.patch,
// budgetConn and resp.go's limits).

import (
	"bufio"
	"context"
	"errors"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	redigo "github.com/gomodule/redigo/redis"
	"github.com/tollgate-dev/tollgate/internal/redistest"
)

// hostileServer answers the command named on with reply, then ends the
// connection (EOF after the reply), and every other command with +OK; it
// stops with the test.
func hostileServer(t *testing.T, on, reply string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go func(nc net.Conn) {
				defer nc.Close()
				br := bufio.NewReader(nc)
				for {
					args, err := redistest.ReadCommand(br)
					if err != nil {
						return
					}
					if !strings.EqualFold(args[0], on) {
						if _, err := nc.Write([]byte("+OK\r\n")); err != nil {
							return
						}
						continue
					}
					if _, err := nc.Write([]byte(reply)); err != nil {
						return
					}
					if tc, ok := nc.(*net.TCPConn); ok {
						_ = tc.CloseWrite()
					}
				}
			}(nc)
		}
	}()
	return ln.Addr().String()
}

// hostileDial dials addr as a pool or a topology query does, reading at
// most budget bytes; got receives the raw connection.
func hostileDial(addr, password string, db int64, budget int, got func(net.Conn)) (redigo.Conn, error) {
	deadline := time.Now().Add(10 * time.Second)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return redigo.DialContext(ctx, "tcp", addr, dialOptions(nil, deadline, "", password, db, budget, got)...)
}

func TestDialHostileReplies(t *testing.T) {
	mib := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		desc     string
		password string
		db       int64
		on       string // the command that gets the reply (others: +OK)
		reply    string
		ok       bool // within the limits: accepted
		want     int  // with ok, the length of the reply (array or bulk)
	}{
		{desc: "AUTH: an array of 99999999999", password: "pw", on: "AUTH", reply: "*99999999999\r\n"},
		{desc: "AUTH: a bulk string of 99999999999 bytes", password: "pw", on: "AUTH", reply: "$99999999999\r\n"},
		{desc: "CLIENT SETNAME: an array of 99999999999", on: "CLIENT", reply: "*99999999999\r\n"},
		{desc: "CLIENT SETNAME: a length past int64", on: "CLIENT", reply: "*99999999999999999999999999\r\n"},
		{desc: "CLIENT SETNAME: a bulk string of 1 MiB + 1", on: "CLIENT", reply: "$1048577\r\n" + mib + "x\r\n"},
		{desc: "CLIENT SETNAME: a status line of 2 MiB", on: "CLIENT", reply: "+" + mib + mib + "\r\n"},
		{desc: "CLIENT SETNAME: arrays nested 100000 deep", on: "CLIENT", reply: strings.Repeat("*1\r\n", 100000) + ":1\r\n"},
		{desc: "SELECT: a bulk string of 99999999999 bytes", db: 3, on: "SELECT", reply: "$99999999999\r\n"},
		{desc: "SELECT: 70000 integers", db: 3, on: "SELECT", reply: "*70000\r\n" + strings.Repeat(":1\r\n", 70000)},
		{desc: "CLUSTER SLOTS: an array of 99999999999", on: "CLUSTER", reply: "*99999999999\r\n"},
		{desc: "CLUSTER SLOTS: 70000 empty arrays", on: "CLUSTER", reply: "*70000\r\n" + strings.Repeat("*0\r\n", 70000)},
		{desc: "CLUSTER SLOTS: arrays nested 9 deep", on: "CLUSTER", reply: strings.Repeat("*1\r\n", 9) + ":1\r\n"},
		{desc: "SENTINEL get-master-addr-by-name: a bulk string of 99999999999 bytes", on: "SENTINEL", reply: "*2\r\n$99999999999\r\n"},
		// At the limits.
		{desc: "CLUSTER SLOTS: 16384 integers", on: "CLUSTER", reply: "*16384\r\n" + strings.Repeat(":1\r\n", 16384), ok: true, want: 16384},
		{desc: "CLUSTER SLOTS: 65536 integers, past the budget", on: "CLUSTER", reply: "*65536\r\n" + strings.Repeat(":1\r\n", 65536)},
		{desc: "CLUSTER SLOTS: arrays nested 8 deep", on: "CLUSTER", reply: strings.Repeat("*1\r\n", 8) + ":1\r\n", ok: true, want: 1},
		{desc: "SENTINEL get-master-addr-by-name: a bulk string of 64 KiB", on: "SENTINEL", reply: "$65536\r\n" + mib[:1<<16] + "\r\n", ok: true, want: 1 << 16},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			addr := hostileServer(t, tc.on, tc.reply)
			conn, err := hostileDial(addr, tc.password, tc.db, adminBytes, func(_ net.Conn) {})
			var reply interface{}
			if err == nil {
				defer conn.Close()
				switch tc.on {
				case "CLUSTER":
					reply, err = conn.Do("CLUSTER", "SLOTS")
				case "SENTINEL":
					reply, err = conn.Do("SENTINEL", "get-master-addr-by-name", "mymaster")
				}
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("error %v, want the reply", err)
				}
				n := -1
				if a, isArray := reply.([]interface{}); isArray {
					n = len(a)
				} else if b, isBulk := reply.([]byte); isBulk {
					n = len(b)
				}
				if n != tc.want {
					t.Fatalf("reply of length %d, want %d", n, tc.want)
				}
				return
			}
			// A protocol error at once: not a timeout, not a crash.
			if err == nil || !strings.HasPrefix(err.Error(), "redigo: ") && !errors.Is(err, errReplyTooLong) {
				t.Fatalf("error %v, want redigo's protocol error or errReplyTooLong", err)
			}
		})
	}
}

// TestDialReadsABoundedTotal checks that a node cannot make a dial or a
// topology query hold memory out of proportion to the budget: nested
// arrays of empty arrays, which redigo holds at 10-14 times their bytes,
// are cut off at the connection's budget (handshakeBytes, adminBytes).
func TestDialReadsABoundedTotal(t *testing.T) {
	// 8 MB: 32 arrays of 65536 empty arrays (redigo's most per array).
	nested := "*65536\r\n" + strings.Repeat("*65536\r\n"+strings.Repeat("*0\r\n", 65536), 32)
	for _, tc := range []struct {
		desc, on string
		budget   int
	}{
		{desc: "the handshake's CLIENT SETNAME", on: "CLIENT", budget: handshakeBytes},
		{desc: "a topology query", on: "CLUSTER", budget: adminBytes},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			addr := hostileServer(t, tc.on, nested)
			var raw net.Conn
			conn, err := hostileDial(addr, "", 0, tc.budget, func(nc net.Conn) { raw = nc })
			if err == nil {
				_, err = conn.Do("CLUSTER", "SLOTS")
				conn.Close()
			}
			if !errors.Is(err, errReplyTooLong) {
				t.Fatalf("error %v, want errReplyTooLong", err)
			}
			if raw == nil {
				t.Fatal("no connection")
			}
		})
	}
}

// TestBudgetConnReadsAtMostItsBudget: redigo reads a budgetConn's bytes
// up to its budget, then errReplyTooLong, however the reads are split.
func TestBudgetConnReadsAtMostItsBudget(t *testing.T) {
	client, server := net.Pipe()
	defer client.Close()
	go func() {
		_, _ = server.Write(make([]byte, 10000))
		server.Close()
	}()
	bc := &budgetConn{Conn: client, left: 4096}
	total := 0
	buf := make([]byte, 1500)
	var err error
	for err == nil {
		var n int
		n, err = bc.Read(buf)
		total += n
	}
	if total != 4096 || !errors.Is(err, errReplyTooLong) {
		t.Fatalf("read %d bytes, then %v; want 4096, then errReplyTooLong", total, err)
	}
}

// TestDialAllocatesWhatArrives checks that redigo allocates for the bytes
// that arrive, not for the length a reply claims: a bulk string that claims
// the most the limit allows, then ends.
func TestDialAllocatesWhatArrives(t *testing.T) {
	addr := hostileServer(t, "SENTINEL", "$1048576\r\nxy")
	var total uint64
	for i := 0; i < 4; i++ {
		conn, err := hostileDial(addr, "", 0, adminBytes, func(_ net.Conn) {})
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err = conn.Do("SENTINEL", "get-master-addr-by-name", "mymaster")
		runtime.ReadMemStats(&after)
		conn.Close()
		if err == nil {
			t.Fatal("a truncated reply: no error")
		}
		total += after.TotalAlloc - before.TotalAlloc
	}
	// Preallocating the claim would take 4 × 1 MiB.
	if total > 2<<20 {
		t.Fatalf("reading 4 truncated replies allocated %d bytes, want under 2 MiB", total)
	}
}

// TestClientReadsAreBounded checks that the client's own dials and
// topology queries read within a budget: a pool's dial (the handshake),
// CLUSTER SLOTS and SENTINEL get-master-addr-by-name, each answered with
// 8 MB of nested empty arrays, fail with errReplyTooLong.
func TestClientReadsAreBounded(t *testing.T) {
	nested := "*65536\r\n" + strings.Repeat("*65536\r\n"+strings.Repeat("*0\r\n", 65536), 32)
	t.Run("a pool's dial", func(t *testing.T) {
		c := NewPool(Options{Addr: hostileServer(t, "CLIENT", nested), Timeout: 50 * time.Millisecond, PoolSize: 1, Script: testScript})
		if _, err := c.dialSafe(true); !errors.Is(err, errReplyTooLong) {
			t.Fatalf("error %v, want errReplyTooLong", err)
		}
	})
	t.Run("CLUSTER SLOTS", func(t *testing.T) {
		addr := hostileServer(t, "CLUSTER", nested)
		if _, err := topoClient(Cluster, addr).clusterSlots(addr); !errors.Is(err, errReplyTooLong) {
			t.Fatalf("error %v, want errReplyTooLong", err)
		}
	})
	t.Run("SENTINEL get-master-addr-by-name", func(t *testing.T) {
		rc := topoClient(Sentinel, hostileServer(t, "SENTINEL", nested))
		if err := rc.resolvePrimary(); !errors.Is(err, errReplyTooLong) || rc.topo.primary != nil {
			t.Fatalf("error %v, primary %v; want errReplyTooLong and none", err, rc.topo.primary)
		}
	})
}
