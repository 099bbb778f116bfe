package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// mntMountProc is a lakefs-mount process.
type mntMountProc struct {
	cmd    *exec.Cmd
	ready  chan struct{}  // closed when it wrote its --ready-fd line
	stderr *mntSyncBuffer // its stdout and stderr
	done   chan struct{}  // closed when it exited, err set
	err    error
}

// mntSyncBuffer is a bytes.Buffer safe to read while a process writes it.
type mntSyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *mntSyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *mntSyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func mntStartMount(t testing.TB, bin string, args ...string) *mntMountProc {
	t.Helper()
	return mntStartMountWith(t, bin, nil, args...)
}

// mntStartMountWith is mntStartMount with setup, if not nil, applied to
// the command before it starts (e.g. to run it in namespaces).
func mntStartMountWith(t testing.TB, bin string, setup func(*exec.Cmd), args ...string) *mntMountProc {
	t.Helper()
	// Readiness comes from --ready-fd (the child's fd 3), as mount/proc
	// waits for it: the head file says nothing for an empty stream.
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, append([]string{"--ready-fd=3"}, args...)...)
	cmd.ExtraFiles = []*os.File{w}
	stderr := &mntSyncBuffer{}
	cmd.Stderr = stderr
	cmd.Stdout = stderr
	if setup != nil {
		setup(cmd)
	}
	err = cmd.Start()
	w.Close()
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	p := &mntMountProc{cmd: cmd, stderr: stderr, done: make(chan struct{}), ready: make(chan struct{})}
	go func() {
		defer r.Close()
		if line, _ := bufio.NewReader(r).ReadString('\n'); line != "" {
			close(p.ready)
		}
	}()
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			p.reap(t, args[len(args)-1], true)
		}
	})
	return p
}

// reap waits for a killed lakefs-mount to exit. A FUSE daemon killed while
// a file of its own mount is open in it (go-fuse opens one while mounting)
// cannot finish exiting: closing that file waits for an answer only it
// could give. Only aborting its FUSE connection (fusectl's abort file, what
// lakefs-mount --abort writes; docs/RELIABILITY.md) frees it.
func (p *mntMountProc) reap(t testing.TB, mnt string, detach bool) {
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	t.Logf("killed lakefs-mount did not exit; aborting the FUSE connection of %s", mnt)
	mntAbortFUSE(t, mnt, detach)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		t.Errorf("killed lakefs-mount did not exit even after aborting its connection")
	}
}

// mntAbortFUSE aborts the FUSE connection mounted at mnt without touching
// the mount and, if asked, detaches it (mount.Abort); without detach the
// dead mount stays, as a killed process leaves it.
func mntAbortFUSE(t testing.TB, mnt string, detach bool) {
	if detach {
		if err := mount.Abort(mnt); err != nil {
			t.Logf("abort %s: %v", mnt, err)
		}
		return
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Error(err)
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != mnt {
			continue
		}
		_, minor, _ := strings.Cut(f[2], ":")
		if err := os.WriteFile("/sys/fs/fuse/connections/"+minor+"/abort", []byte("1"), 0o200); err != nil {
			t.Logf("abort connection %s: %v", minor, err)
		}
	}
}

// wait waits for the process to exit and returns its exit code.
func (p *mntMountProc) wait(t testing.TB, d time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		var ee *exec.ExitError
		if errors.As(p.err, &ee) {
			return ee.ExitCode()
		}
		if p.err != nil {
			t.Fatal(p.err)
		}
		return 0
	case <-time.After(d):
		t.Fatalf("lakefs-mount did not exit within %s; output:\n%s", d, p.stderr)
	}
	return -1
}

// mntWaitMounted waits until the mount at mnt serves the view (its
// --ready-fd line).
func mntWaitMounted(t testing.TB, p *mntMountProc, mnt string) {
	t.Helper()
	select {
	case <-p.ready:
	case <-p.done:
		t.Fatalf("lakefs-mount on %s exited (%v):\n%s", mnt, p.err, p.stderr)
	case <-time.After(20 * time.Second):
		t.Fatalf("mount on %s not ready in 20s:\n%s", mnt, p.stderr)
	}
}

func mntIsMounted(t testing.TB, mnt string) bool {
	t.Helper()
	s, err := mount.StateOf(context.Background(), mnt)
	if err != nil {
		t.Fatal(err)
	}
	return s != mount.NotMounted
}

// TestMountLifecycle runs the lakefs-mount command as a real process:
// usage errors exit 2, a mount point in use is refused (exit 1), SIGTERM
// and SIGINT unmount cleanly (exit 0, also with a file held open), a
// stale mount left by kill -9 is recovered, and the heartbeat reports the
// highest step read.
func TestMountLifecycle(t *testing.T) {
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	url, dir := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 100<<10, 1)
	p.addN(t, 3)
	mnt := t.TempDir()
	common := []string{"--store", url, "--poll-interval", "20ms", "--heartbeat-interval", "50ms", "--node-id", "n1", "--cache-size", "64MiB"}

	t.Run("usage", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			code int
			msg  string
		}{
			{nil, 2, "mount point"},
			{[]string{"--store", url, "--ranks", "3-1", mnt}, 2, "--ranks"},
			{[]string{"--store", url, "--ranks", "5", mnt}, 2, "rank 5"},
			{[]string{"--store", url, "--cache-size", "lots", mnt}, 2, "--cache-size"},
			{[]string{"--store", url, "--no-such-flag", mnt}, 2, "no-such-flag"},
			{[]string{"--store", url, filepath.Join(mnt, "absent")}, 2, "does not exist"},
			{[]string{"--store", "file://" + t.TempDir(), mnt}, 1, "no stream"},
		} {
			pr := mntStartMount(t, bin, c.args...)
			if code := pr.wait(t, 20*time.Second); code != c.code || !strings.Contains(pr.stderr.String(), c.msg) {
				t.Errorf("lakefs-mount %v: exit %d, output %q; want exit %d mentioning %q", c.args, code, pr.stderr, c.code, c.msg)
			}
			if lines := strings.Count(strings.TrimSpace(pr.stderr.String()), "\n"); lines > 0 {
				t.Errorf("lakefs-mount %v: %d lines of error output, want one:\n%s", c.args, lines+1, pr.stderr)
			}
		}
	})

	t.Run("sigterm", func(t *testing.T) {
		pr := mntStartMount(t, bin, append(common, mnt)...)
		mntWaitMounted(t, pr, mnt)
		// A second mount on the same point is refused.
		pr2 := mntStartMount(t, bin, append(common, mnt)...)
		if code := pr2.wait(t, 20*time.Second); code != 1 || !strings.Contains(pr2.stderr.String(), "in use") {
			t.Errorf("second mount: exit %d, %q; want exit 1, in use", code, pr2.stderr)
		}
		// Read step 2, then check the heartbeat.
		if _, err := mntReadFile(filepath.Join(mnt, "steps", "2", "rank-1", "sample-00.bin")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "heartbeat with step 2", func() bool {
			b, err := os.ReadFile(filepath.Join(dir, txn.HeartbeatKey("n1")))
			var hb txn.Heartbeat
			return err == nil && json.Unmarshal(b, &hb) == nil && hb.Step != nil && *hb.Step == 2 && hb.Head != nil && *hb.Head == 2
		})
		pr.cmd.Process.Signal(syscall.SIGTERM)
		if code := pr.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("after SIGTERM: exit %d:\n%s", code, pr.stderr)
		}
		if mntIsMounted(t, mnt) {
			t.Fatal("still mounted after SIGTERM")
		}
	})

	t.Run("sigint busy", func(t *testing.T) {
		pr := mntStartMount(t, bin, append(common, mnt)...)
		mntWaitMounted(t, pr, mnt)
		f, err := os.Open(filepath.Join(mnt, "steps", "1", "rank-0", "sample-00.bin"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		pr.cmd.Process.Signal(syscall.SIGINT)
		if code := pr.wait(t, 30*time.Second); code != 0 {
			t.Fatalf("after SIGINT with a file open: exit %d:\n%s", code, pr.stderr)
		}
		if mntIsMounted(t, mnt) {
			t.Fatal("still mounted after SIGINT")
		}
	})

	t.Run("stale", func(t *testing.T) {
		pr := mntStartMount(t, bin, append(common, mnt)...)
		mntWaitMounted(t, pr, mnt)
		pr.cmd.Process.Kill()
		pr.reap(t, mnt, false) // a stale mount is what this subtest is about
		if _, err := os.Stat(filepath.Join(mnt, "head")); !mntIsErrno(err, syscall.ENOTCONN) {
			t.Fatalf("after kill -9: %v, want ENOTCONN (a stale mount)", err)
		}
		pr = mntStartMount(t, bin, append(common, mnt)...)
		mntWaitMounted(t, pr, mnt)
		if !strings.Contains(pr.stderr.String(), "stale") {
			t.Errorf("recovery not logged:\n%s", pr.stderr)
		}
		b, err := mntReadFile(filepath.Join(mnt, "steps", "0", "meta.json"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mntCheckContent(b, -1, "meta.json"); err != nil {
			t.Fatal(err)
		}
		pr.cmd.Process.Signal(syscall.SIGTERM)
		if code := pr.wait(t, 20*time.Second); code != 0 {
			t.Fatalf("after SIGTERM: exit %d:\n%s", code, pr.stderr)
		}
	})
}
