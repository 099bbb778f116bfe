// Package proc starts a lakefs-mount child process, waits until its view is
// served and stops it: the one helper for the supervisors (the CSI driver,
// the benchmarks). The integration tests spawn lakefs-mount themselves to
// see the exit status of children that fail on purpose.
//
// Readiness is lakefs-mount's --ready-fd: the child writes a line to a
// pipe once the FUSE mount is up and the first state is loaded, so an
// empty stream is ready too (polling the head file is not: it has no
// head). The pipe closing without a line means the child failed; its
// stderr's tail is in the error.
//
// A Proc is used by one goroutine at a time, except Done, Pid and Stderr,
// which any goroutine may call.
package proc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lakestream/lakestream/mount"
)

// Defaults.
const (
	DefaultReadyTimeout = 2 * time.Minute
	DefaultStopTimeout  = 15 * time.Second
	tailBytes           = 4 << 10
)

// ErrNotReady: the child exited, or did not become ready in time.
var ErrNotReady = errors.New("lakefs-mount did not become ready")

// Config is what to start.
type Config struct {
	// Bin is the lakefs-mount binary; "" finds it next to this executable,
	// then on PATH (FindBin).
	Bin string
	// Args are lakefs-mount's arguments, mount point last; if nil, Options'
	// (Options.Args()).
	Args    []string
	Options mount.Options
	// Env is the child's environment; nil inherits this process's.
	Env []string
	// Stderr, if set, also gets the child's stderr (the Proc keeps a tail
	// for errors either way).
	Stderr io.Writer
	// Output, if set, replaces Stderr: the child writes its stdout and
	// stderr straight to this file (opened for reading too) and runs in
	// its own process group, so it outlives this process (a pipe to a
	// dead supervisor would kill it with SIGPIPE at its next log line).
	// Errors quote the file's tail.
	Output *os.File
	// CgroupFD, if > 0, is an open cgroup v2 directory the child starts in.
	CgroupFD int
	// ReadyTimeout bounds the wait for readiness (default
	// DefaultReadyTimeout); StopTimeout how long Stop waits after SIGTERM
	// before SIGKILL (default DefaultStopTimeout).
	ReadyTimeout time.Duration
	StopTimeout  time.Duration
}

// Proc is a running lakefs-mount.
type Proc struct {
	cmd         *exec.Cmd
	mountpoint  string
	stopTimeout time.Duration
	tail        *tail
	output      *os.File      // Config.Output, or nil
	done        chan struct{} // closed once the child is reaped
	waitErr     error         // the child's exit; read after done
	stopOnce    sync.Once
	stopErr     error
}

// FindBin returns lakefs-mount next to this executable or on PATH, or "".
func FindBin() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "lakefs-mount")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p
		}
	}
	if p, err := exec.LookPath("lakefs-mount"); err == nil {
		return p
	}
	return ""
}

// Start starts lakefs-mount and returns once its view is served. If it
// exits first, does not become ready within ReadyTimeout or ctx ends, the
// child is stopped and the error (wrapping ErrNotReady, or ctx's error)
// carries the tail of its stderr.
func Start(ctx context.Context, c Config) (*Proc, error) {
	p, ready, err := spawn(c)
	if err != nil {
		return nil, err
	}
	timeout := c.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case ok := <-ready:
		if ok {
			return p, nil
		}
		// No line: the pipe closed, normally because the child exited.
		select {
		case <-p.done:
			err = fmt.Errorf("%w: it exited (%w)", ErrNotReady, p.waitErr)
		case <-timer.C:
			err = fmt.Errorf("%w: it closed --ready-fd without a line and is still running", ErrNotReady)
		}
	case <-timer.C:
		err = fmt.Errorf("%w within %s", ErrNotReady, timeout)
	case <-ctx.Done():
		err = fmt.Errorf("waiting for lakefs-mount to be ready: %w", ctx.Err())
	}
	_ = p.Stop()
	return nil, fmt.Errorf("%w; stderr: %s", err, p.Stderr())
}

// spawn starts the child with the write end of a pipe as --ready-fd; ready
// gets true once a line came, false if the pipe closed without one.
func spawn(c Config) (*Proc, <-chan bool, error) {
	bin := c.Bin
	if bin == "" {
		if bin = FindBin(); bin == "" {
			return nil, nil, errors.New("lakefs-mount not found next to this executable or on PATH; build it (make build) or give its path")
		}
	}
	args := c.Args
	if args == nil {
		args = c.Options.Args()
	}
	if len(args) == 0 {
		return nil, nil, errors.New("starting lakefs-mount: no arguments; the mount point is the last one")
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	defer w.Close() // the child has its own copy; EOF comes when it exits
	// ExtraFiles[0] is the child's fd 3.
	cmd := exec.Command(bin, append([]string{"--ready-fd=3"}, args...)...)
	cmd.Env = c.Env
	cmd.ExtraFiles = []*os.File{w}
	p := &Proc{cmd: cmd, mountpoint: args[len(args)-1], stopTimeout: c.StopTimeout, tail: &tail{}, done: make(chan struct{})}
	if p.stopTimeout <= 0 {
		p.stopTimeout = DefaultStopTimeout
	}
	cmd.Stderr = p.tail
	if c.Stderr != nil {
		cmd.Stderr = io.MultiWriter(p.tail, c.Stderr)
	}
	if c.Output != nil {
		cmd.Stdout, cmd.Stderr, p.output = c.Output, c.Output, c.Output
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	}
	if c.CgroupFD > 0 {
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, c.CgroupFD
	}
	if err := cmd.Start(); err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() {
		p.waitErr = cmd.Wait()
		close(p.done)
	}()
	ready := make(chan bool, 1)
	go func() {
		defer r.Close()
		_, err := bufio.NewReader(r).ReadString('\n')
		ready <- err == nil
	}()
	return p, ready, nil
}

// Mountpoint is where the child serves the view (its last argument).
func (p *Proc) Mountpoint() string { return p.mountpoint }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Stderr is the last few KiB of the child's stderr.
func (p *Proc) Stderr() string {
	if p.output != nil {
		return fileTail(p.output)
	}
	return p.tail.String()
}

// fileTail returns the last tailBytes of f.
func fileTail(f *os.File) string {
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(0, st.Size()-tailBytes)
	b := make([]byte, st.Size()-off)
	n, _ := f.ReadAt(b, off)
	return string(b[:n])
}

// Stop stops the child: SIGTERM (a clean unmount), SIGKILL after
// StopTimeout (also for a stopped or hung child), then, if even that does
// not end it, an abort of its FUSE connection (mount.Abort), and last a
// lazy unmount of whatever mount it left. It returns the child's exit
// error when it was killed or exited uncleanly; calling it again returns
// the same.
func (p *Proc) Stop() error {
	p.stopOnce.Do(func() { p.stopErr = p.stop() })
	return p.stopErr
}

// killWait bounds the wait for a SIGKILLed child, and again after its
// connection was aborted.
const killWait = 5 * time.Second

func (p *Proc) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	killed := !p.waitFor(p.stopTimeout)
	if killed {
		_ = p.cmd.Process.Kill()
		if !p.waitFor(killWait) {
			// A FUSE server killed while a request of its own mount is in
			// flight in it cannot finish exiting until the connection ends.
			_ = mount.Abort(p.mountpoint)
			if !p.waitFor(killWait) {
				return fmt.Errorf("lakefs-mount (pid %d) did not exit after SIGKILL and an abort of its FUSE connection", p.Pid())
			}
		}
	}
	if err := mount.Unmount(p.mountpoint); err != nil {
		return err
	}
	if killed {
		return fmt.Errorf("lakefs-mount did not stop within %s of SIGTERM; killed it: %w", p.stopTimeout, p.waitErr)
	}
	return p.waitErr
}

// waitFor waits up to d for the child to exit.
func (p *Proc) waitFor(d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-p.done:
		return true
	case <-timer.C:
		return false
	}
}

// tail keeps the last tailBytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte // GUARDED_BY(mu)
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > tailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailBytes:]...)
	}
	return len(b), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
