package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// TestMountReadOnly: every mutation through the mount fails with EROFS,
// and nothing changes.
func TestMountReadOnly(t *testing.T) {
	mntRequireFUSE(t)
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 10<<10, 1)
	p.addN(t, 2)
	mnt, _ := mntMountInProcess(t, mount.Options{Store: url})
	waitFor(t, 5*time.Second, "step 1", func() bool { _, err := os.Stat(filepath.Join(mnt, "steps", "1")); return err == nil })

	step := filepath.Join(mnt, "steps", "0")
	file := filepath.Join(step, "rank-0", "sample-00.bin")
	before, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	listings := map[string][]string{}
	for _, d := range []string{mnt, filepath.Join(mnt, "steps"), step, filepath.Join(step, "rank-0")} {
		listings[d] = mntReaddirNames(t, d)
	}
	ops := map[string]func() error{
		"write existing":  func() error { return os.WriteFile(file, []byte("x"), 0o644) },
		"open rdwr":       func() error { f, err := os.OpenFile(file, os.O_RDWR, 0); mntCloseIf(f); return err },
		"truncate":        func() error { return os.Truncate(file, 0) },
		"create":          func() error { f, err := os.Create(filepath.Join(step, "rank-0", "new")); mntCloseIf(f); return err },
		"create in steps": func() error { f, err := os.Create(filepath.Join(mnt, "steps", "new")); mntCloseIf(f); return err },
		"create in root":  func() error { f, err := os.Create(filepath.Join(mnt, "new")); mntCloseIf(f); return err },
		"mkdir":           func() error { return os.Mkdir(filepath.Join(step, "d"), 0o755) },
		"mkdir step":      func() error { return os.Mkdir(filepath.Join(mnt, "steps", "100"), 0o755) },
		"rename file":     func() error { return os.Rename(file, filepath.Join(step, "rank-0", "moved")) },
		"rename step":     func() error { return os.Rename(step, filepath.Join(mnt, "steps", "7")) },
		"unlink":          func() error { return os.Remove(file) },
		"unlink head":     func() error { return os.Remove(filepath.Join(mnt, "head")) },
		"rmdir":           func() error { return syscall.Rmdir(filepath.Join(step, "rank-0", "sub", "dir")) },
		"rmdir step":      func() error { return syscall.Rmdir(step) },
		"chmod":           func() error { return os.Chmod(file, 0o777) },
		"chmod dir":       func() error { return os.Chmod(step, 0o777) },
		"chown":           func() error { return os.Chown(file, 1, 1) },
		"utimes":          func() error { return os.Chtimes(file, time.Now(), time.Now()) },
		"setxattr":        func() error { return syscall.Setxattr(file, "user.x", []byte("1"), 0) },
		"removexattr":     func() error { return syscall.Removexattr(file, "user.x") },
		"symlink":         func() error { return os.Symlink("x", filepath.Join(step, "link")) },
		"link":            func() error { return os.Link(file, filepath.Join(step, "hard")) },
		"mknod":           func() error { return syscall.Mknod(filepath.Join(step, "fifo"), syscall.S_IFIFO|0o644, 0) },
		"write head":      func() error { return os.WriteFile(filepath.Join(mnt, "head"), []byte("7\n"), 0o644) },
	}
	for name, op := range ops {
		if err := op(); !mntIsErrno(err, syscall.EROFS) {
			t.Errorf("%s: %v, want EROFS", name, err)
		}
	}
	after, err := os.ReadFile(file)
	if err != nil || !bytes.Equal(before, after) {
		t.Fatalf("file changed after the refused mutations: %v", err)
	}
	for _, d := range []string{mnt, filepath.Join(mnt, "steps"), step, filepath.Join(step, "rank-0")} {
		if got := mntReaddirNames(t, d); !slices.Equal(got, listings[d]) {
			t.Errorf("%s lists %v after the refused mutations, %v before", d, got, listings[d])
		}
	}
}

func mntCloseIf(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// specsOf returns the spec of the batch committed as step.
func (p *mntProducer) specsOf(step int64) map[int]map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.specs[p.steps[step]].files
}

// TestMountCorruptPack: a pack object corrupted in the store after commit
// gives the reader EIO, never wrong bytes; the rest of the step still
// reads; the failure is counted in the metrics.
func TestMountCorruptPack(t *testing.T) {
	mntRequireFUSE(t)
	url, dir := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 300<<10, 1)
	p.addN(t, 1)
	st, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tgb, _ := st.Step(0)
	pack, err := l.Pack(context.Background(), tgb, 1)
	if err != nil {
		t.Fatal(err)
	}
	var big txn.File
	for _, f := range pack.Files {
		if f.Name == "sample-00.bin" {
			big = f
		}
	}
	// Flip one byte in the middle of the big file, inside the pack object.
	obj := filepath.Join(dir, pack.Key)
	b, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	b[pack.Off+big.Off+big.Size/2] ^= 0x01
	if err := os.WriteFile(obj, b, 0o644); err != nil {
		t.Fatal(err)
	}

	mnt, info := mntMountInProcess(t, mount.Options{Store: url, MetricsAddr: "127.0.0.1:0"})
	path := filepath.Join(mnt, "steps", "0", "rank-1", "sample-00.bin")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if !mntIsErrno(err, syscall.EIO) {
		t.Fatalf("reading a corrupted file: %v, want EIO", err)
	}
	// What was returned before the error is a correct prefix, and it stops
	// before the corrupted chunk.
	want := mntContent(p.steps[0], 1, "sample-00.bin", int(big.Size))
	if !bytes.Equal(got, want[:len(got)]) {
		t.Fatal("bytes returned before the EIO differ from what was produced")
	}
	if int64(len(got)) > big.Size/2 {
		t.Fatalf("%d bytes returned, but byte %d is corrupted", len(got), big.Size/2)
	}
	// A read straight at the corrupted byte fails too.
	if _, err := f.ReadAt(make([]byte, 10), big.Size/2); !mntIsErrno(err, syscall.EIO) {
		t.Fatalf("pread at the corrupted byte: %v, want EIO", err)
	}
	// Other files of the step read fine.
	for name := range p.specsOf(0)[0] {
		b, err := mntReadFile(filepath.Join(mnt, "steps", "0", "rank-0", name))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mntCheckContent(b, 0, name); err != nil {
			t.Fatal(err)
		}
	}
	if v := info.Stats().VerifyFailures; v < 2 {
		t.Errorf("verification failures %d, want >= 2 (fetch and refetch)", v)
	}
	resp, err := http.Get("http://" + info.MetricsAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), "lakefs_mount_verify_failures_total") ||
		strings.Contains(string(body), "lakefs_mount_verify_failures_total 0\n") {
		t.Errorf("metrics do not show the verification failure:\n%s", body)
	}
}
