package scale

import (
	"encoding/json"
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestPadIsWhatCommitsWrite: a log padded by writing records straight to
// the store loads (from the hinted snapshot) to the same state as reading
// every version from the first, which is the state the real commits of
// those records would have left.
func TestPadIsWhatCommitsWrite(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	l, err := txn.Create(ctx, mem, txn.CreateOptions{Ranks: 3})
	if err != nil {
		t.Fatal(err)
	}
	var row Row
	o := Options{Steps: 5, Files: 2, FileSize: 10}
	if err := produce(ctx, l, o, 3, &row, &countingStore{Store: mem}); err != nil {
		t.Fatal(err)
	}
	if err := pad(ctx, l, 250, 8); err != nil {
		t.Fatal(err)
	}
	fromSnapshot, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fromSnapshot.Version != 250 {
		t.Fatalf("padded to version %d, want 250", fromSnapshot.Version)
	}
	// Without the hint and snapshots a reader applies every version.
	if err := mem.Delete(ctx, txn.HintKey, txn.SnapshotKey(100), txn.SnapshotKey(200)); err != nil {
		t.Fatal(err)
	}
	fromStart, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(fromSnapshot)
	b, _ := json.Marshal(fromStart)
	if string(a) != string(b) {
		t.Fatalf("state from the padded snapshot differs from the versions applied:\n%s\n%s", a, b)
	}
	if head, _ := fromStart.Head(); len(fromStart.Steps) != 5 || len(fromStart.Checkpoints) != 1 || fromStart.Checkpoints[0] != head {
		t.Fatalf("padded state: %d live steps, checkpoints %v; want 5 and the head", len(fromStart.Steps), fromStart.Checkpoints)
	}
}
