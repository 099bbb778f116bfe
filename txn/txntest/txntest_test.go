package txntest_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

func batch(i int) txn.Batch {
	return txn.Batch{Name: fmt.Sprintf("b%d", i), Ranks: [][]txn.FileSource{{txn.BytesFile("f", []byte{byte(i)})}}}
}

// TestCommitOneVersionEach: Commit's batches land as consecutive steps,
// each in a version of its own; Pipeline's land after them; Produce's
// producer is closed, so a reopened one resumes after its last batch.
func TestCommitOneVersionEach(t *testing.T) {
	l, err := txn.Create(t.Context(), store.NewMem(), txn.CreateOptions{Ranks: 1})
	if err != nil {
		t.Fatal(err)
	}
	steps := txntest.Produce(t, l, txn.ProducerOptions{ID: "p"}, txntest.Batches(5, batch)...)
	if !slices.Equal(steps, []int64{0, 1, 2, 3, 4}) {
		t.Fatalf("Produce steps %v", steps)
	}
	st, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != 6 { // register + one per batch
		t.Fatalf("version %d after 5 committed batches, want 6", st.Version)
	}
	p := txntest.Open(t, l, txn.ProducerOptions{ID: "p"})
	if r := p.Resume(); r.Seq != 5 {
		t.Fatalf("reopened producer resumes at seq %d, want 5", r.Seq)
	}
	if last := txntest.Pipeline(t, p, txntest.Batches(10, batch)...); last != 14 {
		t.Fatalf("Pipeline's last step %d, want 14", last)
	}
}
