package integration

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestMountViewRanks: --view-ranks 2 on a 4-rank stream shows rank-r as
// the original ranks 2r and 2r+1, each a rank-<original> directory with
// exactly that rank's files (bytes checked); a step is there whole or not
// at all; a --wait lookup of a future step works through the view; the
// heartbeat says which view the node reads.
func TestMountViewRanks(t *testing.T) {
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 4, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 100<<10, 3)
	p.addN(t, 3)
	mnt, _ := mntMountInProcess(t, mount.Options{Store: url, ViewRanks: 2, Wait: 20 * time.Second, HeartbeatInterval: 100 * time.Millisecond})

	check := func(step int64) {
		t.Helper()
		dir := filepath.Join(mnt, "steps", strconv.FormatInt(step, 10))
		if got := mntReaddirNames(t, dir); !slices.Equal(got, []string{"rank-0", "rank-1", "meta.json"}) {
			t.Fatalf("step %d lists %v, want rank-0, rank-1 and the shared file", step, got)
		}
		spec, _ := p.spec(p.steps[step])
		for view := range 2 {
			vdir := filepath.Join(dir, "rank-"+strconv.Itoa(view))
			want := []string{"rank-" + strconv.Itoa(2*view), "rank-" + strconv.Itoa(2*view+1)}
			if got := mntReaddirNames(t, vdir); !slices.Equal(got, want) {
				t.Fatalf("step %d rank-%d lists %v, want %v", step, view, got, want)
			}
			for _, orig := range []int{2 * view, 2*view + 1} {
				odir := filepath.Join(vdir, "rank-"+strconv.Itoa(orig))
				var n int
				err := filepath.WalkDir(odir, func(_ string, d os.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						n++
					}
					return err
				})
				if err != nil {
					t.Fatal(err)
				}
				if n != len(spec.files[orig]) {
					t.Fatalf("%s holds %d files, rank %d has %d", odir, n, orig, len(spec.files[orig]))
				}
				for name := range spec.files[orig] {
					b, err := mntReadFile(filepath.Join(odir, name))
					if err != nil {
						t.Fatal(err)
					}
					if _, err := mntCheckContent(b, orig, name); err != nil {
						t.Fatalf("step %d view rank %d: %v", step, view, err)
					}
				}
			}
		}
	}
	for s := range int64(3) {
		check(s)
	}
	// A reader waiting in the view for step 3 gets it whole once it is
	// committed.
	got := make(chan error, 1)
	go func() {
		_, err := os.ReadDir(filepath.Join(mnt, "steps", "3", "rank-1", "rank-3"))
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	p.addN(t, 1)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	check(3)
	if _, err := os.Stat(filepath.Join(mnt, "steps", "0", "rank-2")); !os.IsNotExist(err) {
		t.Fatalf("rank-2 in a 2-rank view: %v, want ENOENT", err)
	}

	s, err := store.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "a heartbeat showing the view", func() bool {
		b, err := store.ReadAll(context.Background(), s, txn.ConsumerDir+"test-node.json")
		var hb txn.Heartbeat
		return err == nil && json.Unmarshal(b, &hb) == nil && hb.ViewRanks == 2
	})
	rep, err := txn.StreamStatus(context.Background(), l)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Consumers) != 1 || rep.Consumers[0].ViewRanks != 2 {
		t.Fatalf("status shows consumers %+v, want one with view_ranks 2", rep.Consumers)
	}
}

// TestMountFetchesOnlyOpenedRanks: with default flags (every rank shown)
// a node that reads one rank of every step fetches that rank's bytes and
// nothing of the others: bytes fetched / bytes served <= 1.05, and the
// prefetcher, which follows the opened rank, made most reads hits.
func TestMountFetchesOnlyOpenedRanks(t *testing.T) {
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 4, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 400<<10, 5)
	p.addN(t, 12)
	mnt, info := mntMountInProcess(t, mount.Options{Store: url, PrefetchSteps: 2})
	for step := range int64(12) {
		dir := filepath.Join(mnt, "steps", strconv.FormatInt(step, 10), "rank-2")
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			b, err := mntReadFile(path)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, path)
			_, err = mntCheckContent(b, 2, rel)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// Give a prefetch of steps the reader will never read time to show.
	time.Sleep(200 * time.Millisecond)
	st := info.Stats()
	ratio := float64(st.BytesFetched) / float64(st.BytesServed)
	t.Logf("rank 2 of 12 steps of 4 ranks: served %d bytes, fetched %d (%.3f), %d hits, %d misses",
		st.BytesServed, st.BytesFetched, ratio, st.Hits, st.Misses)
	if ratio > 1.05 {
		t.Fatalf("fetched %d bytes to serve %d (%.2fx): ranks nobody opened were fetched", st.BytesFetched, st.BytesServed, ratio)
	}
}
