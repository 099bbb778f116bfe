package mount

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

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
