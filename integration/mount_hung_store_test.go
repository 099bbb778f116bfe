package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestMountHungStore: with the S3 server hung (SIGSTOP: it accepts
// connections and never answers), a read through the mount that needs the
// store fails with EIO within the stated bound instead of hanging (issue
// 32 item 11: 100 s before); once the server resumes, the same file reads.
func TestMountHungStore(t *testing.T) {
	longtest.Skip(t, "reads through a hung S3 server; store.TestS3Timeouts stays")
	srv := s3test.Start(t)
	url := srv.NewBucketURL(t)
	prod := mntNewProducer(t, newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10}), "p", 100<<10, 5)
	prod.addN(t, 20)
	mnt, _ := mntMountInProcess(t, mount.Options{Store: url, PrefetchSteps: 0, StoreRetry: 2 * time.Second})
	// Loads the file lists of rank 0 of steps 0..16, not the bytes.
	if _, err := os.Stat(filepath.Join(mnt, "steps", "0", "rank-0", "sample-00.bin")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = srv.Signal(syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)
	// A file, then a directory, that need the store: step 0's rank 0 data
	// was never read, step 19's file lists never loaded.
	bound := 2*store.DefaultFirstByteTimeout + 5*time.Second // the kernel reads a failed page again
	for _, p := range []string{filepath.Join("steps", "0", "rank-0", "sample-00.bin"), filepath.Join("steps", "19", "rank-1")} {
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			_, err := os.ReadDir(filepath.Join(mnt, p))
			if err != nil && errors.Is(err, syscall.ENOTDIR) {
				_, err = mntReadFile(filepath.Join(mnt, p))
			}
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("%s with the store hung: %v after %s; want EIO", p, err, time.Since(start).Round(time.Millisecond))
			}
			t.Logf("%s with the store hung: %v after %s", p, err, time.Since(start).Round(time.Millisecond))
		case <-time.After(bound + 30*time.Second):
			resume()
			t.Fatalf("%s: still blocked %s after the store hung; want EIO within %s", p, time.Since(start).Round(time.Second), bound)
		}
		if d := time.Since(start); d > bound {
			t.Errorf("%s: EIO after %s; want within %s", p, d.Round(time.Millisecond), bound)
		}
	}
	resume()
	b, err := mntReadFile(filepath.Join(mnt, "steps", "0", "rank-0", "sample-00.bin"))
	if err != nil {
		t.Fatalf("after the store resumed: %v", err)
	}
	if _, err := mntCheckContent(b, 0, "sample-00.bin"); err != nil {
		t.Fatal(fmt.Errorf("after the store resumed: %w", err))
	}
}
