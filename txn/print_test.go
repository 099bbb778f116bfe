package txn_test

import (
	"encoding/json"
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestBatchPrints: each committed batch's print is kept in its producer's
// state (and in snapshots), equals the print of the same files staged
// again, and differs for a batch with one byte changed; a state from a
// snapshot without prints still finds the newer batches' prints.
func TestBatchPrints(t *testing.T) {
	ctx := t.Context()
	l := newLog(t, store.NewMem(), txn.CreateOptions{Ranks: 2, ChunkSize: 4096, SnapshotEvery: 4})
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "a", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 6; seq++ {
		txnCommit(t, p, batchFor("a", seq, 2))
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := l.Load(ctx) // from the snapshot at version 4, then versions 5-7
	if err != nil {
		t.Fatal(err)
	}
	ps := st.Producers["a"]
	if len(ps.Prints) != len(ps.Recent) || len(ps.Recent) != 6 {
		t.Fatalf("%d prints for %d recent batches; want 6 each", len(ps.Prints), len(ps.Recent))
	}
	for seq := uint64(1); seq <= 6; seq++ {
		b := batchFor("a", seq, 2)
		want, ok := ps.PrintOf(b.Name)
		if !ok {
			t.Fatalf("no print for %s", b.Name)
		}
		got, err := l.PrintBatch(ctx, b)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("%s staged again prints %+v; committed %+v", b.Name, got, want)
		}
	}
	// One byte changed, same sizes and names: another print.
	b := batchFor("a", 3, 2)
	changed := payload("a", 3, 1, 1)
	changed[len(changed)/2] ^= 1
	b.Ranks[1][1] = txn.BytesFile("sub/y.bin", changed)
	got, err := l.PrintBatch(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := ps.PrintOf(b.Name); got == want {
		t.Errorf("a batch with one byte changed has the committed batch's print %+v", got)
	}
	// A snapshot from before prints existed: the prints it lacks are the
	// oldest; the newer ones still belong to the right names.
	raw, err := json.Marshal(ps)
	if err != nil {
		t.Fatal(err)
	}
	var old txn.ProducerState
	if err := json.Unmarshal(raw, &old); err != nil {
		t.Fatal(err)
	}
	old.Prints = old.Prints[4:]
	if _, ok := old.PrintOf("b000004"); ok {
		t.Error("a print found for a batch whose print was never recorded")
	}
	if pr, ok := old.PrintOf("b000006"); !ok || pr != ps.Prints[5] {
		t.Errorf("print of b000006 = %+v, %v; want %+v", pr, ok, ps.Prints[5])
	}
}
