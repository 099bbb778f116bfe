package txn_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// limboStore fails this producer's log creates while logDown is set, and
// while hangData is set lets a data create land and then holds the call
// until its context ends (an Append interrupted with its upload landed).
type limboStore struct {
	store.Store
	logDown  atomic.Bool
	hangData atomic.Bool
	landed   chan struct{}
}

func (s *limboStore) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.HasPrefix(key, "_log/") && s.logDown.Load() {
		return fmt.Errorf("create %s: %w", key, store.ErrUnavailable)
	}
	err := s.Store.Create(ctx, key, r, size)
	if err == nil && strings.HasPrefix(key, "data/") && s.hangData.Load() {
		close(s.landed)
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

// TestLimboCommittedByAnother (issue 43 item 11): an Append interrupted
// after its upload landed leaves the TGB in limbo; another producer's
// committer commits it, and this one's committer applies that version;
// the Append of the same batch again gets a Pending that completes at
// once (before, the committer found nothing to build, never completed it
// and spun without sleeping).
func TestLimboCommittedByAnother(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	l, err := txn.Create(ctx, mem, txn.CreateOptions{Ranks: 1})
	if err != nil {
		t.Fatal(err)
	}
	as := &limboStore{Store: mem, landed: make(chan struct{})}
	a, err := txn.OpenProducer(ctx, &txn.Log{Store: as, Config: l.Config}, txn.ProducerOptions{ID: "a", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close(context.WithoutCancel(ctx))
	b, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "b", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.WithoutCancel(ctx))
	batch := func(name string) txn.Batch {
		return txn.Batch{Name: name, Ranks: [][]txn.FileSource{{txn.BytesFile("f", []byte(name))}}}
	}

	as.logDown.Store(true) // a's committer cannot commit: it retries
	x, err := a.Append(ctx, batch("x"))
	if err != nil {
		t.Fatal(err)
	}
	as.hangData.Store(true)
	actx, cancel := context.WithCancel(ctx)
	go func() { <-as.landed; cancel() }()
	if _, err := a.Append(actx, batch("y")); err == nil {
		t.Fatal("the interrupted Append succeeded")
	}
	as.hangData.Store(false)

	// b commits a's x and y with its own z; a's committer, retrying,
	// finds that version and applies it.
	z, err := b.Append(ctx, batch("z"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := z.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithTimeout(ctx, 30*time.Second)
	defer stop()
	if _, err := x.Wait(wctx); err != nil {
		t.Fatalf("a's x after b's commit: %v", err)
	}
	as.logDown.Store(false)
	if st := a.Status(); st.Version < 3 {
		t.Fatalf("a's committer at version %d; want b's commit applied", st.Version)
	}

	// y again: its limbo upload, committed by b, already in a's state.
	pd, err := a.Append(ctx, batch("y"))
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop = context.WithTimeout(ctx, 10*time.Second)
	defer stop()
	step, err := pd.Wait(wctx)
	if err != nil {
		t.Fatalf("the Pending of the limbo TGB committed by another: %v (it never completes)", err)
	}
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if tgb, ok := st.Step(step); !ok || tgb.Batch != "y" || tgb.Producer != "a" {
		t.Fatalf("step %d is %+v; want a's y", step, tgb)
	}
}
