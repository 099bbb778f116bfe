package txn_test

import (
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

func TestSmoke(t *testing.T) {
	ctx := t.Context()
	s := store.NewMem()
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: 2, SnapshotEvery: 3})
	if err != nil {
		t.Fatal(err)
	}
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "p1"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		pd, err := p.Append(ctx, txn.Batch{Name: "b", Cursor: "c", Ranks: [][]txn.FileSource{
			{txn.BytesFile("a.bin", []byte("hello")), txn.BytesFile("d/b.bin", []byte("x"))},
			{txn.BytesFile("a.bin", []byte("world"))},
		}})
		if err != nil {
			t.Fatal(err)
		}
		step, err := pd.Wait(ctx)
		if err != nil || step != int64(i) {
			t.Fatalf("step %d err %v", step, err)
		}
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h, ok := st.Head()
	t.Logf("version %d head %d %v", st.Version, h, ok)
}
