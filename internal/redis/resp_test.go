package redis

// The plain RESP readers (resp.go, side.go) against well-formed and
// hostile replies: a read never allocates what a reply claims rather than
// what it sends ("*99999999999" preallocated is an out-of-memory error,
// which no recover stops, and Traefik dies with it).

import (
	"bufio"
	"errors"
	"runtime"
	"strings"
	"testing"
)

func TestReadStrings(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		wantErr  bool
	}{
		{in: "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n", want: "subscribe|+switch-master|1"},
		{in: "*3\r\n$7\r\nmessage\r\n$14\r\n+switch-master\r\n$36\r\nmymaster 10.0.0.1 6379 10.0.0.2 6379\r\n", want: "message|+switch-master|mymaster 10.0.0.1 6379 10.0.0.2 6379"},
		{in: "+OK\r\n", wantErr: true},
		{in: "*1\r\n$-5\r\n", wantErr: true},
		{in: "*9999999999\r\n", wantErr: true},
		{in: "*1\r\n$10\r\nshort\r\n", wantErr: true},
	} {
		got, err := readStrings(bufio.NewReader(strings.NewReader(tc.in)))
		if tc.wantErr != (err != nil) || strings.Join(got, "|") != tc.want {
			t.Errorf("readStrings(%q) = %q, %v; want %q (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestRespReadersHostile(t *testing.T) {
	mib := strings.Repeat("x", 1<<20)
	for _, tc := range []struct {
		desc string
		in   string
		want int // elements read; -1: ErrBadReply
	}{
		{desc: "an array of 99999999999", in: "*99999999999\r\n", want: -1},
		{desc: "a length past int64", in: "*99999999999999999999999999\r\n", want: -1},
		{desc: "70000 integers", in: "*70000\r\n" + strings.Repeat(":1\r\n", 70000), want: -1},
		{desc: "a bulk string of 99999999999 bytes", in: "*1\r\n$99999999999\r\n", want: -1},
		{desc: "a bulk string of 1 MiB + 1", in: "*1\r\n$1048577\r\n" + mib + "x\r\n", want: -1},
		{desc: "a bulk string without its CRLF", in: "*2\r\n$5\r\nhelloXY$1\r\nx\r\n", want: -1},
		{desc: "a negative bulk length", in: "*1\r\n$-5\r\n", want: -1},
		{desc: "a line longer than the buffer", in: "*1\r\n:" + mib + "\r\n", want: -1},
		{desc: "65536 integers", in: "*65536\r\n" + strings.Repeat(":1\r\n", 65536), want: 65536},
		{desc: "a bulk string of 1 MiB", in: "*1\r\n$1048576\r\n" + mib + "\r\n", want: 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := readStrings(bufio.NewReader(strings.NewReader(tc.in)))
			if tc.want < 0 {
				if !errors.Is(err, ErrBadReply) {
					t.Fatalf("readStrings = %d strings, %v; want ErrBadReply", len(got), err)
				}
				return
			}
			if err != nil || len(got) != tc.want {
				t.Fatalf("readStrings = %d strings, %v; want %d", len(got), err, tc.want)
			}
		})
	}
	for _, in := range []string{"*99999999999\r\n", "*2\r\n$99999999999\r\n", ":99999999999999999999999999\r\n"} {
		br := bufio.NewReader(strings.NewReader(in))
		if _, err := readInt(br); err == nil {
			t.Errorf("readInt(%q): no error", in)
		}
		br = bufio.NewReader(strings.NewReader(in))
		if _, err := readTime(br); err == nil {
			t.Errorf("readTime(%q): no error", in)
		}
	}
}

// TestRespReadersAllocateWhatArrives checks that readStrings allocates for
// the bytes that arrive, not for the lengths a reply claims: replies that
// claim the most the limits allow, then end.
func TestRespReadersAllocateWhatArrives(t *testing.T) {
	claims := []string{"*65536\r\n", "*1\r\n$1048576\r\n", "*2\r\n:1\r\n$1048576\r\nxy"}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := 0; i < 8; i++ {
		for _, in := range claims {
			if _, err := readStrings(bufio.NewReader(strings.NewReader(in))); err == nil {
				t.Fatalf("readStrings(%q): no error", in)
			}
		}
	}
	runtime.ReadMemStats(&after)
	// Preallocating the claims would take 8 × (1 MiB + 1 MiB + 1 MiB).
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Fatalf("reading %d truncated replies allocated %d bytes, want under 4 MiB", 8*len(claims), got)
	}
}

// A side reply's lines count against its budget, not its bulk strings
// alone: 65,536 integers of 64 digits are more than maxReplyBytes.
func TestSideReplyBudgetCountsEveryLine(t *testing.T) {
	var b strings.Builder
	b.WriteString("*65536\r\n")
	for i := 0; i < 65536; i++ {
		b.WriteString(":" + strings.Repeat("9", 64) + "\r\n")
	}
	if _, err := readValues(bufio.NewReader(strings.NewReader(b.String()))); err == nil {
		t.Errorf("an array of %d bytes of integer lines was read whole, past the budget of %d", b.Len(), maxReplyBytes)
	}
}
