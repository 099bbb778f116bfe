// Package testproc runs a test server (an S3, GCS or Azure emulator) as a
// child process on a free 127.0.0.1 port: started, killed, hung with
// SIGSTOP and restarted on the same port, as the store tests and the chaos
// runs need. The child dies with the test process (Pdeathsig).
package testproc

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/lakestream/lakestream/internal/listen"
)

// Proc is one server process.
type Proc struct {
	Name string // for messages: "versitygw", "fake-gcs-server", ...
	Addr string // 127.0.0.1:port
	bin  string
	args []string
	env  []string
	log  io.Writer

	mu  sync.Mutex
	cmd *exec.Cmd // GUARDED_BY(mu); nil while stopped
}

// Options configure Launch.
type Options struct {
	Name string
	Bin  string
	// Args are the server's arguments for a given listen address.
	Args func(addr string) []string
	Env  []string  // added to this process's environment
	Log  io.Writer // its output (default: os.Stderr)
}

// Launch starts the server on a free port and waits until it listens. The
// port is free when picked but another process may take it first, so a
// server that does not come up is tried twice more on a new port.
func Launch(o Options) (*Proc, error) {
	if o.Log == nil {
		o.Log = os.Stderr
	}
	for attempt := 0; ; attempt++ {
		addr, err := listen.FreeAddr()
		if err != nil {
			return nil, err
		}
		p := &Proc{Name: o.Name, Addr: addr, bin: o.Bin, args: o.Args(addr), env: o.Env, log: o.Log}
		if err := p.start(); err != nil {
			return nil, err
		}
		if WaitListening(addr, 20*time.Second) {
			return p, nil
		}
		p.Stop(syscall.SIGTERM)
		if attempt == 2 {
			return nil, fmt.Errorf("%s did not start listening on %s", o.Name, addr)
		}
	}
}

func (p *Proc) start() error {
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout = p.log
	cmd.Stderr = p.log
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s %s: %w", p.Name, p.bin, err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	return nil
}

// Stop stops the server with sig (SIGKILL: a crash; SIGTERM: a clean stop,
// escalated to SIGKILL after 5s) and waits for it to exit.
func (p *Proc) Stop(sig syscall.Signal) {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT) // a hung server cannot exit
	_ = cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// Restart starts a stopped server again on the same port, as an operator
// restarts a crashed server.
func (p *Proc) Restart() error {
	p.mu.Lock()
	running := p.cmd != nil
	p.mu.Unlock()
	if running {
		return fmt.Errorf("%s on %s is running", p.Name, p.Addr)
	}
	if err := p.start(); err != nil {
		return err
	}
	if !WaitListening(p.Addr, 20*time.Second) {
		return fmt.Errorf("restarted %s did not listen on %s within 20s", p.Name, p.Addr)
	}
	return nil
}

// Signal sends sig to the running server without waiting for it to exit:
// SIGSTOP hangs it (connections accepted, never answered), SIGCONT
// resumes it.
func (p *Proc) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s on %s is not running", p.Name, p.Addr)
	}
	return p.cmd.Process.Signal(sig)
}

// WaitListening polls until addr accepts connections. A server that exits
// early (say, the port was taken) is noticed by the deadline.
func WaitListening(addr string, d time.Duration) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(30 * time.Millisecond) {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			c.Close()
			return true
		}
	}
	return false
}

// Find looks for a tool: the variable env names, $LAKEFS_TOOLS/<rel>, the
// repository's .tools/<rel>, then PATH by rel's last element.
func Find(env, rel string) (string, error) {
	if p := os.Getenv(env); p != "" {
		return p, nil
	}
	var dirs []string
	if d := os.Getenv("LAKEFS_TOOLS"); d != "" {
		dirs = append(dirs, d)
	}
	if _, file, _, ok := runtime.Caller(0); ok {
		dirs = append(dirs, filepath.Join(filepath.Dir(file), "..", "..", ".tools"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, rel)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return exec.LookPath(filepath.Base(rel))
}

// Pid is the running server's process id, 0 while it is stopped
// (benchmarks read its CPU time with procstat).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}
