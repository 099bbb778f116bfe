package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// TestMountReaddirDeletedPack: a step still in the view whose pack was
// just deleted (gc --grace 0s ahead of the mount's next refresh) lists as
// an error, never as an empty directory: READDIR used to answer ENOENT,
// which glibc's readdir() takes for the end of the directory, so ls, find
// and os.walk saw an empty step (issue 32 item 7).
func TestMountReaddirDeletedPack(t *testing.T) {
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 8<<10, 11)
	p.addN(t, 3)
	// The mount keeps its state: no refresh shows it the deletion.
	mnt, _ := mntMountInProcess(t, mount.Options{Store: url, PrefetchSteps: 0, IdlePollInterval: time.Hour, PollInterval: time.Hour})
	st, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []int64{1, 2} {
		tgb, ok := st.Step(step)
		if !ok {
			t.Fatalf("step %d not committed", step)
		}
		if err := l.Store.Delete(t.Context(), tgb.Object.Key); err != nil {
			t.Fatal(err)
		}
	}
	for _, dir := range []string{filepath.Join("steps", "1"), filepath.Join("steps", "2", "rank-0")} {
		ents, err := os.ReadDir(filepath.Join(mnt, dir))
		if !mntIsErrno(err, syscall.ESTALE) && !mntIsErrno(err, syscall.EIO) {
			t.Errorf("ReadDir %s of a deleted pack: %d entries, %v; want ESTALE or EIO", dir, len(ents), err)
		}
		// ls reads through glibc's readdir().
		out, err := exec.Command("ls", "-A", filepath.Join(mnt, dir)).CombinedOutput()
		if err == nil {
			t.Errorf("ls %s of a deleted pack: exit 0 with %q; want an error", dir, out)
		}
	}
	// Step 0's pack is there: it still lists.
	if ents, err := os.ReadDir(filepath.Join(mnt, "steps", "0", "rank-1")); err != nil || len(ents) == 0 {
		t.Errorf("steps/0/rank-1: %d entries, %v", len(ents), err)
	}
}
