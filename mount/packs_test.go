package mount

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// rangeCounter counts ranged GETs; while failing is set they fail.
type rangeCounter struct {
	store.Store
	gets    atomic.Int64
	failing atomic.Bool
}

func (c *rangeCounter) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	c.gets.Add(1)
	if c.failing.Load() {
		return nil, store.ErrNotFound
	}
	return c.Store.GetRange(ctx, key, off, n)
}

// TestPackLoader: concurrent readers of one rank share one fetch; the
// ranks after it are read ahead so a scan of one rank costs no round trip
// per step; a failed fetch is not kept; reclaimed steps are let go.
func TestPackLoader(t *testing.T) {
	ctx := t.Context()
	cs := &rangeCounter{Store: store.NewMem()}
	l, err := txn.Create(ctx, cs, txn.CreateOptions{Ranks: 4})
	if err != nil {
		t.Fatal(err)
	}
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p"}, txntest.Batches(40, func(int) txn.Batch {
		b := txn.Batch{}
		for r := range 4 {
			b.Ranks = append(b.Ranks, []txn.FileSource{txn.BytesFile("f", []byte{byte(r)})})
		}
		return b
	})...)
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pl := newPackLoader(l, st.Step, rankSpan{})

	cs.gets.Store(0)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			pk, err := pl.Pack(ctx, st.Steps[0], 2)
			if err != nil || len(pk.Files) != 1 {
				t.Errorf("pack %+v, err %v", pk, err)
			}
		})
	}
	wg.Wait()
	// Eight readers of step 0 rank 2: one GET (a small index is fetched
	// whole); plus the read-ahead of steps 1..16, one GET each.
	waitFor(t, func() bool { return cs.gets.Load() == 1+metaAhead })
	time.Sleep(20 * time.Millisecond)
	if g := cs.gets.Load(); g != 1+metaAhead {
		t.Fatalf("%d GETs for 8 readers of one rank and its read-ahead, want %d", g, 1+metaAhead)
	}
	// The read-ahead steps are in memory: they need no store at all.
	cs.failing.Store(true)
	for s := 1; s <= metaAhead; s++ {
		if _, err := pl.Pack(ctx, st.Steps[s], 2); err != nil {
			t.Fatalf("step %d, read ahead: %v", s, err)
		}
	}
	cs.failing.Store(false)
	time.Sleep(50 * time.Millisecond) // let the failed read-ahead walk end

	// A failure is returned, not kept.
	cs.failing.Store(true)
	if _, err := pl.Pack(ctx, st.Steps[39], 3); err == nil {
		t.Fatal("a failing store gave a pack")
	}
	cs.failing.Store(false)
	if pk, err := pl.Pack(ctx, st.Steps[39], 3); err != nil || pk.Files[0].Size != 1 {
		t.Fatalf("after the store recovered: %+v, %v", pk, err)
	}

	pl.forgetBelow(30)
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for n := range pl.steps {
		if n < 30 {
			t.Fatalf("step %d still held after reclaim below 30", n)
		}
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestPackLoaderSpan: a node showing ranks 8-15 of a 64-rank stream whose
// index is fetched in parts (over 64 KiB) reads a step's table and its 8
// ranks' sections in one GET, whichever rank is opened first; without
// --ranks it takes the table and a GET per section (9).
func TestPackLoaderSpan(t *testing.T) {
	ctx := t.Context()
	cs := &rangeCounter{Store: store.NewMem()}
	const ranks = 64
	l, err := txn.Create(ctx, cs, txn.CreateOptions{Ranks: ranks})
	if err != nil {
		t.Fatal(err)
	}
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p"}, txntest.Batches(2, func(int) txn.Batch {
		b := txn.Batch{Ranks: make([][]txn.FileSource, ranks)}
		for r := range b.Ranks {
			for f := range 24 {
				b.Ranks[r] = append(b.Ranks[r], txn.BytesFile(fmt.Sprintf("sample-%03d.bin", f), []byte{byte(r), byte(f)}))
			}
		}
		return b
	})...)
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		span rankSpan
		want int64
	}{
		{nodeSpan([]int{8, 9, 10, 11, 12, 13, 14, 15}, 0, ranks), 1},
		{nodeSpan([]int{1}, 8, ranks), 1}, // view rank 1 of 8: stream ranks 8-15
		{rankSpan{}, 1 + 8},
	} {
		// Step 1 is the head: no read-ahead after it.
		pl := newPackLoader(l, st.Step, c.span)
		cs.gets.Store(0)
		for _, r := range []int{12, 8, 15, 9, 10, 11, 13, 14} {
			pk, err := pl.Pack(ctx, st.Steps[1], r)
			if err != nil || len(pk.Files) != 24 || pk.Files[0].Size != 2 {
				t.Fatalf("span %+v, rank %d: %+v, %v", c.span, r, pk, err)
			}
		}
		if g := cs.gets.Load(); g != c.want {
			t.Errorf("span %+v: %d GETs for a step's 8 ranks, want %d", c.span, g, c.want)
		}
	}
}

// TestNodeSpan: the stream ranks behind --ranks and --view-ranks.
func TestNodeSpan(t *testing.T) {
	for _, c := range []struct {
		ranks        []int
		view, stream int
		span         rankSpan
	}{
		{nil, 0, 64, rankSpan{}},
		{[]int{3}, 0, 64, rankSpan{3, 3, true}},
		{[]int{15, 8, 9}, 0, 64, rankSpan{8, 15, true}},
		{[]int{0, 63}, 0, 64, rankSpan{0, 63, true}},
		{[]int{1, 2}, 16, 64, rankSpan{4, 11, true}},
	} {
		if got := nodeSpan(c.ranks, c.view, c.stream); got != c.span {
			t.Errorf("nodeSpan(%v, view %d, %d ranks) = %+v, want %+v", c.ranks, c.view, c.stream, got, c.span)
		}
	}
}
