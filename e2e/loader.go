// Package e2e holds what needs Traefik's own machinery: a plugin loader that
// mirrors Traefik's Yaegi loader, Traefik's config decoding (paerser and
// mapstructure), and the scenario suite run against a real redis-server,
// compiled and interpreted.
package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"

	"github.com/mitchellh/mapstructure"
	"github.com/tollgate-dev/tollgate"
	"github.com/traefik/yaegi/interp"
	"github.com/traefik/yaegi/stdlib"
)

// ModuleName is the plugin's import path.
const ModuleName = "github.com/tollgate-dev/tollgate"

// Factory builds one middleware the way Traefik does: CreateConfig, decode
// the options map over it, New. Each Factory is one "pod" of the plugin:
// the Yaegi factory has its own interpreter, hence its own registry.
type Factory interface {
	New(ctx context.Context, next http.Handler, options map[string]interface{}, name string) (http.Handler, error)
}

// decode is Traefik's plugin config decoding (pkg/plugins/middlewareyaegi.go).
func decode(options map[string]interface{}, result interface{}) error {
	if len(options) == 0 {
		return nil
	}
	decoder, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		DecodeHook:       mapstructure.StringToSliceHookFunc(","),
		WeaklyTypedInput: true,
		Result:           result,
	})
	if err != nil {
		return fmt.Errorf("failed to create configuration decoder: %w", err)
	}
	if err := decoder.Decode(options); err != nil {
		return fmt.Errorf("failed to decode configuration: %w", err)
	}
	return nil
}

// Compiled builds the plugin compiled into the test binary.
type Compiled struct{}

// New implements Factory.
func (Compiled) New(ctx context.Context, next http.Handler, options map[string]interface{}, name string) (http.Handler, error) {
	cfg := tollgate.CreateConfig()
	if err := decode(options, cfg); err != nil {
		return nil, err
	}
	return tollgate.New(ctx, next, cfg, name)
}

// Yaegi is the plugin interpreted by Yaegi v0.16.1, loaded as Traefik's
// newInterpreter and yaegiMiddlewareBuilder do.
type Yaegi struct {
	fnNew, fnCreateConfig reflect.Value
}

// RepoRoot returns the plugin module's directory (the parent of e2e/).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// PluginRoot is the plugin source the commands install (bench, costprobe,
// demo): TOLLGATE_PLUGIN_SRC when set (another checkout, for a before and
// after), else RepoRoot. The Yaegi loader of the scenario suite always
// loads RepoRoot.
func PluginRoot() string {
	if dir := os.Getenv("TOLLGATE_PLUGIN_SRC"); dir != "" {
		return dir
	}
	return RepoRoot()
}

// GoPath lays out dir/src/<module> as a link to the plugin's source, like
// Traefik's plugins-local/src/<module>, and returns dir.
func GoPath(dir string) (string, error) {
	link := filepath.Join(dir, "src", filepath.FromSlash(ModuleName))
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		return "", err
	}
	if _, err := os.Lstat(link); err == nil {
		return dir, nil
	}
	return dir, os.Symlink(RepoRoot(), link)
}

// NewYaegi loads the plugin from goPath in a fresh interpreter. stderr
// receives what the plugin writes to os.Stderr (Traefik logs it at ERROR).
func NewYaegi(goPath string, stderr io.Writer) (*Yaegi, error) {
	i := interp.New(interp.Options{GoPath: goPath, Env: os.Environ(), Stdout: io.Discard, Stderr: stderr})
	if err := i.Use(stdlib.Symbols); err != nil {
		return nil, fmt.Errorf("failed to load symbols: %w", err)
	}
	if _, err := i.Eval(fmt.Sprintf(`import %q`, ModuleName)); err != nil {
		return nil, fmt.Errorf("failed to import plugin code %q: %w", ModuleName, err)
	}
	fnNew, err := i.Eval("tollgate.New")
	if err != nil {
		return nil, fmt.Errorf("failed to eval New: %w", err)
	}
	fnCreateConfig, err := i.Eval("tollgate.CreateConfig")
	if err != nil {
		return nil, fmt.Errorf("failed to eval CreateConfig: %w", err)
	}
	return &Yaegi{fnNew: fnNew, fnCreateConfig: fnCreateConfig}, nil
}

// New implements Factory.
func (y *Yaegi) New(ctx context.Context, next http.Handler, options map[string]interface{}, name string) (http.Handler, error) {
	results := y.fnCreateConfig.Call(nil)
	if len(results) != 1 {
		return nil, fmt.Errorf("invalid number of return for the CreateConfig function: %d", len(results))
	}
	vConfig := results[0]
	if err := decode(options, vConfig.Interface()); err != nil {
		return nil, err
	}
	args := []reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(next), vConfig, reflect.ValueOf(name)}
	results = y.fnNew.Call(args)
	if len(results) > 1 && results[1].Interface() != nil {
		err, ok := results[1].Interface().(error)
		if !ok {
			return nil, fmt.Errorf("invalid error type: %T", results[0].Interface())
		}
		return nil, err
	}
	handler, ok := results[0].Interface().(http.Handler)
	if !ok {
		return nil, fmt.Errorf("invalid handler type: %T", results[0].Interface())
	}
	return handler, nil
}

// Lab is what the commands (demo, bench) run in: a temporary folder, a
// redis-server in it, and a GOPATH layout of the plugin for Yaegi.
type Lab struct {
	Dir    string
	Redis  *Redis
	GoPath string
}

// NewLab makes a Lab; Close removes it.
func NewLab(prefix string) (*Lab, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return nil, err
	}
	l := &Lab{Dir: dir}
	if l.Redis, err = StartRedis(dir); err != nil {
		l.Close()
		return nil, err
	}
	if l.GoPath, err = GoPath(dir); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// Close stops Redis and removes the folder.
func (l *Lab) Close() {
	if l.Redis != nil {
		l.Redis.Kill()
	}
	os.RemoveAll(l.Dir)
}
