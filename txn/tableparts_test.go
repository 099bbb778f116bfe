package txn

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"slices"
	"testing"
)

// wholePacks reads ranks lo..hi and the shared files of tgb through the
// whole table.
func wholePacks(t *testing.T, l *Log, tgb *TGB, lo, hi int) ([]*Pack, *Pack) {
	t.Helper()
	ix, err := l.ReadIndex(t.Context(), tgb)
	if err != nil {
		t.Fatal(err)
	}
	var ps []*Pack
	for r := lo; r <= hi; r++ {
		p, err := ix.Pack(t.Context(), l.Store, r)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	sh, err := ix.Pack(t.Context(), l.Store, -1)
	if err != nil {
		t.Fatal(err)
	}
	return ps, sh
}

// partsStream commits one TGB of ranks x 2 small files and a shared file.
func partsStream(t *testing.T, ranks int) (*Log, *rangeCounter, *TGB) {
	t.Helper()
	l, c := objTestLog(t, ranks, 64<<10)
	b := spanBatch(ranks, 2, -1, 0)
	b.Shared = []FileSource{objFile(99, 1, 100)}
	tgb, _ := commitOne(t, l, b)
	return l, c, tgb
}

// TestTablePartsNodeReadsItsParts: a node of 8 ranks of a 5,000-rank
// stream reads the 32 KiB part holding its entries and the one holding
// the shared files' entry, not the 160 KB table, whichever ranks it shows
// (at a part's edge, next to the last part, in it; and with the shared
// entry alone in the last part); its packs are the whole table's; the log
// and the object's self-description carry the same part CRCs.
func TestTablePartsNodeReadsItsParts(t *testing.T) {
	for _, c := range []struct {
		ranks int
		spans []struct{ lo, hi, gets, parts int }
	}{
		{5000, []struct{ lo, hi, gets, parts int }{
			{0, 7, 4, 2},       // parts 0 and 4 side by side; the sections and the shared one apart
			{1020, 1027, 4, 3}, // parts 0-1 in one GET, part 4 beside it; sections as above
			{3070, 3077, 3, 3}, // parts 2-4 in one GET (3 is next to the last); sections as above
			{4992, 4999, 2, 1}, // part 4; the sections with the shared one after them
		}},
		{5120, []struct{ lo, hi, gets, parts int }{
			{0, 7, 4, 2},       // parts 0 and 5 (the shared entry alone)
			{5112, 5119, 2, 2}, // parts 4-5 in one GET; sections with the shared one
		}},
	} {
		l, cnt, tgb := partsStream(t, c.ranks)
		o := tgb.Object
		if got, want := len(o.TableParts), (c.ranks+1+partEntries-1)/partEntries; got != want {
			t.Fatalf("%d ranks: a table of %d entries has %d parts in the log, want %d", c.ranks, o.entries(), got, want)
		}
		announced, _, err := l.readAnnouncement(t.Context(), tgb.Producer, tgb.Epoch, tgb.Seq)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(announced.Object.TableParts, o.TableParts) {
			t.Fatalf("self-description's parts %08x, the log's %08x", announced.Object.TableParts, o.TableParts)
		}
		for _, s := range c.spans {
			gets, read0 := cnt.gets.Load(), cnt.bytes.Load()
			ix, _, err := l.ReadIndexSpan(t.Context(), tgb, s.lo, s.hi, SpanGuessUnknown)
			if err != nil {
				t.Fatalf("ranks %d-%d: %v", s.lo, s.hi, err)
			}
			var got []*Pack
			for r := s.lo; r <= s.hi; r++ {
				p, err := ix.Pack(t.Context(), l.Store, r)
				if err != nil {
					t.Fatalf("ranks %d-%d: rank %d: %v", s.lo, s.hi, r, err)
				}
				got = append(got, p)
			}
			sh, err := ix.Pack(t.Context(), l.Store, -1)
			if err != nil {
				t.Fatalf("ranks %d-%d: shared: %v", s.lo, s.hi, err)
			}
			n, read := cnt.gets.Load()-gets, cnt.bytes.Load()-read0
			wantRanks, wantShared := wholePacks(t, l, tgb, s.lo, s.hi)
			if !reflect.DeepEqual(got, wantRanks) || !reflect.DeepEqual(sh, wantShared) {
				t.Fatalf("%d ranks: ranks %d-%d through parts differ from the whole table's", c.ranks, s.lo, s.hi)
			}
			if n != int64(s.gets) {
				t.Errorf("%d ranks: ranks %d-%d: %d GETs, want %d", c.ranks, s.lo, s.hi, n, s.gets)
			}
			// Its parts, and its 8 sections and the shared one (a few
			// hundred bytes each), never the whole table.
			if limit := int64(s.parts)*partEntries*entrySize + 16<<10; read > limit {
				t.Errorf("%d ranks: ranks %d-%d: %d bytes of index read, want at most %d (the table is %d)", c.ranks, s.lo, s.hi, read, limit, tableSize(c.ranks+1))
			}
		}
	}
}

// TestTablePartsOtherRanks: a rank outside the parts a span read is read
// through its own part (not the shared one again), and Log.Pack of one
// rank reads its part too; both equal the whole table's.
func TestTablePartsOtherRanks(t *testing.T) {
	l, cnt, tgb := partsStream(t, 5000)
	ctx := t.Context()
	ix, _, err := l.ReadIndexSpan(ctx, tgb, 0, 7, SpanGuessUnknown)
	if err != nil {
		t.Fatal(err)
	}
	gets, read0 := cnt.gets.Load(), cnt.bytes.Load()
	p, err := ix.Pack(ctx, l.Store, 1500)
	if n, read := cnt.gets.Load()-gets, cnt.bytes.Load()-read0; n != 2 || read > partEntries*entrySize+4<<10 {
		t.Errorf("rank 1500 outside the parts read: %d GETs of %d bytes, want its part and its section", n, read)
	}
	if want, _ := wholePacks(t, l, tgb, 1500, 1500); err != nil || !reflect.DeepEqual(p, want[0]) {
		t.Fatalf("rank 1500 outside the parts read: %+v, %v", p, err)
	}
	p, err = l.Pack(ctx, tgb, 2500)
	if want, _ := wholePacks(t, l, tgb, 2500, 2500); err != nil || !reflect.DeepEqual(p, want[0]) {
		t.Fatalf("Log.Pack of rank 2500: %+v, %v", p, err)
	}
}

// TestTablePartsSmallTable: up to partsFrom entries the table is checked
// whole only: no parts in the log or the description, so streams of up to
// 4,096 ranks keep their records.
func TestTablePartsSmallTable(t *testing.T) {
	l, _ := objTestLog(t, partsFrom, 64<<10)
	tgb, rec := commitOne(t, l, spanBatch(partsFrom, 1, -1, 0))
	if tgb.Object.TableParts != nil || bytes.Contains(rec, []byte("table_parts")) {
		t.Fatalf("a table of %d entries has parts: %v", partsFrom, tgb.Object.TableParts)
	}
}

// relog returns tgb with a log record that vouches for the object's
// current bytes: table_crc and every part recomputed, as a producer that
// wrote damaged entries would have logged them.
func relog(t *testing.T, l *Log, tgb *TGB) *TGB {
	t.Helper()
	o := *tgb.Object
	tb, err := l.Store.GetRange(t.Context(), o.Key, o.Table, o.tableEnd()-o.Table)
	if err != nil {
		t.Fatal(err)
	}
	o.TableCRC, o.TableParts = CRC32C(tb), partCRCs(tb)
	c := *tgb
	c.Object = &o
	return &c
}

// TestTablePartsDamage: a part whose bytes differ from its CRC is refused
// by a node that reads it (ErrCorrupt), not by one reading another part;
// the whole-table read refuses it too; a log whose part CRCs disagree with
// a table that passes its whole CRC is refused by the whole read (a node
// and verify see one table), as is a record with the wrong number of
// parts. Entries a producer logged faithfully but that do not follow one
// another, or a header whose shared flag is wrong, are refused by the
// node that reads them.
func TestTablePartsDamage(t *testing.T) {
	l, _, tgb := partsStream(t, 5000)
	ctx := t.Context()
	o := tgb.Object
	pristine, err := l.Store.GetRange(ctx, o.Key, 0, o.Size)
	if err != nil {
		t.Fatal(err)
	}
	put := func(b []byte) {
		t.Helper()
		if err := l.Store.Put(ctx, o.Key, bytes.NewReader(b), int64(len(b))); err != nil {
			t.Fatal(err)
		}
	}
	entryAt := func(r int) int64 { return o.Table + tableHeader + int64(r)*entrySize }

	// Rank 1500's section CRC, in part 1.
	damaged := slices.Clone(pristine)
	damaged[entryAt(1500)+28] ^= 1
	put(damaged)
	if _, _, err := l.ReadIndexSpan(ctx, tgb, 2048, 2055, SpanGuessUnknown); err != nil {
		t.Fatalf("ranks 2048-2055 (parts 2 and 4 intact): %v", err)
	}
	if _, _, err := l.ReadIndexSpan(ctx, tgb, 1496, 1503, SpanGuessUnknown); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("ranks 1496-1503 in the damaged part: %v, want ErrCorrupt", err)
	}
	if _, err := l.ReadIndex(ctx, tgb); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("whole table with a damaged part: %v, want ErrCorrupt", err)
	}
	put(pristine)

	lying := *tgb
	obj := *o
	obj.TableParts = slices.Clone(o.TableParts)
	obj.TableParts[2] ^= 1
	lying.Object = &obj
	if _, err := l.ReadIndex(ctx, &lying); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("whole table under a log whose part 2 CRC is wrong: %v, want ErrCorrupt", err)
	}
	if _, _, err := l.ReadIndexSpan(ctx, &lying, 2400, 2407, SpanGuessUnknown); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("part 2 under a log whose CRC for it is wrong: %v, want ErrCorrupt", err)
	}
	obj.TableParts = obj.TableParts[:2]
	if _, err := l.ReadIndex(ctx, &lying); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a record with 2 parts for 5: %v, want ErrCorrupt", err)
	}

	// Rank 2050's region one byte later, logged as it is.
	damaged = slices.Clone(pristine)
	off := binary.LittleEndian.Uint64(damaged[entryAt(2050):])
	binary.LittleEndian.PutUint64(damaged[entryAt(2050):], off+1)
	put(damaged)
	if _, _, err := l.ReadIndexSpan(ctx, relog(t, l, tgb), 2048, 2055, SpanGuessUnknown); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("entries of part 2 that do not follow one another: %v, want ErrCorrupt", err)
	}
	// The header without its shared flag, logged as it is.
	damaged = slices.Clone(pristine)
	damaged[o.Table+8] &^= flagShared
	put(damaged)
	if _, _, err := l.ReadIndexSpan(ctx, relog(t, l, tgb), 0, 7, SpanGuessUnknown); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("part 0 whose header lacks the shared flag: %v, want ErrCorrupt", err)
	}
	put(pristine)
}

// BenchmarkIndexSpan10k: a node of ranks 0-7 reading one step's index in
// a 10,000-rank stream (mem://), through the parts and, side by side, the
// same object under a record without parts (the whole-table span read
// every node made before them). Prints index bytes read per step.
func BenchmarkIndexSpan10k(b *testing.B) {
	const ranks = 10000
	l, c := objTestLog(b, ranks, 64<<10)
	batch := spanBatch(ranks, 2, -1, 0)
	batch.Shared = []FileSource{objFile(99, 1, 100)}
	tgb, _ := commitOne(b, l, batch)
	whole := *tgb
	obj := *tgb.Object
	obj.TableParts = nil
	whole.Object = &obj
	for _, v := range []struct {
		name string
		tgb  *TGB
	}{{"whole", &whole}, {"parts", tgb}} {
		b.Run(v.name, func(b *testing.B) {
			read0 := c.bytes.Load()
			for b.Loop() {
				ix, _, err := l.ReadIndexSpan(b.Context(), v.tgb, 0, 7, SpanGuessUnknown)
				if err != nil {
					b.Fatal(err)
				}
				for r := -1; r < 8; r++ {
					if _, err := ix.Pack(b.Context(), l.Store, r); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(c.bytes.Load()-read0)/float64(b.N), "index-B/step")
		})
	}
}
