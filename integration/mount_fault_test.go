package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/txn"
)

// Mount failures: a hung lakefs-mount (SIGSTOP) and a killed one, with
// readers blocked in it, are freed by the one command the docs give
// (lakefs-mount --abort MOUNTPOINT), and the next lakefs-mount on the path
// serves again; a store that is down for 30 s while a mount is read.

// faultBlocked starts a child process that will block in the mount and
// checks that it does (it has not exited after a moment). Blocked readers
// are child processes so that the test itself never hangs in the mount.
func faultBlocked(t *testing.T, name string, args ...string) (*exec.Cmd, <-chan error) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("%s %v did not block in the mount (exit %v)", name, args, err)
	case <-time.After(time.Second):
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return cmd, done
}

// faultReleased waits for a blocked reader to be released with an error.
func faultReleased(t *testing.T, what string, done <-chan error) {
	t.Helper()
	select {
	case err := <-done:
		if err == nil {
			t.Errorf("%s: released without an error", what)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: still blocked 30s after lakefs-mount --abort", what)
	}
}

func faultAbort(t *testing.T, bin, mnt string) {
	t.Helper()
	out, err := exec.Command(bin, "--abort", mnt).CombinedOutput()
	if err != nil {
		t.Fatalf("lakefs-mount --abort %s: %v\n%s", mnt, err, out)
	}
}

// faultRemount starts a new lakefs-mount on mnt and checks it serves head.
func faultRemount(t *testing.T, bin, url, mnt, head string) {
	t.Helper()
	m := mntStartMount(t, bin, "--store", url, mnt)
	mntWaitMounted(t, m, mnt)
	b, err := os.ReadFile(filepath.Join(mnt, "head"))
	if err != nil || strings.TrimSpace(string(b)) != head {
		t.Errorf("the new mount on %s reads head %q, %v; want %s", mnt, b, err, head)
	}
	_ = m.cmd.Process.Signal(os.Interrupt)
	if code := m.wait(t, 30*time.Second); code != 0 {
		t.Errorf("the new lakefs-mount exited %d:\n%s", code, m.stderr)
	}
}

// TestMountAbortHung: a stopped (SIGSTOP) lakefs-mount blocks its readers
// (one listing a step, one waiting for a future step); lakefs-mount --abort
// releases them with an error, the stopped process can then be killed, and
// the next lakefs-mount on the path serves.
func TestMountAbortHung(t *testing.T) {
	longtest.Skip(t, "a hung mount aborted under a blocked reader; TestMountAbortKilled stays")
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	url, _ := mntFileURL(t)
	mntNewProducer(t, newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 0, SnapshotEvery: 10}), "p", 4096, 1).addN(t, 3)
	mnt := t.TempDir()
	m := mntStartMount(t, bin, "--store", url, "--wait", "10m", mnt)
	mntWaitMounted(t, m, mnt)
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	_, lsDone := faultBlocked(t, "ls", "-R", filepath.Join(mnt, "steps", "1"))
	_, waitDone := faultBlocked(t, "stat", filepath.Join(mnt, "steps", "7"))
	faultAbort(t, bin, mnt)
	faultReleased(t, "ls -R steps/1", lsDone)
	faultReleased(t, "stat steps/7", waitDone)
	_ = m.cmd.Process.Kill()
	m.reap(t, mnt, true)
	faultRemount(t, bin, url, mnt, "2")
}

// TestMountAbortKilled: a SIGKILLed lakefs-mount with a reader waiting in
// it; lakefs-mount --abort releases the reader (if the kernel has not
// already) and the next lakefs-mount on the path serves.
func TestMountAbortKilled(t *testing.T) {
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	url, _ := mntFileURL(t)
	mntNewProducer(t, newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 0, SnapshotEvery: 10}), "p", 4096, 1).addN(t, 3)
	mnt := t.TempDir()
	m := mntStartMount(t, bin, "--store", url, "--wait", "10m", mnt)
	mntWaitMounted(t, m, mnt)
	_, waitDone := faultBlocked(t, "stat", filepath.Join(mnt, "steps", "7"))
	_ = m.cmd.Process.Kill()
	faultAbort(t, bin, mnt)
	faultReleased(t, "stat steps/7", waitDone)
	m.reap(t, mnt, true)
	faultRemount(t, bin, url, mnt, "2")
	// --abort on a path with nothing mounted says so (usage error).
	out, err := exec.Command(bin, "--abort", mnt).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "nothing is mounted") {
		t.Errorf("--abort on an empty mount point: %v: %s; want exit 2 saying nothing is mounted", err, out)
	}
}

// TestMountStoreOutage: the S3 server is down for 30 s while a mount is
// read. Files already read and steps already prefetched keep reading, with
// the right bytes; a file that needs the store either waits and succeeds
// once the store is back or fails with EIO, never with wrong bytes, and
// reads the same file correctly once the store is back.
func TestMountStoreOutage(t *testing.T) {
	longtest.Skip(t, "a 30 s store outage under readers; TestMountStoreOutageRideOut stays")
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	srv := s3test.Start(t)
	url := srv.NewBucketURL(t)
	prod := mntNewProducer(t, newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10}), "p", 300<<10, 3)
	prod.addN(t, 10)
	mnt := t.TempDir()
	port := freeAddr(t)
	const prefetch = 2
	m := mntStartMount(t, bin, "--store", url, "--wait", "2m", "--prefetch-steps", strconv.Itoa(prefetch),
		"--metrics-addr", port, "--cache-size", "256MiB", mnt)
	mntWaitMounted(t, m, mnt)

	check := func(step int64, rank int) error {
		dir := filepath.Join(mnt, "steps", strconv.FormatInt(step, 10), fmt.Sprintf("rank-%d", rank))
		spec, _ := prod.spec(prod.steps[step])
		names := make([]string, 0, len(spec.files[rank]))
		for n := range spec.files[rank] {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			b, err := mntReadFile(filepath.Join(dir, n))
			if err != nil {
				return err
			}
			if _, err := mntCheckContent(b, rank, n); err != nil || len(b) != spec.files[rank][n] {
				t.Errorf("step %d rank %d %s: wrong bytes (%d, want %d): %v", step, rank, n, len(b), spec.files[rank][n], err)
			}
		}
		return nil
	}
	rank0 := func(step int64) (n int64) {
		spec, _ := prod.spec(prod.steps[step])
		for _, size := range spec.files[0] {
			n += int64(size)
		}
		return n
	}
	if err := check(0, 0); err != nil {
		t.Fatal(err)
	}
	var want float64
	for s := int64(0); s <= prefetch; s++ {
		want += float64(rank0(s))
	}
	waitFor(t, time.Minute, "the prefetch of steps 1..P", func() bool {
		return scrapeValues(t, port)["lakefs_mount_bytes_fetched_total"] >= want
	})

	srv.Stop(syscall.SIGKILL)
	down := time.Now()
	for s := int64(0); s <= prefetch; s++ {
		if err := check(s, 0); err != nil {
			t.Errorf("step %d rank 0 (read or prefetched before the outage) during the outage: %v", s, err)
		}
	}
	// Never opened: rank 1 of a step past the prefetch window.
	type result struct {
		err  error
		took time.Duration
	}
	res := make(chan result, 1)
	go func() {
		start := time.Now()
		err := check(7, 1)
		res <- result{err, time.Since(start)}
	}()
	time.Sleep(30*time.Second - time.Since(down))
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	r := <-res
	switch {
	case r.err == nil:
		t.Logf("a read needing the store waited %s and succeeded once the store was back", r.took.Round(time.Millisecond))
	case errors.Is(r.err, syscall.EIO):
		t.Logf("a read needing the store failed with EIO after %s (the documented timeout)", r.took.Round(time.Millisecond))
	default:
		t.Errorf("a read needing the store during the outage: %v after %s; want success or EIO", r.err, r.took)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for s := int64(3); s < 10 && ctx.Err() == nil; s++ {
		for rank := range 2 {
			if err := check(s, rank); err != nil {
				t.Errorf("step %d rank %d after the store is back: %v", s, rank, err)
			}
		}
	}
	_ = m.cmd.Process.Signal(os.Interrupt)
	if code := m.wait(t, 30*time.Second); code != 0 {
		t.Errorf("lakefs-mount exited %d:\n%s", code, m.stderr)
	}
}
