package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// TestMountCheckpointDir: checkpoints that trainers write into
// --checkpoint-dir are recorded in the manifest, each as the last stream
// step it covers.
func TestMountCheckpointDir(t *testing.T) {
	mntRequireFUSE(t)
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 1, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 4<<10, 1)
	p.addN(t, 10)
	ckpt := t.TempDir()
	mntMountInProcess(t, mount.Options{Store: url, CheckpointDir: ckpt})

	checkpoints := func() []int64 {
		st, err := l.Load(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return st.Checkpoints
	}
	// Megatron after 5 iterations: steps 0-4 are covered.
	iter := filepath.Join(ckpt, "iter_0000005", "mp_rank_00")
	if err := os.MkdirAll(iter, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(iter, "model_optim_rng.pt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ckpt, "latest_checkpointed_iteration.txt"), []byte("5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "checkpoint 4", func() bool { return slices.Equal(checkpoints(), []int64{4}) })
	// A Hugging Face checkpoint still being written is not recorded; once
	// trainer_state.json is there it is.
	hf := filepath.Join(ckpt, "checkpoint-8")
	if err := os.MkdirAll(hf, 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	if got := checkpoints(); !slices.Equal(got, []int64{4}) {
		t.Fatalf("incomplete checkpoint recorded: %v", got)
	}
	if err := os.WriteFile(filepath.Join(hf, "trainer_state.json"), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "checkpoint 7", func() bool { return slices.Equal(checkpoints(), []int64{4, 7}) })
}

// TestMountCheckpointPastHead: a checkpoint-like directory with a huge
// number (a timestamp) cannot be recorded; it no longer blocks the real
// checkpoints written after it: the highest recordable one is recorded
// (issue 32 item 13).
func TestMountCheckpointPastHead(t *testing.T) {
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 1, ChunkSize: 64 << 10, SnapshotEvery: 10})
	mntNewProducer(t, l, "p1", 4<<10, 1).addN(t, 10)
	ckpt := t.TempDir()
	for _, f := range []string{"snapshot_1733300000/.metadata", "checkpoint-5/trainer_state.json"} {
		if err := os.MkdirAll(filepath.Join(ckpt, filepath.Dir(f)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ckpt, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mntMountInProcess(t, mount.Options{Store: url, CheckpointDir: ckpt})
	waitFor(t, 10*time.Second, "checkpoint 4 recorded past the unrecordable one", func() bool {
		st, err := l.Load(t.Context())
		return err == nil && slices.Equal(st.Checkpoints, []int64{4})
	})
}
