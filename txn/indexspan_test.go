package txn

import (
	"context"
	"os"
	"reflect"
	"testing"

	"github.com/lakestream/lakestream/store"
)

// spanBatch is a batch of ranks x files small files, with extra files in
// rank bigRank (to make one section larger than the others).
func spanBatch(ranks, files, bigRank, extra int) Batch {
	b := Batch{Ranks: make([][]FileSource, ranks)}
	for r := range b.Ranks {
		n := files
		if r == bigRank {
			n += extra
		}
		for f := range n {
			b.Ranks[r] = append(b.Ranks[r], objFile(r, f, 8))
		}
	}
	return b
}

// checkSpan reads t's span of lo..hi and checks that every rank of it
// comes back as Log.Pack returns it, and how many GETs that took.
func checkSpan(t *testing.T, l *Log, c *rangeCounter, tgb *TGB, lo, hi int, guess float64, wantGets int64) float64 {
	t.Helper()
	ctx := t.Context()
	before := c.gets.Load()
	ix, next, err := l.ReadIndexSpan(ctx, tgb, lo, hi, guess)
	if err != nil {
		t.Fatalf("span %d-%d: %v", lo, hi, err)
	}
	got := make([]*Pack, 0, hi-lo+1)
	for r := lo; r <= hi; r++ {
		p, err := ix.Pack(ctx, l.Store, r)
		if err != nil {
			t.Fatalf("span %d-%d, rank %d: %v", lo, hi, r, err)
		}
		got = append(got, p)
	}
	if n := c.gets.Load() - before; n != wantGets {
		t.Errorf("span %d-%d (guess %.3f): %d GETs for the table and %d sections, want %d", lo, hi, guess, n, hi-lo+1, wantGets)
	}
	for i, p := range got {
		want, err := l.Pack(ctx, tgb, lo+i)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(p, want) {
			t.Fatalf("span %d-%d, rank %d: %+v, want %+v", lo, hi, lo+i, p, want)
		}
	}
	return next
}

// TestIndexSpanOneGET: a node's table and its adjacent ranks' sections
// come in one ranged GET, with the same packs as reading them one by one,
// at the stream's edges (rank 0, rank R-1) and in the middle; a wrong
// guess costs one more GET, never a wrong pack; the guess returned makes
// the next step's read one GET again.
func TestIndexSpanOneGET(t *testing.T) {
	const ranks = 64
	l, c := objTestLog(t, ranks, 64<<10)
	tgb, _ := commitOne(t, l, spanBatch(ranks, 24, -1, 0))
	if n := tgb.Object.tableEnd() - tgb.Object.Data; n <= smallIndex {
		t.Fatalf("index of %d bytes is fetched whole anyway; the test needs a larger one", n)
	}
	for _, s := range [][2]int{{0, 0}, {0, 7}, {8, 15}, {30, 33}, {56, 63}, {63, 63}} {
		checkSpan(t, l, c, tgb, s[0], s[1], SpanGuessUnknown, 1)
	}
	// A guess past rank 8's section: the span misses it, and a second GET
	// fetches exactly ranks 8-15's sections.
	checkSpan(t, l, c, tgb, 8, 15, 0.9, 2)

	// Rank 7 grows by a whole section's worth of files: the slack (two
	// average sections) covers it, still one GET.
	next := checkSpan(t, l, c, tgb, 8, 15, SpanGuessUnknown, 1)
	tgb2, _ := commitOne(t, l, spanBatch(ranks, 24, 7, 24))
	next = checkSpan(t, l, c, tgb2, 8, 15, next, 1)
	// Ranks 0-7 shrink to one file each: rank 8's section moves earlier
	// than the old guess, which falls short once, costing one GET more;
	// the guess it returns is right for the step after.
	b := spanBatch(ranks, 24, -1, 0)
	for r := range 8 {
		b.Ranks[r] = b.Ranks[r][:1]
	}
	tgb3, _ := commitOne(t, l, b)
	next = checkSpan(t, l, c, tgb3, 8, 15, next, 2)
	tgb4, _ := commitOne(t, l, b)
	checkSpan(t, l, c, tgb4, 8, 15, next, 1)

	// Shared (step-level) files: their section, right before the table,
	// comes with the span too (a step directory lists them first).
	b = spanBatch(ranks, 24, -1, 0)
	b.Shared = []FileSource{objFile(99, 1, 100), objFile(99, 2, 5)}
	tgb5, _ := commitOne(t, l, b)
	before := c.gets.Load()
	ix, _, err := l.ReadIndexSpan(t.Context(), tgb5, 8, 15, SpanGuessUnknown)
	if err != nil {
		t.Fatal(err)
	}
	sh, err := ix.Pack(t.Context(), l.Store, -1)
	if err != nil || sh == nil || len(sh.Files) != 2 {
		t.Fatalf("shared files through the span: %+v, %v", sh, err)
	}
	if n := c.gets.Load() - before; n != 1 {
		t.Fatalf("table, 8 sections and the shared files' section: %d GETs, want 1", n)
	}
	if want, _ := l.Pack(t.Context(), tgb5, -1); !reflect.DeepEqual(sh, want) {
		t.Fatalf("shared files through the span: %+v, want %+v", sh, want)
	}
}

// TestIndexSpanWide: ranks whose sections alone exceed maxIndexSpan (a
// node showing every rank of a large stream) get the table alone, then a
// GET per rank asked for, as ReadIndex: the span never fetches every
// section for a node that reads a few.
func TestIndexSpanWide(t *testing.T) {
	const ranks = 1024
	l, c := objTestLog(t, ranks, 64<<10)
	tgb, _ := commitOne(t, l, spanBatch(ranks, 80, -1, 0))
	if n := tgb.Object.Table - tgb.Object.Data; n <= maxIndexSpan {
		t.Fatalf("sections of %d bytes; the test needs more than %d", n, maxIndexSpan)
	}
	ctx := t.Context()
	before, bytes0 := c.gets.Load(), c.bytes.Load()
	ix, _, err := l.ReadIndexSpan(ctx, tgb, 0, ranks-1, SpanGuessUnknown)
	if err != nil {
		t.Fatal(err)
	}
	if n, b := c.gets.Load()-before, c.bytes.Load()-bytes0; n != 1 || b != tableSize(ranks) {
		t.Fatalf("a wide span: %d GETs of %d bytes, want the table alone (1 GET, %d bytes)", n, b, tableSize(ranks))
	}
	for _, r := range []int{0, 511, ranks - 1} {
		p, err := ix.Pack(ctx, l.Store, r)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := l.Pack(ctx, tgb, r)
		if !reflect.DeepEqual(p, want) {
			t.Fatalf("rank %d: %+v, want %+v", r, p, want)
		}
	}
	// The last 8 ranks of the same large stream: one GET.
	checkSpan(t, l, c, tgb, ranks-8, ranks-1, SpanGuessUnknown, 1)
}

// TestIndexSpanFormat2: format 2 objects end with the table (no
// self-description after it); the span reads them right, to the object's
// end, for every rank range of the committed testdata stream and of a
// format 2 step whose index is read as a span.
func TestIndexSpanFormat2(t *testing.T) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/format2")); err != nil {
		t.Fatal(err)
	}
	fs, err := store.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := &rangeCounter{Store: fs}
	l, err := Open(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Steps) == 0 || st.Steps[0].Object.Footer != 0 {
		t.Fatal("the format 2 testdata has no steps without a footer")
	}
	// This build writes format 2 objects into it; one with an index
	// larger than smallIndex (read in a span, not whole) and shared files.
	b := spanBatch(l.Config.Ranks, 600, -1, 0)
	b.Shared = []FileSource{objFile(9, 9, 10)}
	big, _ := commitOne(t, l, b)
	if big.Object.Footer != 0 || big.Object.Size-big.Object.Data <= smallIndex {
		t.Fatalf("format 2 step: footer %d, index %d bytes; want no footer and more than %d", big.Object.Footer, big.Object.Size-big.Object.Data, smallIndex)
	}
	if st, err = l.Load(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, tgb := range st.Steps {
		for lo := range l.Config.Ranks {
			for hi := lo; hi < l.Config.Ranks; hi++ {
				checkSpan(t, l, c, tgb, lo, hi, SpanGuessUnknown, 1)
			}
		}
	}
}
