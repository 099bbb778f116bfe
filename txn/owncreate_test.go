package txn_test

import (
	"context"
	"io"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// landedThenExists answers the first n log creates that succeed with
// ErrExists, as the S3 SDK does when it retries a PUT whose first attempt
// landed (the retry gets 412): our own create, reported as a lost race.
type landedThenExists struct {
	store.Store
	left atomic.Int64
}

func (s *landedThenExists) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	err := s.Store.Create(ctx, key, r, size)
	if err == nil && strings.HasPrefix(key, "_log/") && s.left.Add(-1) >= 0 {
		return store.ErrExists
	}
	return err
}

// TestCreateFoundOwnWrite (issue 43 item 13): a create that answers
// "exists" because an earlier attempt of the same create landed is the
// committer's own commit, not a lost race: OpenProducer registers once
// (epoch 1, not 2), and a TGB's commit is counted as created.
func TestCreateFoundOwnWrite(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	l, err := txn.Create(ctx, mem, txn.CreateOptions{Ranks: 1})
	if err != nil {
		t.Fatal(err)
	}
	s := &landedThenExists{Store: mem}
	s.left.Store(1)
	var created atomic.Int64
	p, err := txn.OpenProducer(ctx, &txn.Log{Store: s, Config: l.Config}, txn.ProducerOptions{ID: "p",
		Observe: func(cs txn.CommitStats) {
			if cs.Created {
				created.Add(1)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Epoch() != 1 {
		t.Fatalf("epoch %d after a register whose create was answered 'exists' though it landed; want 1 (registered once)", p.Epoch())
	}
	s.left.Store(1)
	pd, err := p.Append(ctx, txn.Batch{Name: "b0", Ranks: [][]txn.FileSource{{txn.BytesFile("f", []byte("x"))}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if created.Load() != 1 {
		t.Fatalf("%d versions counted as created by this producer; want 1 (its TGB's, whose create answered 'exists')", created.Load())
	}
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Version != 2 || len(st.Steps) != 1 {
		t.Fatalf("log at version %d with %d steps; want the register and one TGB", st.Version, len(st.Steps))
	}
}
