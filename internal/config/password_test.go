package config

// redis.passwordFile names a file on the pod from the dynamic configuration,
// whose author may not be whoever runs Traefik: only a regular file of one
// short line is a password. (A FIFO, which needs syscall or os/exec to make,
// is in the e2e suite: e2e/hostile_test.go.)

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPasswordFile(t *testing.T) {
	dir := t.TempDir()
	setSecretDirs(t, dir)
	write := func(name, content string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	secret := write("secret", "s3cret\n")
	// Kubernetes mounts a secret as a link to a link into a timestamped
	// folder.
	if err := os.Mkdir(filepath.Join(dir, "..2024_01_01"), 0o700); err != nil {
		t.Fatal(err)
	}
	write("..2024_01_01/password", "k8s-s3cret")
	if err := os.Symlink("..2024_01_01", filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/password", filepath.Join(dir, "password")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(dir, "missing"), filepath.Join(dir, "dangling")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc string
		path string
		want string // the password; "" for an error
		err  string // what the error says after the field and the path
	}{
		{desc: "regular file, trailing newline", path: secret, want: "s3cret"},
		{desc: "regular file, trailing CRLF", path: write("crlf", "s3cret\r\n"), want: "s3cret"},
		{desc: "regular file, no newline", path: write("bare", "s3cret"), want: "s3cret"},
		{desc: "spaces and UTF-8 kept", path: write("utf8", " pass wörd \n"), want: " pass wörd "},
		{desc: "4096 bytes", path: write("max", strings.Repeat("p", 4095)+"\n"), want: strings.Repeat("p", 4095)},
		{desc: "symlink to a regular file", path: filepath.Join(dir, "password"), want: "k8s-s3cret"},
		{desc: "missing", path: filepath.Join(dir, "missing"), err: "reading"},
		{desc: "dangling symlink", path: filepath.Join(dir, "dangling"), err: "reading"},
		{desc: "directory", path: dir, err: "is not a regular file"},
		{desc: "the zero device", path: "/dev/zero", err: "holds no Redis password"},
		{desc: "the null device", path: "/dev/null", err: "holds no Redis password"},
		{desc: "4097 bytes", path: write("oversize", strings.Repeat("p", 4097)), err: "is larger than 4096 bytes"},
		{desc: "1 MiB", path: write("huge", strings.Repeat("p", 1<<20)), err: "is larger than 4096 bytes"},
		{desc: "empty", path: write("empty", ""), err: "is empty"},
		{desc: "only a newline", path: write("newline", "\n"), err: "is empty"},
		{desc: "only a CRLF", path: write("crlf-only", "\r\n"), err: "is empty"},
		{desc: "two lines", path: write("two-lines", "user\npass\n"), err: "holds more than one line"},
		{desc: "trailing blank line", path: write("blank-line", "s3cret\n\n"), err: "holds more than one line"},
		{desc: "a PEM key", path: write("key", "-----BEGIN PRIVATE KEY-----\nMIIE\n-----END PRIVATE KEY-----\n"), err: "holds more than one line"},
		{desc: "bare CR", path: write("cr", "s3cret\r"), err: "holds more than one line"},
		{desc: "NUL", path: write("nul", "s3c\x00ret\n"), err: "holds a control character"},
		{desc: "tab", path: write("tab", "s3c\tret"), err: "holds a control character"},
		{desc: "DEL", path: write("del", "s3c\x7fret"), err: "holds a control character"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			cfg := Default()
			cfg.Average = 10
			cfg.Redis.PasswordFile = tc.path
			s, err := Compile(cfg, "api@file")
			if tc.err == "" {
				if err != nil {
					t.Fatalf("compile: %v", err)
				}
				if s.Redis.Password != tc.want {
					t.Fatalf("password %q, want %q", s.Redis.Password, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("compile: no error, a password of %d bytes", len(s.Redis.Password))
			}
			prefix := "redis.passwordFile: "
			if !strings.HasPrefix(err.Error(), prefix) || !strings.Contains(err.Error(), `"`+tc.path+`"`) ||
				!strings.Contains(err.Error(), tc.err) {
				t.Fatalf("error %q, want one starting %q, naming %q and saying %q", err, prefix, tc.path, tc.err)
			}
			if strings.Contains(err.Error(), "s3c") || strings.Contains(err.Error(), "PRIVATE") {
				t.Fatalf("error %q quotes the file", err)
			}
		})
	}
}

// TestPasswordFileOnlyFromAllowedDirectories: a password file's content is
// sent to the endpoints the same dynamic configuration names, so it must
// lie in a directory the operator allows (TOLLGATE_SECRET_DIRS), links
// resolved, and never in /proc, /sys, /dev or a service account's
// directory (a review found any one-line file, a service-account token
// included, sent in AUTH to a listener of the configuration's choosing).
func TestPasswordFileOnlyFromAllowedDirectories(t *testing.T) {
	allowed, other := t.TempDir(), t.TempDir()
	inside := filepath.Join(allowed, "password")
	outside := filepath.Join(other, "token")
	for _, p := range []string{inside, outside} {
		if err := os.WriteFile(p, []byte("s3cret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	link := filepath.Join(allowed, "link")
	if err := os.Symlink(outside, link); err != nil {
		t.Fatal(err)
	}
	sa := filepath.Join(allowed, "kubernetes.io", "serviceaccount")
	if err := os.MkdirAll(sa, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sa, "token"), []byte("eyJ.token.sig"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc, dirs, path, err string
	}{
		{"inside an allowed directory", allowed, inside, ""},
		{"outside every allowed directory", allowed, outside, "not in a directory the operator allows"},
		{"a link out of an allowed directory", allowed, link, "not in a directory the operator allows"},
		{"a service account's token", allowed, filepath.Join(sa, "token"), "holds no Redis password"},
		{"the process's environment, all allowed", "/", "/proc/self/environ", "holds no Redis password"},
		{"the default directories", "", inside, "not in a directory the operator allows"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			setSecretDirs(t, tc.dirs)
			_, err := readPasswordFile("redis.passwordFile", tc.path)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("%s: %v, want %q", tc.path, err, tc.err)
			}
		})
	}
}

// TestPasswordFileOutsideSaysNothingOfExistence: a path outside the
// allowed directories is refused before the pod's files are looked at, so
// its error is the same whether or not it exists (the check ran after the
// file was read: a missing path said "no such file", an existing one "not
// in a directory the operator allows", an oracle for the pod's files).
func TestPasswordFileOutsideSaysNothingOfExistence(t *testing.T) {
	allowed, other := t.TempDir(), t.TempDir()
	setSecretDirs(t, allowed)
	existing := filepath.Join(other, "token")
	if err := os.WriteFile(existing, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(other, "dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	var want string
	for _, path := range []string{
		existing,
		filepath.Join(other, "missing"),
		filepath.Join(other, "no-such-dir", "token"),
		filepath.Join(other, "dir"),
		filepath.Join(allowed, "..", filepath.Base(other), "token"),
	} {
		_, err := readPasswordFile("redis.passwordFile", path)
		if err == nil {
			t.Fatalf("%s: accepted", path)
		}
		got := strings.ReplaceAll(err.Error(), `"`+path+`"`, "PATH")
		if want == "" {
			want = got
			if !strings.Contains(want, "not in a directory the operator allows") {
				t.Fatalf("%s: %v, want refused as outside the allowed directories", path, err)
			}
		} else if got != want {
			t.Fatalf("%s: %q, want the same error as for an existing file: %q", path, got, want)
		}
	}
	// Inside an allowed directory a missing file is reported as missing.
	if _, err := readPasswordFile("redis.passwordFile", filepath.Join(allowed, "missing")); err == nil || !strings.Contains(err.Error(), "reading") {
		t.Fatalf("missing inside: %v, want a reading error", err)
	}
}

// TestDefaultSecretDirsAdmitNoIdentityToken: with TOLLGATE_SECRET_DIRS
// unset, only a Redis-specific directory is allowed. The default was all
// of /run/secrets and /var/run/secrets, where a pod's projected identity
// tokens live too: a dynamic configuration could name one as its password
// file and an endpoint of its own, and receive the token in AUTH.
func TestDefaultSecretDirsAdmitNoIdentityToken(t *testing.T) {
	setSecretDirs(t, "")
	for _, path := range []string{
		"/var/run/secrets/tokens/vault-token",
		"/var/run/secrets/azure/tokens/azure-identity-token",
		"/run/secrets/tokens/vault-token",
		"/var/run/secrets/redis-other/password",
		"/run/secrets/db-password",
	} {
		_, err := readPasswordFile("redis.passwordFile", path)
		if err == nil || !strings.Contains(err.Error(), "not in a directory the operator allows") {
			t.Errorf("%s with the default directories: %v, want refused as outside them", path, err)
		}
	}
	// The Redis-specific places are allowed: a missing file there is
	// reported as missing, not refused.
	for _, path := range []string{"/var/run/secrets/redis/password", "/run/secrets/redis"} {
		if _, err := os.Stat(path); err == nil {
			continue // a real secret on this machine: not read by a test
		}
		_, err := readPasswordFile("redis.passwordFile", path)
		if err == nil || !strings.Contains(err.Error(), "reading") {
			t.Errorf("%s with the default directories: %v, want allowed (missing)", path, err)
		}
	}
}

// setSecretDirs sets TOLLGATE_SECRET_DIRS for the test, through this
// package's own os.Setenv: under Yaegi the plugin reads the interpreter's
// environment (Traefik hands it the process's at load), which t.Setenv,
// compiled, does not reach.
func setSecretDirs(t *testing.T, dirs string) {
	t.Helper()
	old, had := os.LookupEnv(secretDirsEnv)
	if err := os.Setenv(secretDirsEnv, dirs); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if had {
			os.Setenv(secretDirsEnv, old)
		} else {
			os.Unsetenv(secretDirsEnv)
		}
	})
}
