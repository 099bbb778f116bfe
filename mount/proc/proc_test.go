package proc

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// mountBin is lakefs-mount, built once for the package's tests.
func buildMount(t *testing.T) string {
	t.Helper()
	return mountBin
}

var mountBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "proc-test-")
	if err != nil {
		panic(err)
	}
	mountBin = filepath.Join(dir, "lakefs-mount")
	if out, err := exec.Command("go", "build", "-o", mountBin, "github.com/lakestream/lakestream/cmd/lakefs-mount").CombinedOutput(); err != nil {
		panic(fmt.Sprintf("building lakefs-mount: %v\n%s", err, out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// newStream creates a 2-rank stream on file:// with steps committed steps.
func newStream(t *testing.T, steps int) string {
	t.Helper()
	ctx := t.Context()
	url := "file://" + t.TempDir()
	s, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "p", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range steps {
		b := txn.Batch{Name: "b" + string(rune('a'+i)), Ranks: [][]txn.FileSource{
			{txn.BytesFile("x.bin", []byte("rank 0"))}, {txn.BytesFile("x.bin", []byte("rank 1"))}}}
		pd, err := p.Append(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pd.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return url
}

func startMount(t *testing.T, bin, url string) *Proc {
	t.Helper()
	o := mount.Options{Store: url, Mountpoint: t.TempDir(), NodeID: "proc-test"}
	p, err := Start(t.Context(), Config{Bin: bin, Options: o})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	return p
}

// TestReadyEmptyStream: a stream with no step has no head file, yet its
// mount is ready once served: the view's steps/ directory is there.
func TestReadyEmptyStream(t *testing.T) {
	bin := buildMount(t)
	p := startMount(t, bin, newStream(t, 0))
	if _, err := os.Stat(filepath.Join(p.Mountpoint(), "steps")); err != nil {
		t.Fatalf("ready, but the view is not served: %v", err)
	}
	if ents, err := os.ReadDir(filepath.Join(p.Mountpoint(), "steps")); err != nil || len(ents) != 0 {
		t.Errorf("steps/ of an empty stream: %d entries, %v; want none", len(ents), err)
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop: %v; want a clean exit\n%s", err, p.Stderr())
	}
	if s, _ := mount.StateOf(t.Context(), p.Mountpoint()); s != mount.NotMounted {
		t.Error("still mounted after Stop")
	}
}

// TestReadyNonEmptyStream: once ready, the head and the committed files
// are readable at once, with no polling.
func TestReadyNonEmptyStream(t *testing.T) {
	bin := buildMount(t)
	p := startMount(t, bin, newStream(t, 3))
	head, err := os.ReadFile(filepath.Join(p.Mountpoint(), "head"))
	if err != nil || strings.TrimSpace(string(head)) != "2" {
		t.Fatalf("head = %q, %v; want 2", head, err)
	}
	b, err := os.ReadFile(filepath.Join(p.Mountpoint(), "steps", "2", "rank-1", "x.bin"))
	if err != nil || string(b) != "rank 1" {
		t.Errorf("steps/2/rank-1/x.bin = %q, %v", b, err)
	}
}

// TestChildFailsEarly: a child that exits before it is ready gives its
// own error, not a timeout.
func TestChildFailsEarly(t *testing.T) {
	bin := buildMount(t)
	o := mount.Options{Store: "file://" + t.TempDir() + "/no-stream", Mountpoint: t.TempDir()}
	_, err := Start(t.Context(), Config{Bin: bin, Options: o})
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "opening the stream") {
		t.Fatalf("Start on a missing stream: %v; want ErrNotReady with the child's error", err)
	}
	_, err = Start(t.Context(), Config{Bin: bin, Args: []string{"--cache-size", "0", t.TempDir()}})
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "--cache-size 0 is out of range") {
		t.Fatalf("Start with a bad flag: %v; want the child's usage error", err)
	}
}

// TestStopStoppedChild: Stop of a SIGSTOPped child (it cannot handle
// SIGTERM) still returns, having killed it and detached its mount.
func TestStopStoppedChild(t *testing.T) {
	bin := buildMount(t)
	o := mount.Options{Store: newStream(t, 1), Mountpoint: t.TempDir(), NodeID: "proc-test"}
	p, err := Start(t.Context(), Config{Bin: bin, Options: o, StopTimeout: 500e6})
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(p.Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop of a stopped child: %v; want an error saying it was killed", err)
	}
	<-p.Done()
	if s, _ := mount.StateOf(t.Context(), p.Mountpoint()); s != mount.NotMounted {
		t.Error("still mounted after Stop")
	}
}

// TestOutputDetached: with Config.Output the child writes straight to the
// file (no pipe to this process that would SIGPIPE it once its supervisor
// is gone) from a process group of its own (a signal to the supervisor's
// group does not reach it), and a failure quotes the file's tail.
func TestOutputDetached(t *testing.T) {
	bin := buildMount(t)
	out, err := os.OpenFile(filepath.Join(t.TempDir(), "mount.log"), os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	o := mount.Options{Store: newStream(t, 1), Mountpoint: t.TempDir(), NodeID: "proc-test"}
	p, err := Start(t.Context(), Config{Bin: bin, Options: o, Output: out})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop() })
	for _, fd := range []string{"1", "2"} {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", p.Pid(), fd))
		if err != nil || link != out.Name() {
			t.Errorf("the child's fd %s is %q (%v), want the output file %s", fd, link, err, out.Name())
		}
	}
	if pgid, err := syscall.Getpgid(p.Pid()); err != nil || pgid != p.Pid() {
		t.Errorf("the child's process group is %d (%v), want its own (%d)", pgid, err, p.Pid())
	}

	bad := mount.Options{Store: "file:///nonexistent/stream", Mountpoint: t.TempDir(), NodeID: "proc-test"}
	_, err = Start(t.Context(), Config{Bin: bin, Options: bad, Output: out})
	if !errors.Is(err, ErrNotReady) || !strings.Contains(err.Error(), "nonexistent") {
		t.Errorf("a failed start with Output: %v; want ErrNotReady quoting the file's tail (the store)", err)
	}
}
