package integration

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/internal/toxitest"
	"github.com/lakestream/lakestream/txn"
)

// TestMountPartitioned: a real lakefs-mount whose only path to versitygw
// is a Toxiproxy link that is blackholed (bytes dropped, connections held
// open), as a node cut off from the store is.
//
//   - A read that needs the store fails with EIO within the store-retry
//     window (30 s) plus one request's timeouts, never with wrong bytes
//     or another errno; the same file reads right once the link heals.
//   - A lookup of a step not yet committed (--wait) blocks through the
//     partition and succeeds after the heal, within the bound stated in
//     docs/RELIABILITY.md (30 s; checked at 60 s).
//   - Partitioned for longer than the consumer timeout (its heartbeat is
//     removed here, as its expiry would), the node falls behind a gc that
//     reclaims past it: after the heal a reclaimed step is gone (ENOENT),
//     a file of one it had open fails with EIO, never wrong bytes, and no
//     step lists empty.
func TestMountPartitioned(t *testing.T) {
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	srv := s3test.Start(t)
	url := srv.NewBucketURL(t)
	up, err := toxitest.Upstream(url)
	if err != nil {
		t.Fatal(err)
	}
	link := toxitest.Start(t).Link(t, "node", up)
	via, err := link.Via(url)
	if err != nil {
		t.Fatal(err)
	}
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10, RetainCheckpoints: 1})
	prod := mntNewProducer(t, l, "p", 512<<10, 7)
	prod.addN(t, 6)
	mnt := t.TempDir()
	m := mntStartMount(t, bin, "--store", via, "--wait", "2m", "--prefetch-steps", "0", "--node-id", "n1",
		"--heartbeat-interval", "1s", "--poll-interval", "100ms", "--cache-size", "64MiB", mnt)
	mntWaitMounted(t, m, mnt)
	if err := outReadRank(t, prod, mnt, 1, 0); err != nil {
		t.Fatal(err)
	}

	netPartitionedRead(t, link, prod, mnt)
	netWaitThroughPartition(t, link, prod, mnt)
	netPartitionedPastGC(t, l, link, prod, mnt)
	_ = m.cmd.Process.Signal(os.Interrupt)
	if code := m.wait(t, 30*time.Second); code != 0 {
		t.Errorf("lakefs-mount exited %d after the partitions; want 0 (no process exits on a network fault)\n%s", code, m.stderr)
	}
}

// netPartitionedRead: a read of a file the node never fetched fails with
// EIO within the bound, and reads right after the heal.
func netPartitionedRead(t *testing.T, link *toxitest.Link, prod *mntProducer, mnt string) {
	if err := link.Partition(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err := outReadRank(t, prod, mnt, 2, 1)
	took := time.Since(start)
	t.Logf("a read through the partitioned mount: %v after %s", err, took.Round(time.Millisecond))
	// 30 s of store-retry, then at most one request's first-byte and idle
	// timeouts already under way; the rest is margin for a loaded machine.
	const bound = 30*time.Second + 20*time.Second + 20*time.Second
	switch {
	case err == nil:
		t.Errorf("a read through a partitioned mount succeeded; nothing of it was cached")
	case !mntIsErrno(err, syscall.EIO):
		t.Errorf("a read through a partitioned mount: %v; want EIO", err)
	case took > bound:
		t.Errorf("a read through a partitioned mount failed after %s; want within %s", took.Round(time.Second), bound)
	}
	if err := link.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := outReadRank(t, prod, mnt, 2, 1); err != nil {
		t.Errorf("after the heal: %v", err)
	}
}

// netWaitThroughPartition: a reader waiting (--wait) for the next step
// while the node is partitioned and the step is committed meanwhile sees
// it after the heal.
func netWaitThroughPartition(t *testing.T, link *toxitest.Link, prod *mntProducer, mnt string) {
	if err := link.Partition(); err != nil {
		t.Fatal(err)
	}
	next := netAdd(t, prod, 6, 1)
	seen := make(chan error, 1)
	go func() {
		_, err := os.Stat(filepath.Join(mnt, "steps", strconv.FormatInt(next, 10)))
		seen <- err
	}()
	time.Sleep(8 * time.Second)
	select {
	case err := <-seen:
		t.Fatalf("step %d appeared through a partitioned mount (%v)", next, err)
	default:
	}
	if err := link.Heal(); err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	select {
	case err := <-seen:
		if err != nil {
			t.Fatalf("waiting for step %d through the partition: %v", next, err)
		}
		t.Logf("step %d seen %s after the heal", next, time.Since(healed).Round(time.Millisecond))
	case <-time.After(chaosHealBound):
		t.Fatalf("step %d not seen %s after the heal", next, chaosHealBound)
	}
	for r := range 2 {
		if err := outReadRank(t, prod, mnt, next, r); err != nil {
			t.Error(err)
		}
	}
}

// netPartitionedPastGC: the node is partitioned while steps are committed,
// checkpointed and reclaimed past what it read.
func netPartitionedPastGC(t *testing.T, l *txn.Log, link *toxitest.Link, prod *mntProducer, mnt string) {
	ctx := t.Context()
	// A file of step 3 opened before, never read.
	name := netFirstFile(t, prod, 3, 0)
	f, err := os.Open(filepath.Join(mnt, "steps", "3", "rank-0", name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close() // before the mount stops
	if err := link.Partition(); err != nil {
		t.Fatal(err)
	}
	first := netAdd(t, prod, 7, 5) - 4
	last := first + 4
	// Training restarts after last-1: every step below last is reclaimable.
	if _, err := txn.RecordCheckpoint(ctx, l, last-1, testLogger(t, slog.LevelWarn)); err != nil {
		t.Fatal(err)
	}
	// Its heartbeat as good as expired: txn.ConsumerTimeout (3 min) later.
	if err := l.Store.Delete(ctx, txn.HeartbeatKey("n1")); err != nil {
		t.Fatal(err)
	}
	// The first gc reclaims, the second deletes the reclaimed packs.
	for range 2 {
		rep, err := txn.GC(ctx, l, txn.GCOptions{Grace: 0, Now: time.Now, Logger: testLogger(t, slog.LevelWarn)})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("gc while the node is partitioned: reclaimed %d steps, deleted %d objects", rep.ReclaimedSteps, len(rep.DataDeleted))
	}
	if err := link.Heal(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the mount to see the head after the heal", func() bool {
		b, err := os.ReadFile(filepath.Join(mnt, "head"))
		return err == nil && strings.TrimSpace(string(b)) == strconv.FormatInt(last, 10)
	})
	// A step reclaimed while the node was away is gone, not empty.
	for s := first; s < last; s++ {
		ents, err := os.ReadDir(filepath.Join(mnt, "steps", strconv.FormatInt(s, 10)))
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("step %d, reclaimed while the node was partitioned: %d entries, %v; want ENOENT", s, len(ents), err)
		}
	}
	// The file it held open: its object is deleted, so an error; never
	// other bytes.
	b, err := io.ReadAll(f)
	t.Logf("a file of a reclaimed step, held open through the partition: %d bytes, %v", len(b), err)
	switch {
	case err == nil:
		if _, cerr := mntCheckContent(b, 0, name); cerr != nil {
			t.Errorf("a reclaimed step's open file read %d wrong bytes: %v", len(b), cerr)
		}
	case !mntIsErrno(err, syscall.EIO) && !mntIsErrno(err, syscall.ESTALE):
		t.Errorf("a reclaimed step's open file: %v; want EIO or ESTALE", err)
	}
	if err := outReadRank(t, prod, mnt, last, 1); err != nil {
		t.Errorf("the checkpointed step after the heal: %v", err)
	}
}

// netAdd commits n batches numbered from i and returns the last step.
func netAdd(t *testing.T, prod *mntProducer, i, n int) int64 {
	var step int64
	for j := range n {
		var err error
		if step, err = prod.add(t.Context(), i+j); err != nil {
			t.Fatal(err)
		}
	}
	return step
}

// netFirstFile is the name of one file of rank in step.
func netFirstFile(t *testing.T, prod *mntProducer, step int64, rank int) string {
	prod.mu.Lock()
	name := prod.steps[step]
	prod.mu.Unlock()
	spec, _ := prod.spec(name)
	for n := range spec.files[rank] {
		return n
	}
	t.Fatalf("step %d rank %d has no files", step, rank)
	return ""
}
