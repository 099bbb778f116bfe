package integration

// Issue 55 item 1 with real processes: a failed memory-file refill closed
// file descriptor 0 of lakefs-mount (an int's zero value taken for "no
// descriptor"), whatever held that number by then: the next one the mount
// opened (a memory file, a store connection, /dev/fuse), or a descriptor
// it inherited.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/txn"
)

// refillCorrupt flips one bit in the middle of file name of rank rank of
// step in a file:// store at dir, after its commit.
func refillCorrupt(t *testing.T, l *txn.Log, dir string, step int64, rank int, name string) {
	t.Helper()
	st, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tgb, ok := st.Step(step)
	if !ok {
		t.Fatalf("step %d not committed", step)
	}
	pack, err := l.Pack(t.Context(), tgb, rank)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range pack.Files {
		if f.Name != name {
			continue
		}
		obj := filepath.Join(dir, filepath.FromSlash(pack.Key))
		b, err := os.ReadFile(obj)
		if err != nil {
			t.Fatal(err)
		}
		b[pack.Off+f.Off+f.Size/2] ^= 0x10
		if err := os.WriteFile(obj, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("step %d rank %d has no file %s", step, rank, name)
}

// fdTarget is what /proc/<pid>/fd/<fd> links to ("pipe:[123]", a path).
func fdTarget(pid, fd int) (string, error) {
	return os.Readlink("/proc/" + strconv.Itoa(pid) + "/fd/" + strconv.Itoa(fd))
}

// TestMountRefillKeepsOthersFds: a lakefs-mount child started with a pipe
// of the test's on its fd 0 (stdin) and another on fd 4 (inherited) reads,
// with prefetch and passthrough, a stream where some files fail their
// CRC32C (one bit flipped in the store after commit), twice over. Every
// open of a corrupt file is EIO, every other file reads exactly, and at
// the end both descriptors the mount did not open are still open and
// still the test's pipes. Each GET takes 20 ms (--store-latency), so a
// prefetched file's refill is under way when the GET that found the
// mismatch has ended: before the fix that refill was cancelled, and
// closed fd 0.
func TestMountRefillKeepsOthersFds(t *testing.T) {
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	url, dir := mntFileURL(t)
	files := []ptFile{{"a.bin", 3<<19 + 3}, {"b.bin", 1<<20 + 4321}, {ptSmall, ptSmallSize}}
	const steps = 8
	l := ptProduce(t, url, txn.CreateOptions{Ranks: 1}, steps, files)
	corrupt := map[int64]map[string]bool{
		1: {"a.bin": true}, 2: {"a.bin": true}, 4: {"b.bin": true},
		5: {"a.bin": true, "b.bin": true}, 7: {"a.bin": true},
	}
	for step, names := range corrupt {
		for name := range names {
			refillCorrupt(t, l, dir, step, 0, name)
		}
	}

	stdin, stdinW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	extra, extraW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, f := range []*os.File{stdin, stdinW, extra, extraW} {
			f.Close()
		}
	}()
	pipeID := func(f *os.File) string {
		id, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// The child's fd 3 is --ready-fd (mntStartMountWith), 4 the extra pipe.
	want := map[int]string{0: pipeID(stdin), 4: pipeID(extra)}

	m := &ptMount{mnt: t.TempDir(), addr: freeAddr(t)}
	m.mntMountProc = mntStartMountWith(t, bin, func(c *exec.Cmd) {
		c.Stdin = stdin
		c.ExtraFiles = append(c.ExtraFiles, extra)
	}, "--store", url, "--metrics-addr", m.addr, "--passthrough", "on", "--prefetch-steps", "2",
		"--store-latency", "20ms", m.mnt)
	mntWaitMounted(t, m.mntMountProc, m.mnt)
	t.Cleanup(func() {
		select {
		case <-m.done:
			return
		default:
		}
		_ = m.cmd.Process.Signal(os.Interrupt)
		if code := m.wait(t, 30*time.Second); code != 0 {
			t.Errorf("lakefs-mount exited %d:\n%s", code, m.stderr)
		}
	})
	pid := m.cmd.Process.Pid
	checkFds := func(when string) {
		t.Helper()
		for fd, id := range want {
			if got, err := fdTarget(pid, fd); err != nil || got != id {
				t.Errorf("%s: the mount's fd %d is %q (%v); want the test's pipe %s, which the mount never opened", when, fd, got, err, id)
			}
		}
	}
	checkFds("at start")

	verifyFailures := func() float64 { return scrapeValues(t, m.addr)["lakefs_mount_verify_failures_total"] }
	soundBig := 0 // opens of sound files passthrough serves
	for pass := range 2 {
		for n := range int64(steps) {
			for _, f := range files {
				path := ptPath(m.mnt, n, 0, f.name)
				if !corrupt[n][f.name] {
					if err := ptCheckFile(path, 0, f.name, ptBatch(int(n))); err != nil {
						t.Errorf("pass %d step %d %s: %v", pass, n, f.name, err)
					}
					if f.size >= ptMinSize {
						soundBig++
					}
					continue
				}
				fh, err := os.Open(path)
				if err == nil {
					fh.Close()
					t.Errorf("pass %d step %d %s: a corrupt file opened; want EIO", pass, n, f.name)
				} else if !mntIsErrno(err, syscall.EIO) {
					t.Errorf("pass %d step %d %s: %v; want EIO", pass, n, f.name, err)
				}
			}
			if pass == 0 && n == 0 {
				// Step 0 is sound: a mismatch now is a prefetch's (steps
				// 1 and 2), found before any reader opened those files.
				waitFor(t, 20*time.Second, "the prefetch to find a corrupt file", func() bool { return verifyFailures() >= 1 })
			}
		}
	}
	if pt, _ := m.opens(t); pt < soundBig {
		t.Errorf("%d passthrough opens, want at least %d (the sound files of 1 MiB and more)", pt, soundBig)
	}
	select {
	case <-m.done:
		t.Fatalf("lakefs-mount exited (%v):\n%s", m.err, m.stderr)
	default:
	}
	checkFds("after reading the corrupt files")
	if t.Failed() {
		t.Logf("lakefs-mount's output:\n%s", m.stderr)
	}
}
