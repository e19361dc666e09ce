package config

// Files the dynamic configuration names: redis.passwordFile,
// redis.sentinelPasswordFile and redis.tls's PEM files. Whoever writes the
// dynamic configuration (a Kubernetes CRD, a Docker label) may not be
// whoever runs Traefik, so a path must never become a way to read the
// pod's files or to stall it: each must be a regular file (a symlink to
// one is followed: Kubernetes mounts secrets so), read up to a bound, and
// an error names the field and the path, never the file's content. A
// password file's content is sent to the endpoints the same configuration
// names, so it must also lie in a directory the operator running Traefik
// allows (TOLLGATE_SECRET_DIRS, in Traefik's environment; by default only
// a Redis-specific one), never in /proc, /sys, /dev or a service
// account's: else a configuration could send the pod's own token (a
// service account's, a projected identity token under
// /var/run/secrets/tokens) to a listener of its choosing.

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

const (
	// maxPasswordFile is the size of the largest password file, in bytes.
	maxPasswordFile = 4096
	// MaxPEMFile is the size of the largest TLS file (CA bundle,
	// certificate, key), in bytes: a system CA bundle is about 200 KiB.
	MaxPEMFile = 1 << 20
)

// ReadConfigFile reads the regular file at path, of at most max bytes, for
// field. A FIFO would block New and a device such as /dev/zero would never
// end: both are refused, as is a larger file.
func ReadConfigFile(field, path string, max int64) ([]byte, error) {
	return readFileAs(field, path, path, max)
}

// readFileAs is ReadConfigFile of the file at open, named path (as the
// configuration wrote it) in errors.
func readFileAs(field, path, open string, max int64) ([]byte, error) {
	fi, err := os.Stat(open)
	if err != nil {
		return nil, fmt.Errorf("%s: reading %q: %w", field, path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %q is not a regular file (mode %s)", field, path, fi.Mode())
	}
	f, err := os.Open(open)
	if err != nil {
		return nil, fmt.Errorf("%s: reading %q: %w", field, path, err)
	}
	defer f.Close()
	// Again on what was opened, in case the path changed since os.Stat.
	if fi, err = f.Stat(); err != nil {
		return nil, fmt.Errorf("%s: reading %q: %w", field, path, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: %q is not a regular file (mode %s)", field, path, fi.Mode())
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: reading %q: %w", field, path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %q is larger than %d bytes", field, path, max)
	}
	return b, nil
}

// readPasswordFile reads the password in a password file (field): a file
// as ReadConfigFile reads it, of at most maxPasswordFile bytes, holding one
// line of printable characters; a trailing "\n" or "\r\n" is trimmed. A
// multi-line file (a key, /etc/passwd, /proc/self/environ) is no password,
// and an empty one would silently turn AUTH off: both are errors. The
// directories are checked before anything is read (allowedSecret), and the
// file read is the one checked, links resolved.
func readPasswordFile(field, path string) (string, error) {
	real, err := allowedSecret(field, path)
	if err != nil {
		return "", err
	}
	b, err := readFileAs(field, path, real, maxPasswordFile)
	if err != nil {
		return "", err
	}
	pass := string(b)
	if strings.HasSuffix(pass, "\n") {
		pass = strings.TrimSuffix(strings.TrimSuffix(pass, "\n"), "\r")
	}
	if pass == "" {
		return "", fmt.Errorf("%s: %q is empty", field, path)
	}
	for i := 0; i < len(pass); i++ {
		c := pass[i]
		if c == '\n' || c == '\r' {
			return "", fmt.Errorf("%s: %q holds more than one line", field, path)
		}
		if c < ' ' || c == 0x7f {
			return "", fmt.Errorf("%s: %q holds a control character (at byte %d)", field, path, i)
		}
	}
	return pass, nil
}

// secretDirsEnv names the environment variable of the Traefik process (the
// operator's, out of the dynamic configuration's reach) listing the
// directories (or files) password files may be read from, separated by
// ":". Unset or empty: defaultSecretDirs.
const secretDirsEnv = "TOLLGATE_SECRET_DIRS"

// defaultSecretDirs are the Redis-specific places a secret may be mounted
// (a Kubernetes volume at /var/run/secrets/redis, a Docker secret named
// redis): never the whole of /run/secrets or /var/run/secrets, which also
// hold the pod's identity tokens (tokens/vault-token,
// azure/tokens/azure-identity-token, a cloud's service account).
const defaultSecretDirs = "/run/secrets/redis:/var/run/secrets/redis"

// allowedSecret returns the real path of a password file (field, path),
// links resolved, or refuses it when that path is outside every allowed
// directory (secretDirsEnv) or inside /proc, /sys, /dev or a service
// account's directory. A path that does not resolve (missing) is judged as
// written, so that a path outside the directories gets the same error
// whether or not it exists: the check says nothing of the pod's files.
func allowedSecret(field, path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("%s: reading %q: %w", field, path, err)
	}
	real, rerr := filepath.EvalSymlinks(abs)
	if rerr != nil {
		real = abs
	}
	if within(real, "/proc") || within(real, "/sys") || within(real, "/dev") || strings.Contains(real, "/serviceaccount/") {
		return "", fmt.Errorf("%s: %q is %q, which holds no Redis password (a system or service-account file)", field, path, real)
	}
	dirs := os.Getenv(secretDirsEnv)
	if strings.TrimSpace(dirs) == "" {
		dirs = defaultSecretDirs
	}
	if !inDirs(real, dirs) {
		return "", fmt.Errorf("%s: %q is not in a directory the operator allows for secrets (%s=%s, set in Traefik's environment)", field, path, secretDirsEnv, dirs)
	}
	if rerr != nil {
		return "", fmt.Errorf("%s: reading %q: %w", field, path, rerr)
	}
	return real, nil
}

// inDirs reports whether path (clean, absolute) is one of dirs
// (":"-separated) or inside one, each taken as written and links resolved.
func inDirs(path, dirs string) bool {
	for _, d := range filepath.SplitList(dirs) {
		if d = strings.TrimSpace(d); d == "" {
			continue
		}
		if within(path, filepath.Clean(d)) {
			return true
		}
		if rd, err := filepath.EvalSymlinks(d); err == nil && within(path, rd) {
			return true
		}
	}
	return false
}

// within reports whether path is dir or inside it (both clean, absolute).
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}
