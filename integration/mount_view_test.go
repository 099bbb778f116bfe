package integration

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// TestMountView checks the view's shape on a real kernel mount: numeric
// step order, exact sizes, mtime = commit time, head, nested names, the
// --ranks filter, --wait lookups of future steps, and reclaimed steps
// leaving the view (also from the kernel's dentry cache).
func TestMountView(t *testing.T) {
	mntRequireFUSE(t)
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 3, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 200<<10, 1)

	mnt, _ := mntMountInProcess(t, mount.Options{Store: url, Wait: 3 * time.Second})
	viewCheckEmptyHead(t, mnt, l)
	steps := p.addN(t, 12)
	waitFor(t, 5*time.Second, "head to show step 11", func() bool {
		b, _ := os.ReadFile(filepath.Join(mnt, "head"))
		return string(b) == "11\n"
	})
	// The directory's own order (os.ReadDir would sort by name).
	raw := mntReaddirNames(t, filepath.Join(mnt, "steps"))
	want := []string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"}
	if !slices.Equal(raw, want) {
		t.Fatalf("steps/ lists %v, want %v (numeric order)", raw, want)
	}
	st, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range steps {
		viewCheckStep(t, mnt, st, p, step)
	}

	t.Run("not committed", func(t *testing.T) { viewNotCommitted(t, mnt) })
	t.Run("wait", func(t *testing.T) { viewWait(t, mnt, p) })
	t.Run("wait interrupted", func(t *testing.T) { viewWaitInterrupted(t, mnt) })
	t.Run("ranks", func(t *testing.T) { viewRanks(t, url) })
	t.Run("reclaim", func(t *testing.T) { viewReclaim(t, mnt, l) })
	t.Run("heartbeat", func(t *testing.T) {
		b, err := os.ReadFile(filepath.Join(strings.TrimPrefix(url, "file://"), txn.HeartbeatKey("test-node")))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), `"node_id":"test-node"`) {
			t.Errorf("heartbeat %s", b)
		}
	})
}

// viewCheckEmptyHead: before the first commit there are no steps and head
// is empty, dated from the stream (its creation or newest version), not
// year 1.
func viewCheckEmptyHead(t *testing.T, mnt string, l *txn.Log) {
	t.Helper()
	if b, err := os.ReadFile(filepath.Join(mnt, "head")); err != nil || len(b) != 0 {
		t.Fatalf("head before any commit = %q, %v; want empty", b, err)
	}
	if fi, err := os.Stat(filepath.Join(mnt, "head")); err != nil || fi.ModTime().Before(l.Config.CreatedAt) {
		t.Fatalf("head before any commit: mtime %v (%v), want no earlier than the stream's creation %v", fi.ModTime(), err, l.Config.CreatedAt)
	}
}

// viewCheckStep checks one step's directory: its listing, its mtime (the
// commit time), and each file's size, mode, mtime, link count, blocks and
// content (the batch p committed as that step).
func viewCheckStep(t *testing.T, mnt string, st *txn.State, p *mntProducer, step int64) {
	t.Helper()
	tgb, _ := st.Step(step)
	batch := p.steps[step]
	spec, _ := p.spec(batch)
	dir := filepath.Join(mnt, "steps", strconv.FormatInt(step, 10))
	if raw := mntReaddirNames(t, dir); !slices.Equal(raw, []string{"rank-0", "rank-1", "rank-2", "meta.json"}) {
		t.Fatalf("step %d lists %v", step, raw)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(tgb.Time) {
		t.Errorf("step %d mtime %v, commit time %v", step, fi.ModTime(), tgb.Time)
	}
	for r, files := range spec.files {
		for name, size := range files {
			path := filepath.Join(dir, name)
			if r >= 0 {
				path = filepath.Join(dir, "rank-"+strconv.Itoa(r), name)
			}
			viewCheckFile(t, path, int64(size), tgb.Time, r, name, batch)
		}
	}
}

func viewCheckFile(t *testing.T, path string, size int64, mtime time.Time, rank int, name, batch string) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() != size || !fi.ModTime().Equal(mtime) || fi.Mode() != 0o444 {
		t.Errorf("%s: size %d mode %v mtime %v; want %d, -r--r--r--, %v", path, fi.Size(), fi.Mode(), fi.ModTime(), size, mtime)
	}
	sys := fi.Sys().(*syscall.Stat_t)
	if sys.Nlink != 1 || sys.Blocks != (size+511)/512 {
		t.Errorf("%s: nlink %d blocks %d", path, sys.Nlink, sys.Blocks)
	}
	b, err := mntReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := mntCheckContent(b, rank, name)
	if err != nil || got != batch {
		t.Fatalf("%s: batch %q, %v; want batch %s", path, got, err, batch)
	}
}

// viewNotCommitted: names that are no committed step or rank give ENOENT.
func viewNotCommitted(t *testing.T, mnt string) {
	_, err := os.Stat(filepath.Join(mnt, "steps", "012"))
	if !mntIsErrno(err, syscall.ENOENT) {
		t.Errorf("steps/012 (not canonical): %v, want ENOENT", err)
	}
	_, err = os.Stat(filepath.Join(mnt, "steps", "5", "rank-9"))
	if !mntIsErrno(err, syscall.ENOENT) {
		t.Errorf("rank-9 of a 3-rank stream: %v, want ENOENT", err)
	}
}

// viewWait: opening a future step blocks until it is committed; one
// never committed gives ENOENT after --wait.
func viewWait(t *testing.T, mnt string, p *mntProducer) {
	// Opening a future step blocks until it is committed.
	got := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := mntReadFile(filepath.Join(mnt, "steps", "12", "meta.json"))
		got <- err
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("open of step 12 returned before it was committed: %v", err)
	default:
	}
	if _, err := p.add(context.Background(), 12); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("open of step 12 after its commit: %v", err)
	}
	t.Logf("waited %s", time.Since(start))
	// One that never comes: ENOENT after --wait.
	start = time.Now()
	_, err := os.Stat(filepath.Join(mnt, "steps", "99"))
	if !mntIsErrno(err, syscall.ENOENT) {
		t.Fatalf("stat of a step never committed: %v, want ENOENT", err)
	}
	if d := time.Since(start); d < 2*time.Second {
		t.Errorf("gave up after %s, --wait is 3s", d)
	}
}

// viewWaitInterrupted: a reader waiting for a future step can be
// interrupted.
func viewWaitInterrupted(t *testing.T, mnt string) {
	// A reader waiting for a future step can be interrupted.
	cmd := exec.Command("cat", filepath.Join(mnt, "steps", "98", "meta.json"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("SIGINT took %s to end a waiting open (--wait 3s)", d)
	}
}

// viewRanks: a mount with --ranks 1 shows rank 1 and the shared files
// only.
func viewRanks(t *testing.T, url string) {
	mnt2, _ := mntMountInProcess(t, mount.Options{Store: url, Ranks: []int{1}, NodeID: "test-node-ranks"})
	if raw := mntReaddirNames(t, filepath.Join(mnt2, "steps", "3")); !slices.Equal(raw, []string{"rank-1", "meta.json"}) {
		t.Fatalf("with --ranks 1 step 3 lists %v", raw)
	}
	if _, err := os.Stat(filepath.Join(mnt2, "steps", "3", "rank-0")); !mntIsErrno(err, syscall.ENOENT) {
		t.Fatalf("rank-0 with --ranks 1: %v, want ENOENT", err)
	}
	if raw := mntReaddirNames(t, filepath.Join(mnt2, "steps", "3", "rank-1", "sub")); !slices.Equal(raw, []string{"dir"}) {
		t.Fatalf("nested dir lists %v", raw)
	}
}

// viewReclaim: reclaimed steps leave the listing and, through the
// kernel's notification, its dentry cache.
func viewReclaim(t *testing.T, mnt string, l *txn.Log) {
	// Hold dentries of steps 0-4 in the kernel's cache, then reclaim
	// below 5: they must vanish from lookups and listings.
	for s := range 5 {
		if _, err := os.Stat(filepath.Join(mnt, "steps", strconv.Itoa(s), "rank-0")); err != nil {
			t.Fatal(err)
		}
	}
	st, err := l.Load(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(context.Background(), st, func(*txn.State) (*txn.Version, error) {
		return &txn.Version{Reclaim: &txn.Reclaim{Below: 5}}, nil
	}, testLogger(t, slog.LevelInfo)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "reclaimed steps to leave the listing", func() bool {
		raw := mntReaddirNames(t, filepath.Join(mnt, "steps"))
		return len(raw) > 0 && raw[0] == "5"
	})
	// The kernel cached these dentries for an hour: only the
	// notification can remove them this soon.
	for s := range 5 {
		waitFor(t, 3*time.Second, "reclaimed step "+strconv.Itoa(s)+" to give ENOENT", func() bool {
			_, err := os.Stat(filepath.Join(mnt, "steps", strconv.Itoa(s), "rank-0"))
			return mntIsErrno(err, syscall.ENOENT)
		})
	}
	if _, err := os.Stat(filepath.Join(mnt, "steps", "5", "rank-0")); err != nil {
		t.Errorf("live step 5: %v", err)
	}
}

// mntReaddirNames lists a directory in the order the filesystem returns.
func mntReaddirNames(t testing.TB, dir string) []string {
	t.Helper()
	f, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	return names
}
