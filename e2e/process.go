package e2e

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// process is a server the harness runs (Traefik, Prometheus): its output
// goes to a log file, it dies with the test process, and Stop and Log are
// the same for all.
type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process has exited
}

// startProcess runs bin with args in dir, its output in logPath, and
// waits until GET readyURL answers 200 (within): what names the server in
// errors, which quote its log. A server that exits at start because a
// port it binds is taken is errPortTaken. (Another server on that port
// may have answered readyURL first: the caller checks it is its own.)
func startProcess(what, dir, logPath, readyURL string, within time.Duration, bin string, args ...string) (*process, error) {
	p := &process{log: logPath, done: make(chan struct{})}
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Dir = dir
	p.cmd.Stdout, p.cmd.Stderr = out, out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("starting %s: %w", what, err)
	}
	go func() { _ = p.cmd.Wait(); out.Close(); close(p.done) }()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			if log := p.Log(); strings.Contains(strings.ToLower(log), "address already in use") {
				return nil, fmt.Errorf("%w: %s exited at start:\n%s", errPortTaken, what, log)
			}
			return nil, fmt.Errorf("%s exited at start:\n%s", what, p.Log())
		default:
		}
		if resp, err := http.Get(readyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Stop()
	return nil, fmt.Errorf("%s not ready at %s:\n%s", what, readyURL, p.Log())
}

// Stop ends the process (SIGTERM, then SIGKILL after 5 s).
func (p *process) Stop() {
	if p == nil || p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Log returns what the process has logged so far.
func (p *process) Log() string {
	if p == nil {
		return ""
	}
	b, _ := os.ReadFile(p.log)
	return string(b)
}
