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
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/mount/proc"
)

// volume is what a shared mount runs: derived from a volume's attributes
// and secret.
type volume struct {
	// Key names the shared mount: a hash of the options' share key (what
	// gc and back-pressure see of the mount), the node and the credentials.
	Key string
	// Options are lakefs-mount's, without the mount point.
	Options mount.Options
	// Env holds the credentials (NAME=value); only the process gets it.
	Env []string
}

// mounter starts and stops the lakefs-mount processes behind shared mounts.
type mounter interface {
	// start runs lakefs-mount for v at dir and returns once it serves.
	start(ctx context.Context, v volume, dir, logPath string) (procID, error)
	// stop ends p, which serves dir, waits for it to exit and unmounts dir.
	stop(ctx context.Context, p procID, dir string) error
}

// secretKeys are the keys a volume's secret may hold: the clouds' standard
// environment variables (AWS's key pair; a GCS service-account key's
// JSON, which the store reads from GOOGLE_APPLICATION_CREDENTIALS_JSON so
// that it is never written to the node's disk; an Azure account key, SAS
// or service principal).
var secretKeys = []string{
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
	"GOOGLE_APPLICATION_CREDENTIALS_JSON",
	"AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN", "AZURE_CLIENT_ID", "AZURE_TENANT_ID", "AZURE_CLIENT_SECRET",
}

// secretPairs are secret keys that mean nothing without another.
var secretPairs = [][2]string{
	{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"},
	{"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"},
	{"AZURE_CLIENT_SECRET", "AZURE_CLIENT_ID"},
	{"AZURE_CLIENT_SECRET", "AZURE_TENANT_ID"},
}

// credentialEnv checks a volume's secret and returns it as environment
// variables. Errors name keys, never values.
func credentialEnv(secrets map[string]string) ([]string, error) {
	for k := range secrets {
		if !slices.Contains(secretKeys, k) {
			return nil, invalid("volume secret has key %q; allowed keys: %s", k, strings.Join(secretKeys, ", "))
		}
	}
	for _, p := range secretPairs {
		_, has := secrets[p[0]]
		_, other := secrets[p[1]]
		if has && !other {
			return nil, invalid("volume secret has %s but no %s; add it to the secret of nodePublishSecretRef", p[0], p[1])
		}
	}
	var env []string
	for _, k := range secretKeys {
		if v, ok := secrets[k]; ok {
			env = append(env, k+"="+v)
		}
	}
	return env, nil
}

// credentialFamily is the cloud whose credential variable name is, or "".
// The CA bundle is the node's trust store, not an identity.
func credentialFamily(name string) string {
	switch {
	case name == "AWS_CA_BUNDLE":
		return ""
	case strings.HasPrefix(name, "AWS_"):
		return "aws"
	case strings.HasPrefix(name, "GOOGLE_APPLICATION_CREDENTIALS"):
		return "gcp"
	case strings.HasPrefix(name, "AZURE_"):
		return "azure"
	}
	return ""
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

// execMounter runs lakefs-mount processes through mount/proc.
type execMounter struct {
	binary string
	cgroup string // cgroup v2 parent directory, or ""

	mu sync.Mutex
	// children are the processes this driver instance started, by pid;
	// adopted ones (started by an earlier instance) are stopped through
	// a pidfd instead.
	// GUARDED_BY(mu)
	children map[int]*proc.Proc
}

func newExecMounter(binary, cgroup string) *execMounter {
	return &execMounter{binary: binary, cgroup: cgroup, children: map[int]*proc.Proc{}}
}

// stopTimeout bounds a graceful stop of an adopted process before
// SIGKILL; killWait the wait after SIGKILL, and again after an abort.
const (
	stopTimeout = 30 * time.Second
	killWait    = 5 * time.Second
)

// start runs lakefs-mount in its own process group (and cgroup), with its
// output appended to logPath: a pipe to the driver would break, and with
// it the mount, when the driver restarts.
func (m *execMounter) start(ctx context.Context, v volume, dir, logPath string) (procID, error) {
	logf, err := os.OpenFile(logPath, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return procID{}, fmt.Errorf("opening the mount's log: %w", err)
	}
	defer logf.Close()
	// The store URL goes in the environment, not argv: any user can read
	// a process's argv.
	o := v.Options
	o.Store, o.Mountpoint = "", dir
	c := proc.Config{Bin: m.binary, Args: o.Args(), Env: append(childEnv(v.Env), storeEnv+"="+v.Options.Store), Output: logf}
	if m.cgroup != "" {
		cg, err := openCgroup(m.cgroup, v.Key)
		if err != nil {
			return procID{}, err
		}
		defer cg.Close()
		c.CgroupFD = int(cg.Fd())
	}
	p, err := proc.Start(ctx, c)
	if err != nil {
		// proc quotes the log's whole tail (earlier runs of this key
		// included); the kubelet's event needs the last line only.
		if inner := errors.Unwrap(err); inner != nil {
			err = inner
		}
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 2 {
			err = fmt.Errorf("%w: %w", errRefused, err)
		}
		return procID{}, fmt.Errorf("%w; its log (%s) ends: %s", err, logPath, lastLine(logPath))
	}
	start, _ := startTime(p.Pid())
	m.mu.Lock()
	m.children[p.Pid()] = p
	m.mu.Unlock()
	return procID{PID: p.Pid(), Start: start}, nil
}

// storeEnv is lakefs-mount's environment variable for --store.
const storeEnv = "LAKEFS_STORE"

// errRefused: lakefs-mount refused the volume's options (its usage
// error, exit status 2), e.g. ranks the stream does not have.
var errRefused = errors.New("lakefs-mount refused the volume's attributes")

// childEnv is the driver's environment for a lakefs-mount. With a secret
// (env), a cloud's credential variables are the secret's alone when the
// secret holds any of that cloud's: a key pair mixed with the driver's
// session token, profile or role would be another identity.
func childEnv(env []string) []string {
	fromSecret := map[string]bool{}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		fromSecret[credentialFamily(name)] = true
	}
	out := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		if name == storeEnv {
			return true
		}
		f := credentialFamily(name)
		return f != "" && fromSecret[f]
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

// stop stops p: through mount/proc if this instance started it (SIGTERM,
// SIGKILL after a bound, an abort of its connection if even that does not
// end it, lazy unmount), else the same through a pidfd; either way dir
// ends up unmounted.
func (m *execMounter) stop(ctx context.Context, p procID, dir string) error {
	m.mu.Lock()
	child := m.children[p.PID]
	delete(m.children, p.PID)
	m.mu.Unlock()
	if child != nil {
		_ = child.Stop() // its exit status: killed or not, it is gone
	} else if p.alive() {
		if err := signalAndWait(ctx, p, unix.SIGTERM, stopTimeout); err != nil {
			if err := signalAndWait(ctx, p, unix.SIGKILL, killWait); err != nil {
				// Killed, it cannot exit while a request of its own mount
				// waits in it: end the connection.
				_ = mount.Abort(dir)
				if err := signalAndWait(ctx, p, unix.SIGKILL, killWait); err != nil {
					return fmt.Errorf("stopping lakefs-mount (pid %d): %w", p.PID, err)
				}
			}
		}
	}
	if err := mount.Unmount(dir); err != nil {
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
	if sig == unix.SIGTERM {
		// A stopped (SIGSTOP) process handles SIGTERM only once continued.
		_ = unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0)
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
