package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/lakestream/lakestream/internal/flagval"
)

// memFS is a one-file go-fuse filesystem: the foreign (or, named lakefs,
// the look-alike) mount the abort tests aim at.
type memFS struct{ gofs.Inode }

func (m *memFS) OnAdd(ctx context.Context) {
	f := m.NewPersistentInode(ctx, &gofs.MemRegularFile{Data: []byte("data\n"), Attr: fuse.Attr{Mode: 0o444}}, gofs.StableAttr{})
	m.AddChild("file", f, false)
}

// mountMemFS mounts a memFS under the FUSE name name at dir until the test
// ends.
func mountMemFS(t *testing.T, dir, name string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE DirectMount)")
	}
	srv, err := gofs.Mount(dir, &memFS{}, &gofs.Options{MountOptions: fuse.MountOptions{
		Name: name, FsName: name + "-src", DirectMount: true, DirectMountStrict: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if srv.Unmount() != nil {
			_ = syscall.Unmount(dir, syscall.MNT_DETACH)
		}
	})
}

// TestAbortRefusesForeignFUSE: --abort on a FUSE filesystem that is not a
// lakefs mount is a usage error naming what is mounted there, and the
// filesystem goes on serving (issue 22.5). Before, any FUSE mount was
// aborted.
func TestAbortRefusesForeignFUSE(t *testing.T) {
	dir := t.TempDir()
	mountMemFS(t, dir, "memfs")
	err := Abort(dir)
	if !errors.Is(err, flagval.ErrUsage) || !strings.Contains(err.Error(), "fuse.memfs") || !strings.Contains(err.Error(), "not a lakefs mount") {
		t.Fatalf("Abort of a foreign FUSE mount = %v; want a usage error naming fuse.memfs", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "file")); err != nil || string(b) != "data\n" {
		t.Fatalf("the foreign filesystem after the refused abort: %q, %v", b, err)
	}
}

// TestAbortThroughSymlink: --abort given the mount point through a
// symlinked directory finds the mount the kernel recorded under the real
// path (issue 22.7), and aborts it when it is a lakefs mount.
func TestAbortThroughSymlink(t *testing.T) {
	base := t.TempDir()
	realDir := filepath.Join(base, "realDir")
	if err := os.MkdirAll(filepath.Join(realDir, "mnt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(realDir, filepath.Join(base, "link")); err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(realDir, "mnt")
	mountMemFS(t, mnt, "lakefs")
	if _, ok, _ := findMount(mnt); !ok {
		t.Fatal("test mount not in mountinfo")
	}
	if err := Abort(filepath.Join(base, "link", "mnt")); err != nil {
		t.Fatalf("Abort through the symlink: %v", err)
	}
	if _, ok, _ := findMount(mnt); ok {
		t.Fatal("the mount is still there after Abort")
	}
}

// hangFS is a go-fuse root whose Getattr blocks until release is closed:
// a hung FUSE server.
type hangFS struct {
	gofs.Inode
	release chan struct{}
}

func (h *hangFS) Getattr(ctx context.Context, _ gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	out.Mode = syscall.S_IFDIR | 0o755
	return 0
}

// TestStateOf: the one check of a mount point tells nothing, live, dead
// (the connection aborted: ENOTCONN) and hung (a stat that does not
// return within StatTimeout) apart, and Unmount frees each (issue 32
// item 10).
func TestStateOf(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (FUSE DirectMount)")
	}
	ctx := t.Context()
	dir := t.TempDir()
	if s, err := StateOf(ctx, dir); s != NotMounted || err != nil {
		t.Errorf("a plain directory: %s, %v; want not mounted", s, err)
	}
	if s, err := StateOf(ctx, filepath.Join(dir, "absent")); s != NotMounted || err != nil {
		t.Errorf("a missing path: %s, %v; want not mounted", s, err)
	}
	live := t.TempDir()
	mountMemFS(t, live, "lakefs")
	if s, err := StateOf(ctx, live); s != Live || err != nil {
		t.Errorf("a served mount: %s, %v; want live", s, err)
	}
	m, _, _ := findMount(live)
	dev, _ := devNumber(m.dev)
	if err := abortConnection(dev); err != nil {
		t.Fatal(err)
	}
	if s, err := StateOf(ctx, live); s != Dead || err != nil {
		t.Errorf("an aborted mount: %s, %v; want dead", s, err)
	}
	if err := Unmount(live); err != nil {
		t.Fatal(err)
	}
	if s, _ := StateOf(ctx, live); s != NotMounted {
		t.Errorf("after Unmount: %s, want not mounted", s)
	}

	hung := t.TempDir()
	h := &hangFS{release: make(chan struct{})}
	srv, err := gofs.Mount(hung, h, &gofs.Options{MountOptions: fuse.MountOptions{Name: "lakefs", DirectMount: true, DirectMountStrict: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Unmount(hung); srv.Wait() })
	t.Cleanup(func() { close(h.release) })
	start := time.Now()
	if s, err := StateOf(ctx, hung); s != Hung || err != nil {
		t.Errorf("a mount whose server does not answer: %s, %v; want hung", s, err)
	}
	if took := time.Since(start); took > StatTimeout+2*time.Second {
		t.Errorf("StateOf of a hung mount took %s, want about %s", took, StatTimeout)
	}
}
