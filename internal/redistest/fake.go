// Package redistest starts Redis servers for tests: an in-process fake
// (Fake) for the unit tests of reply handling and faults, and real
// redis-servers (Start, StartCluster) for everything that runs the script.
// It imports nothing of the plugin's, so that any package's tests may use
// it.
package redistest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"io"
	"math/big"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Fake answers every EVALSHA/EVAL with Reply, SCRIPT LOAD with the
// script's SHA1, heartbeats as if 3 pods were registered, the commands in
// Replies with their canned reply, and anything else (CLIENT SETNAME) with
// +OK. An in-process fake, for unit tests of reply handling only: the
// behaviour against Redis itself is tested against real redis-servers.
// Counters and switches are read and set atomically.
type Fake struct {
	L       net.Listener
	Reply   string
	Replies map[string]string // by command, upper case; set before serving
	Evals   int64             // script calls
	Beats   int64             // heartbeats (ZCARD)
	SetName int64             // Unix ns: CLIENT SETNAME is answered no sooner (a slow dial)
	Names   int64             // CLIENT commands received
	Frozen  int32             // 1: commands are read but never answered
	IsDown  int32             // 1: connections are closed at once
	Pings   int64             // PINGs received
	IDs     int64             // the last CLIENT ID given
	Resets  int32             // 1: a script call is run (counted), then its connection closed unanswered
	Record  int32             // 1: script calls are kept in Calls

	Mu    sync.Mutex
	Open  map[net.Conn]bool // guarded by Mu: the connections being served
	Auths []string          // guarded by Mu: the password of each AUTH received
	Calls []string          // guarded by Mu: each script call received while Record is 1, its words space-joined
	// ScriptReplies, guarded by Mu, answers EVALSHA of a script (by its
	// SHA1) with a reply of its own instead of Reply.
	ScriptReplies map[string]string
}

// Addr is the fake's address.
func (f *Fake) Addr() string { return f.L.Addr().String() }

// Restart closes every connection open, as a restarted Redis does; the
// server goes on accepting new ones.
func (f *Fake) Restart() {
	f.Mu.Lock()
	for c := range f.Open {
		c.Close()
	}
	f.Mu.Unlock()
}

// Freeze makes the server stop answering.
func (f *Fake) Freeze() { atomic.StoreInt32(&f.Frozen, 1) }

// Down makes the server close every connection (true) or serve again.
func (f *Fake) Down(v bool) {
	var n int32
	if v {
		n = 1
	}
	atomic.StoreInt32(&f.IsDown, n)
}

// StartFake starts a Fake answering scripts with reply.
func StartFake(t testing.TB, reply string) *Fake {
	t.Helper()
	return StartFakeWith(t, reply, nil)
}

// StartFakeWith is StartFake with canned replies by command.
func StartFakeWith(t testing.TB, reply string, replies map[string]string) *Fake {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &Fake{L: l, Reply: reply, Replies: replies}
	t.Cleanup(func() { l.Close() })
	go f.serve()
	return f
}

// StartFakeTLS is StartFake behind TLS, with a self-signed certificate
// for 127.0.0.1.
func StartFakeTLS(t testing.TB, reply string) *Fake {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	f := &Fake{L: l, Reply: reply}
	t.Cleanup(func() { l.Close() })
	go f.serve()
	return f
}

func (f *Fake) serve() {
	for {
		c, err := f.L.Accept()
		if err != nil {
			return
		}
		go f.conn(c)
	}
}

func (f *Fake) conn(c net.Conn) {
	f.Mu.Lock()
	if f.Open == nil {
		f.Open = map[net.Conn]bool{}
	}
	f.Open[c] = true
	f.Mu.Unlock()
	defer func() {
		f.Mu.Lock()
		delete(f.Open, c)
		f.Mu.Unlock()
		c.Close()
	}()
	br := bufio.NewReader(c)
	for {
		args, err := ReadCommand(br)
		if err != nil || atomic.LoadInt32(&f.IsDown) == 1 {
			return
		}
		if atomic.LoadInt32(&f.Frozen) == 1 {
			continue
		}
		reply, reset := f.answer(args)
		if reset {
			return // run, then the connection lost before the reply
		}
		if _, err := c.Write([]byte(reply)); err != nil {
			return
		}
	}
}

// answer is the reply to args (see Fake), or reset: the connection is to
// be closed unanswered (Resets).
func (f *Fake) answer(args []string) (reply string, reset bool) {
	reply = "+OK\r\n"
	verb := strings.ToUpper(args[0])
	switch verb {
	case "AUTH":
		f.Mu.Lock()
		f.Auths = append(f.Auths, args[len(args)-1])
		f.Mu.Unlock()
	case "CLIENT":
		if len(args) > 1 && strings.EqualFold(args[1], "ID") {
			reply = ":" + strconv.FormatInt(atomic.AddInt64(&f.IDs, 1), 10) + "\r\n"
		} else {
			atomic.AddInt64(&f.Names, 1)
			time.Sleep(time.Until(time.Unix(0, atomic.LoadInt64(&f.SetName))))
		}
	case "SCRIPT":
		if len(args) == 3 {
			sum := sha1.Sum([]byte(args[2]))
			reply = "$40\r\n" + hex.EncodeToString(sum[:]) + "\r\n"
		}
	case "TIME":
		reply = "*2\r\n$10\r\n1700000000\r\n$1\r\n0\r\n"
	case "ZADD", "ZREMRANGEBYSCORE", "PEXPIRE":
		reply = ":1\r\n"
	case "ZCARD":
		atomic.AddInt64(&f.Beats, 1)
		reply = ":3\r\n"
	case "PING":
		atomic.AddInt64(&f.Pings, 1)
		reply = "+PONG\r\n"
	}
	if r, ok := f.Replies[verb]; ok {
		return r, false
	}
	if verb == "EVALSHA" || verb == "EVAL" {
		atomic.AddInt64(&f.Evals, 1)
		f.Mu.Lock()
		if atomic.LoadInt32(&f.Record) == 1 {
			f.Calls = append(f.Calls, strings.Join(args, " "))
		}
		r, own := "", false
		if len(args) > 1 {
			r, own = f.ScriptReplies[args[1]]
		}
		f.Mu.Unlock()
		if own {
			return r, false
		}
		return f.Reply, atomic.LoadInt32(&f.Resets) == 1
	}
	return reply, false
}

// ReadCommand reads one RESP array of bulk strings.
func ReadCommand(br *bufio.Reader) ([]string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "*")))
	if err != nil || n < 1 || n > 1<<20 {
		return nil, errors.New("redistest: not a command")
	}
	args := make([]string, n)
	for i := range args {
		if line, err = br.ReadString('\n'); err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
		if err != nil || size < 0 || size > 64<<20 {
			return nil, errors.New("redistest: not a bulk string")
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		args[i] = string(b[:size])
	}
	return args, nil
}
