package integration

import (
	"crypto/sha256"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// Lifecycle tests: checkpoint-aligned reclamation end to end (guarantee 4
// of docs/ARCHITECTURE.md) on a real S3 server, read through FUSE mounts.

const (
	lcRanks    = 2
	lcFileSize = 4 << 10 // one file per rank per step
	// lcTGBSize bounds one TGB's object: its files plus the index (a
	// section per rank with one file, and the table: well under 1 KiB).
	lcTGBSize = lcRanks*lcFileSize + 1024
)

// lcName is the batch name of the i-th TGB a test produces.
func lcName(i int64) string { return fmt.Sprintf("b%06d", i) }

// lcBatches is the batches of steps 0..n-1.
func lcBatches(n int) []txn.Batch {
	return txntest.Batches(n, func(i int) txn.Batch { return lcBatch(lcName(int64(i))) })
}

// lcBatch is one TGB: per rank one file, sample.bin, whose content names
// the batch and rank (see mntContent).
func lcBatch(name string) txn.Batch {
	b := txn.Batch{Name: name, Cursor: name, Ranks: make([][]txn.FileSource, lcRanks)}
	for r := range lcRanks {
		b.Ranks[r] = []txn.FileSource{txn.BytesFile("sample.bin", mntContent(name, r, "sample.bin", lcFileSize))}
	}
	return b
}

// lcSums are the sha256 of a step's files, by rank.
type lcSums [lcRanks][sha256.Size]byte

// lcProduced is what was produced for batch name.
func lcProduced(name string) lcSums {
	var s lcSums
	for r := range lcRanks {
		s[r] = sha256.Sum256(mntContent(name, r, "sample.bin", lcFileSize))
	}
	return s
}

// lcReadStep reads step's files through the mount, checks that they are
// batch's, whole, and returns their sums.
func lcReadStep(mnt string, step int64, batch string) (lcSums, error) {
	var s lcSums
	for r := range lcRanks {
		b, err := mntReadFile(filepath.Join(mnt, "steps", strconv.FormatInt(step, 10), fmt.Sprintf("rank-%d", r), "sample.bin"))
		if err != nil {
			return s, fmt.Errorf("step %d: %w", step, err)
		}
		got, err := mntCheckContent(b, r, "sample.bin")
		if err != nil {
			return s, fmt.Errorf("step %d: %w", step, err)
		}
		if got != batch {
			return s, fmt.Errorf("step %d rank %d holds batch %s, want %s", step, r, got, batch)
		}
		s[r] = sha256.Sum256(b)
	}
	return s, nil
}

// lcMount mounts in process (see mntRun) with this file's quiet logger,
// a short poll and a --wait for steps just committed.
func lcMount(t testing.TB, o mount.Options) (string, func()) {
	t.Helper()
	if o.Logger == nil {
		o.Logger = testLogger(t, slog.LevelWarn)
	}
	if o.PollInterval == 0 {
		o.PollInterval = 10 * time.Millisecond
	}
	if o.Wait == 0 {
		o.Wait = 30 * time.Second // a step the producer just committed may not be shown yet
	}
	mnt, _, stop := mntRun(t, o)
	return mnt, stop
}

// lcObjects lists the objects under prefix.
func lcObjects(t testing.TB, s store.Store, prefix string) map[string]store.Info {
	t.Helper()
	out := map[string]store.Info{}
	if err := store.Walk(t.Context(), s, prefix, "", func(o store.Info) error {
		out[o.Key] = o
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func lcBytes(objs map[string]store.Info) int64 {
	var n int64
	for _, o := range objs {
		n += o.Size
	}
	return n
}

func lcGC(t testing.TB, l *txn.Log, now func() time.Time) *txn.GCReport {
	t.Helper()
	// Forced: these tests are about what the checkpoints allow; a mount's
	// heartbeat lags its reads by up to an interval and would hold gc back
	// (that hold is tested in txn.TestGCHeldByLiveConsumer).
	rep, err := txn.GC(t.Context(), l, txn.GCOptions{Grace: 0, Now: now, Logger: testLogger(t, slog.LevelWarn), Force: true})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func lcCheckpoint(t testing.TB, l *txn.Log, step int64) {
	t.Helper()
	if _, err := txn.RecordCheckpoint(t.Context(), l, step, testLogger(t, slog.LevelWarn)); err != nil {
		t.Fatal(err)
	}
}

// TestLifecycleBoundedStorage: a training run of 1,000 steps, read by two
// mounts as they are committed, a checkpoint every 50 steps and gc after
// each: the data under data/ stays within the checkpoint window and the
// log within a few snapshots' worth, however long the run. It writes
// step,data_bytes,log_objects to a CSV for plotting.
func TestLifecycleBoundedStorage(t *testing.T) {
	longtest.Skip(t, "a training run of 1,000 steps with checkpoints and gc")
	mntRequireFUSE(t)
	const (
		steps     = 1000
		every     = 50 // steps between checkpoints
		retain    = 2  // RetainCheckpoints (K)
		snapEvery = 10
		// The producer runs in lock step with the readers: it appends step
		// n+1 once both mounts have read step n, so it is at most one step
		// ahead of them.
		maxLead = 1
		slack   = 1
		// At a checkpoint the live steps are those after the K-th newest
		// checkpoint, every*K of them, plus the lead.
		dataBound = (maxLead + every*retain + slack) * lcTGBSize
		// _log/ right after a log gc: the newest snapshot, the versions
		// after it (fewer than snapEvery) and the hint. Then each step adds
		// a version and every snapEvery-th a snapshot.
		logAfterGC = snapEvery + 1
		logBound   = logAfterGC + every + every/snapEvery
	)
	ctx := t.Context()
	srv := s3test.Start(t)
	url := srv.NewBucketURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: lcRanks, ChunkSize: 64 << 10, SnapshotEvery: snapEvery, RetainCheckpoints: 2})
	var mnts []string
	for _, node := range []string{"n1", "n2"} {
		mnt, _ := lcMount(t, mount.Options{Store: url, NodeID: node})
		mnts = append(mnts, mnt)
	}
	p := txntest.Open(t, l, txn.ProducerOptions{ID: "p1", Logger: testLogger(t, slog.LevelWarn)})

	csvFile, err := os.CreateTemp("", "lakestream-lifecycle-*.csv")
	if err != nil {
		t.Fatal(err)
	}
	defer csvFile.Close()
	rows := []string{"step,data_bytes,log_objects"}
	started := time.Now()
	var logGCs int
	for step := int64(0); step < steps; step++ {
		name := lcName(step)
		if got := txntest.Commit(t, p, lcBatch(name))[0]; got != step {
			t.Fatalf("batch %s committed as step %d, want %d", name, got, step)
		}
		var g errgroup.Group
		for _, mnt := range mnts {
			g.Go(func() error {
				_, err := lcReadStep(mnt, step, name)
				return err
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}

		if step%every == 0 && step > 0 {
			// Log gc deletes only versions older than LogRetention (an
			// hour), so in a three-minute test it is run with its clock an
			// hour ahead. That is safe only here: the producer's committer
			// and both mounts have just shown this step, so each holds the
			// head version, and no one still needs a version the newest
			// snapshot covers. (With a real clock, holders of states older
			// than LogRetention/2 reload instead; see txn.LogRetention.)
			rep := lcGC(t, l, func() time.Time { return time.Now().Add(txn.LogRetention + time.Minute) })
			if rep.ReclaimedSteps > 0 || len(rep.DataDeleted)+len(rep.Orphans) > 0 {
				t.Fatalf("log gc at step %d also reclaimed or deleted data: %+v", step, rep)
			}
			logGCs++
			if n := len(lcObjects(t, l.Store, txn.LogPrefix)); n > logAfterGC {
				t.Fatalf("step %d: %d objects in _log/ right after log gc, want at most %d", step, n, logAfterGC)
			}
		}

		if (step+1)%every == 0 {
			// The peak: every step since the K-th newest checkpoint.
			data, logs := lcObjects(t, l.Store, txn.DataPrefix), lcObjects(t, l.Store, txn.LogPrefix)
			rows = append(rows, fmt.Sprintf("%d,%d,%d", step, lcBytes(data), len(logs)))
			if b := lcBytes(data); b > dataBound {
				t.Fatalf("step %d: %d bytes under data/, bound %d (%d TGBs)", step, b, dataBound, dataBound/lcTGBSize)
			}
			if len(logs) > logBound {
				t.Fatalf("step %d: %d objects in _log/, bound %d", step, len(logs), logBound)
			}
			lcCheckpoint(t, l, step)
			lcGC(t, l, time.Now)
			st, err := l.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if after := lcBytes(lcObjects(t, l.Store, txn.DataPrefix)); after != st.LiveBytes() {
				t.Fatalf("step %d: after gc %d bytes under data/, the live steps %d-%d have %d", step, after, st.LiveFrom, step, st.LiveBytes())
			}
			if want := max(0, step+1-every*(retain-1)); st.LiveFrom != want {
				t.Fatalf("step %d: after gc live from %d, want %d", step, st.LiveFrom, want)
			}
		}
	}
	if _, err := csvFile.WriteString(strings.Join(rows, "\n") + "\n"); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d steps in %s, %d log gcs; CSV at %s; last rows:\n%s", steps, time.Since(started).Round(time.Second), logGCs, csvFile.Name(),
		strings.Join(rows[len(rows)-3:], "\n"))
}

// TestLifecycleRestartFromCheckpoint: a trainer reads to step 730 with
// checkpoints at 650 and 700, then dies; gc runs; the restarted trainer,
// resuming from the checkpoint at 700, reads 701.. exactly the bytes the
// first one read (and what was produced), while steps up to 650 are gone;
// on versitygw, fake-gcs-server and Azurite.
func TestLifecycleRestartFromCheckpoint(t *testing.T) {
	mntRequireFUSE(t)
	forEachServer(t, false, func(t *testing.T, srv storeServer) { lcRestartFromCheckpoint(t, srv.NewBucketURL(t)) })
}

func lcRestartFromCheckpoint(t *testing.T, url string) {
	const steps, crash = 800, 730
	l := newStream(t, url, txn.CreateOptions{Ranks: lcRanks, ChunkSize: 64 << 10, SnapshotEvery: 50, RetainCheckpoints: 2})
	p := txntest.Open(t, l, txn.ProducerOptions{ID: "p1", Logger: testLogger(t, slog.LevelWarn)})
	if got := txntest.Pipeline(t, p, lcBatches(steps)...); got != steps-1 {
		t.Fatalf("last batch committed as step %d", got)
	}

	mnt1, stop1 := lcMount(t, mount.Options{Store: url, NodeID: "trainer-1"})
	read := map[int64]lcSums{}
	for step := range int64(crash + 1) {
		sums, err := lcReadStep(mnt1, step, lcName(step))
		if err != nil {
			t.Fatal(err)
		}
		read[step] = sums
		if step == 650 || step == 700 {
			lcCheckpoint(t, l, step)
		}
	}
	stop1()

	rep := lcGC(t, l, time.Now)
	if rep.ReclaimedBelow != 651 || len(rep.DataDeleted) != 651 {
		t.Fatalf("gc: reclaimed below %d, deleted %d objects; want below 651 and 651 objects", rep.ReclaimedBelow, len(rep.DataDeleted))
	}
	live, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if data := lcObjects(t, l.Store, txn.DataPrefix); len(data) != steps-651 || lcBytes(data) != live.LiveBytes() {
		t.Fatalf("data/ holds %d objects, %d bytes; want the %d objects (%d bytes) of steps 651-%d", len(data), lcBytes(data), steps-651, live.LiveBytes(), steps-1)
	}

	mnt2, _ := lcMount(t, mount.Options{Store: url, NodeID: "trainer-2"})
	var want []string
	for s := 651; s < steps; s++ {
		want = append(want, strconv.Itoa(s))
	}
	if got := mntReaddirNames(t, filepath.Join(mnt2, "steps")); !slices.Equal(got, want) {
		t.Fatalf("ls steps after gc: %d entries %v..., want 651-%d", len(got), got[:min(len(got), 3)], steps-1)
	}
	for _, s := range []int{0, 650} {
		if _, err := os.Stat(filepath.Join(mnt2, "steps", strconv.Itoa(s))); !mntIsErrno(err, syscall.ENOENT) {
			t.Fatalf("reclaimed step %d: %v, want ENOENT", s, err)
		}
	}
	for step := int64(701); step < steps; step++ {
		sums, err := lcReadStep(mnt2, step, lcName(step))
		if err != nil {
			t.Fatal(err)
		}
		if step <= crash && sums != read[step] {
			t.Fatalf("step %d after the restart differs from what the first trainer read", step)
		}
		if sums != lcProduced(lcName(step)) {
			t.Fatalf("step %d after the restart differs from what was produced", step)
		}
	}
}

// TestLifecycleGCDryRun: `lakefs-produce gc --dry-run --grace 0s` lists
// what it would delete and changes nothing in the store.
func TestLifecycleGCDryRun(t *testing.T) {
	ctx := t.Context()
	bin := filepath.Join(t.TempDir(), "lakefs-produce")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/lakestream/lakestream/cmd/lakefs-produce").CombinedOutput(); err != nil {
		t.Fatalf("building lakefs-produce: %v\n%s", err, out)
	}
	srv := s3test.Start(t)
	url := srv.NewBucketURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: lcRanks, ChunkSize: 64 << 10, SnapshotEvery: 10, RetainCheckpoints: 2})
	p := txntest.Open(t, l, txn.ProducerOptions{ID: "p1", Logger: testLogger(t, slog.LevelWarn)})
	txntest.Pipeline(t, p, lcBatches(60)...)
	// Steps 0-20 reclaimed and pending deletion; with a checkpoint at 59,
	// 21-40 are reclaimable; and an orphan.
	lcCheckpoint(t, l, 20)
	lcCheckpoint(t, l, 40)
	if _, err := txn.GC(ctx, l, txn.GCOptions{Grace: time.Hour, Logger: testLogger(t, slog.LevelWarn)}); err != nil {
		t.Fatal(err)
	}
	lcCheckpoint(t, l, 59)
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pending []string
	for _, pd := range st.Pending {
		pending = append(pending, pd.Keys...)
	}
	if st.LiveFrom != 21 || len(pending) != 21 {
		t.Fatalf("setup: live from %d, %d pending", st.LiveFrom, len(pending))
	}
	orphan := "data/ghost/1/1/rank-0.pack"
	if err := store.PutBytes(ctx, l.Store, orphan, []byte("nobody's")); err != nil {
		t.Fatal(err)
	}
	before := lcObjects(t, l.Store, "")

	gc := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"gc", "--store", url}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("lakefs-produce gc %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	out := gc("--dry-run", "--grace", "0s")
	t.Logf("gc --dry-run --grace 0s:\n%s", lcHead(out, 5))
	if !strings.Contains(out, "would reclaim 20 steps (below step 41)\n") {
		t.Errorf("dry run does not say it would reclaim steps 21-40:\n%s", out)
	}
	listed := lcListed(out)
	for _, k := range append(pending, orphan) {
		if !listed[k] {
			t.Errorf("dry run does not list %s", k)
		}
	}
	if !strings.Contains(out, fmt.Sprintf("would delete %d objects, ", len(listed))) {
		t.Errorf("dry run summary does not count the %d listed objects:\n%s", len(listed), out)
	}
	if after := lcObjects(t, l.Store, ""); !maps.Equal(after, before) {
		t.Fatalf("dry run changed the store: %d objects before, %d after", len(before), len(after))
	}

	// What the dry run lists is what gc with the same flags then deletes.
	t.Run("lists what gc deletes", func(t *testing.T) {
		gc("--grace", "0s")
		after := lcObjects(t, l.Store, "")
		var deleted []string
		for k := range before {
			if _, ok := after[k]; !ok {
				deleted = append(deleted, k)
			}
		}
		var unlisted []string
		for _, k := range deleted {
			if !listed[k] {
				unlisted = append(unlisted, k)
			}
		}
		if len(unlisted) > 0 || len(deleted) != len(listed) {
			slices.Sort(unlisted)
			t.Errorf("gc --grace 0s deleted %d objects, the dry run listed %d; deleted but not listed: %d, e.g. %v",
				len(deleted), len(listed), len(unlisted), unlisted[:min(len(unlisted), 4)])
		}
	})
}

// lcListed parses the keys out of gc's "would delete <what>: <key>" lines.
func lcListed(out string) map[string]bool {
	keys := map[string]bool{}
	for _, line := range strings.Split(out, "\n") {
		if _, key, ok := strings.Cut(line, ": "); ok && strings.HasPrefix(line, "would delete ") {
			keys[key] = true
		}
	}
	return keys
}

// lcHead is the first n lines of s, and how many more there are.
func lcHead(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return strings.Join(lines[:n], "\n") + fmt.Sprintf("\n... (%d more lines)\n%s", len(lines)-n-1, lines[len(lines)-1])
}
