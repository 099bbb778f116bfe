package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// volume is what a shared mount runs: derived from a volume's attributes
// and secret.
type volume struct {
	// Key names the shared mount: a hash of every option that changes
	// what the mount shows or reports, the node, and the credentials.
	Key string
	// Args are lakefs-mount's options, without the mount point.
	Args []string
	// Env holds the credentials (NAME=value); only the process gets it.
	Env []string
}

// mounter starts and stops the lakefs-mount processes behind shared mounts.
type mounter interface {
	// volume validates a volume's attributes and secret.
	volume(attrs, secrets map[string]string, nodeName string) (volume, error)
	// start runs lakefs-mount for v at dir and returns once it serves.
	start(ctx context.Context, v volume, dir, logPath string) (procID, error)
	// stop ends p, which serves dir, and waits for it to exit.
	stop(ctx context.Context, p procID, dir string) error
}

// secretKeys are the keys a volume's secret may hold: the AWS SDK's
// standard environment variables.
var secretKeys = []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"}

// credentialEnv checks a volume's secret and returns it as environment
// variables. Errors name keys, never values.
func credentialEnv(secrets map[string]string) ([]string, error) {
	for k := range secrets {
		if !slices.Contains(secretKeys, k) {
			return nil, invalid("volume secret has key %q; allowed keys: %s", k, strings.Join(secretKeys, ", "))
		}
	}
	_, id := secrets["AWS_ACCESS_KEY_ID"]
	_, key := secrets["AWS_SECRET_ACCESS_KEY"]
	switch {
	case id && !key:
		return nil, invalid("volume secret has AWS_ACCESS_KEY_ID but no AWS_SECRET_ACCESS_KEY; add it to the secret of nodePublishSecretRef")
	case key && !id:
		return nil, invalid("volume secret has AWS_SECRET_ACCESS_KEY but no AWS_ACCESS_KEY_ID; add it to the secret of nodePublishSecretRef")
	}
	var env []string
	for _, k := range secretKeys {
		if v, ok := secrets[k]; ok {
			env = append(env, k+"="+v)
		}
	}
	return env, nil
}

// shareKey hashes the parts that make two volumes one mount.
func shareKey(parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return hex.EncodeToString(h.Sum(nil))[:24]
}

// mountNodeID is the lakefs-mount node id of a shared mount: the
// Kubernetes node name (cut to fit the id's 128 characters) and the key.
func mountNodeID(nodeName, key string) string {
	if len(nodeName) > 100 {
		nodeName = nodeName[:100]
	}
	return nodeName + "-" + key[:12]
}

// execMounter runs lakefs-mount processes.
type execMounter struct {
	binary string
	cgroup string // cgroup v2 parent directory, or ""
}

// stopTimeout bounds a graceful stop before SIGKILL.
const stopTimeout = 30 * time.Second

// start runs lakefs-mount in its own process group (and cgroup), with its
// output appended to logPath: a pipe to the driver would break, and with
// it the mount, when the driver restarts.
func (m execMounter) start(ctx context.Context, v volume, dir, logPath string) (procID, error) {
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return procID{}, fmt.Errorf("opening the mount's log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(m.binary, append(slices.Clone(v.Args), dir)...)
	cmd.Env = childEnv(v.Env)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if m.cgroup != "" {
		cg, err := openCgroup(m.cgroup, v.Key)
		if err != nil {
			return procID{}, err
		}
		defer cg.Close()
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	if err := cmd.Start(); err != nil {
		return procID{}, fmt.Errorf("starting %s: %w", m.binary, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }() // reaps it whenever it exits
	start, _ := startTime(cmd.Process.Pid)
	p := procID{PID: cmd.Process.Pid, Start: start}
	if err := waitServing(ctx, dir, exited); err != nil {
		_ = m.stop(context.WithoutCancel(ctx), p, dir)
		line := lastLine(logPath)
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() == 2 {
			// lakefs-mount's usage error: a bad attribute, named by its flag.
			return procID{}, invalid("bad volume attribute: %s", line)
		}
		return procID{}, fmt.Errorf("%w; its log: %s", err, line)
	}
	return p, nil
}

// waitServing returns once dir is a live mount, or the process exited.
func waitServing(ctx context.Context, dir string, exited <-chan error) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if s, err := stateOf(dir); err == nil && s == mountedLive {
			return nil
		}
		select {
		case err := <-exited:
			if err == nil {
				err = errors.New("exit status 0")
			}
			return fmt.Errorf("lakefs-mount exited before serving: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for lakefs-mount to serve: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// childEnv is the driver's environment with env's variables replacing
// any of the same name (a volume's secret wins over the driver's own
// credentials).
func childEnv(env []string) []string {
	out := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, name+"=") })
	})
	return append(out, env...)
}

// openCgroup creates (if needed) and opens parent/mount-<key>.
func openCgroup(parent, key string) (*os.File, error) {
	dir := filepath.Join(parent, "mount-"+key)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating cgroup %s (is --mount-cgroup a cgroup v2 directory?): %w", dir, err)
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("opening cgroup %s: %w", dir, err)
	}
	return f, nil
}

// stop sends SIGTERM (lakefs-mount unmounts and exits), waits, then
// SIGKILLs; either way dir ends up unmounted.
func (m execMounter) stop(ctx context.Context, p procID, dir string) error {
	if p.alive() {
		if err := signalAndWait(ctx, p, unix.SIGTERM, stopTimeout); err != nil {
			if err := signalAndWait(ctx, p, unix.SIGKILL, stopTimeout); err != nil {
				return fmt.Errorf("stopping lakefs-mount (pid %d): %w", p.PID, err)
			}
		}
	}
	if err := unmountAll(dir); err != nil {
		return err
	}
	if m.cgroup != "" {
		// The cgroup of an exited process is empty and removable.
		_ = os.Remove(filepath.Join(m.cgroup, "mount-"+filepath.Base(dir)))
	}
	return nil
}

// signalAndWait signals p and waits up to d for it to exit, through a
// pidfd: p may be another driver instance's child.
func signalAndWait(ctx context.Context, p procID, sig unix.Signal, d time.Duration) error {
	fd, err := unix.PidfdOpen(p.PID, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(fd)
	if !p.alive() { // the pid was reused before the pidfd pinned it
		return nil
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signalling: %w", err)
	}
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 100)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("waiting for exit: %w", err)
		}
		if n > 0 {
			return nil
		}
	}
	return fmt.Errorf("pid %d did not exit within %s of %s", p.PID, d, sig)
}

// lastLine returns the last non-empty line of a log file (its error).
func lastLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(unreadable: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}
