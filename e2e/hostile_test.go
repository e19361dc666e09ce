package e2e

// What the dynamic configuration's author may point the plugin at, compiled
// and under Yaegi: redis.passwordFile must be a regular file of one line, and
// anything else makes New fail at once with an error naming the field and
// the path, not block it (a FIFO), exhaust memory (/dev/zero) or silently
// turn AUTH off (an empty file).

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPasswordFileRefused(t *testing.T) {
	forEachKind(t, func(t *testing.T, e *env) {
		dir := t.TempDir()
		fifo := filepath.Join(dir, "fifo")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		// Should New open the FIFO, a writer unblocks it when the test ends.
		t.Cleanup(func() {
			if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		})
		empty := filepath.Join(dir, "empty")
		if err := os.WriteFile(empty, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		newline := filepath.Join(dir, "newline")
		if err := os.WriteFile(newline, []byte("\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		twoLines := filepath.Join(dir, "two-lines")
		if err := os.WriteFile(twoLines, []byte("user\npass\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			desc, path, want string
		}{
			{desc: "FIFO", path: fifo, want: "is not a regular file"},
			{desc: "the zero device", path: "/dev/zero", want: `is "/dev/zero", which holds no Redis password`},
			{desc: "directory", path: dir, want: "is not a regular file"},
			{desc: "empty file", path: empty, want: "is empty"},
			{desc: "only a newline", path: newline, want: "is empty"},
			{desc: "two lines", path: twoLines, want: "holds more than one line"},
		} {
			t.Run(tc.desc, func(t *testing.T) {
				o := e.opts("average", 60, "period", "1m", "redis.passwordFile", tc.path)
				pod := e.pod()
				errc := make(chan error, 1)
				go func() {
					_, err := pod.New(context.Background(), okHandler, o, "api@file")
					errc <- err
				}()
				var err error
				select {
				case err = <-errc:
				case <-time.After(30 * time.Second):
					t.Fatalf("New(passwordFile %q) has not returned in 30s", tc.path)
				}
				want := `redis.passwordFile: "` + tc.path + `" ` + tc.want
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("New error = %v, want one containing %q", err, want)
				}
			})
		}
	})
}
