package txn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/store"
)

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// rangeCounter counts ranged GETs and the bytes they return.
type rangeCounter struct {
	store.Store
	gets, bytes atomic.Int64
}

func (c *rangeCounter) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	b, err := c.Store.GetRange(ctx, key, off, n)
	c.gets.Add(1)
	c.bytes.Add(int64(len(b)))
	return b, err
}

func objTestLog(t testing.TB, ranks int, chunk int64) (*Log, *rangeCounter) {
	t.Helper()
	s := &rangeCounter{Store: store.NewMem()}
	l, err := Create(t.Context(), s, CreateOptions{Ranks: ranks, ChunkSize: chunk})
	if err != nil {
		t.Fatal(err)
	}
	return l, s
}

func objFile(r, f, size int) FileSource {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r*31 + f*7 + i)
	}
	return BytesFile(fmt.Sprintf("d%d/f%02d.bin", f%3, f), b)
}

// commitOne appends b through a real producer and returns its TGB and the
// version record's bytes.
func commitOne(t testing.TB, l *Log, b Batch) (*TGB, []byte) {
	t.Helper()
	ctx := t.Context()
	p, err := OpenProducer(ctx, l, ProducerOptions{ID: "p", Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	pd, err := p.Append(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	step, err := pd.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tgb, _ := st.Step(step)
	rec, err := store.ReadAll(ctx, l.Store, VersionKey(st.Version))
	if err != nil {
		t.Fatal(err)
	}
	return tgb, rec
}

// TestObjectRoundTrip: every rank's files (empty ones, multi-chunk ones,
// nested names) and the shared files come back from the one object with
// their bytes, through Pack (one region) and Packs (all), for a small
// index (fetched whole) and a large one (table, then one section).
func TestObjectRoundTrip(t *testing.T) {
	for _, c := range []struct {
		name          string
		ranks, files  int
		size          int
		shared, small bool
	}{
		{"small index with shared", 3, 4, 9000, true, true},
		{"small index, empty files, no shared", 2, 3, 0, false, true},
		{"large index", 256, 16, 40, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, counter := objTestLog(t, c.ranks, 4096)
			want := map[string][]byte{}
			b := Batch{Name: "b1"}
			for r := range c.ranks {
				var fs []FileSource
				for f := range c.files {
					fs = append(fs, objFile(r, f, c.size+r+f))
					want[fmt.Sprintf("%d/%s", r, fs[f].Name)] = objContent(t, fs[f])
				}
				b.Ranks = append(b.Ranks, fs)
			}
			if c.shared {
				b.Shared = []FileSource{BytesFile("meta.json", []byte(`{"shared":true}`))}
				want["-1/meta.json"] = []byte(`{"shared":true}`)
			}
			tgb, _ := commitOne(t, l, b)
			if small := tgb.Object.Size-tgb.Object.Data <= smallIndex; small != c.small {
				t.Fatalf("index of %d bytes: small %v, want %v", tgb.Object.Size-tgb.Object.Data, small, c.small)
			}
			check := func(r int, p *Pack) {
				t.Helper()
				data, err := l.Store.GetRange(t.Context(), p.Key, p.Off, p.Size)
				if err != nil {
					t.Fatal(err)
				}
				if err := VerifyPack(p, data, l.Config.ChunkSize); err != nil {
					t.Fatal(err)
				}
				for _, f := range p.Files {
					k := fmt.Sprintf("%d/%s", r, f.Name)
					if !bytes.Equal(data[f.Off:f.Off+f.Size], want[k]) {
						t.Fatalf("%s: bytes differ", k)
					}
					delete(want, k)
				}
			}
			counter.gets.Store(0)
			counter.bytes.Store(0)
			last := c.ranks - 1
			p, err := l.Pack(t.Context(), tgb, last)
			if err != nil {
				t.Fatal(err)
			}
			// One region costs one GET for a small index, two for a large
			// one, and never the whole index of a large one.
			wantGets := int64(1)
			if !c.small {
				wantGets = 2
			}
			if g, n := counter.gets.Load(), counter.bytes.Load(); g != wantGets || (!c.small && n > (tgb.Object.Size-tgb.Object.Data)/8) {
				t.Fatalf("Pack of one rank: %d GETs, %d bytes of a %d-byte index; want %d GETs", g, n, tgb.Object.Size-tgb.Object.Data, wantGets)
			}
			ranks, shared, err := l.Packs(t.Context(), tgb)
			if err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(ranks[last]) != fmt.Sprint(p) {
				t.Fatalf("Pack and Packs disagree on rank %d", last)
			}
			for r, p := range ranks {
				check(r, p)
			}
			if (shared != nil) != c.shared {
				t.Fatalf("shared pack %v, want one: %v", shared, c.shared)
			}
			if shared != nil {
				check(-1, shared)
			}
			if len(want) != 0 {
				t.Fatalf("%d files not found in the object", len(want))
			}
		})
	}
}

func objContent(t *testing.T, f FileSource) []byte {
	t.Helper()
	rc, err := f.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(rc); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestLogRecordBounded: a step of 1,024 ranks x 16 files costs the log
// (its version record and its share of a snapshot) the same few hundred
// bytes as a step of one rank and one file.
func TestLogRecordBounded(t *testing.T) {
	for _, c := range []struct{ ranks, files int }{{1, 1}, {1024, 16}} {
		l, _ := objTestLog(t, c.ranks, 1<<20)
		b := Batch{Name: "batch-000001", Cursor: "batch-000001"}
		for r := range c.ranks {
			var fs []FileSource
			for f := range c.files {
				fs = append(fs, objFile(r, f, 8))
			}
			b.Ranks = append(b.Ranks, fs)
		}
		tgb, rec := commitOne(t, l, b)
		snap := len(encode(tgb))
		t.Logf("%d ranks x %d files: version record %d bytes, snapshot share %d bytes, object %d bytes (index %d)",
			c.ranks, c.files, len(rec), snap, tgb.Object.Size, tgb.Object.Size-tgb.Object.Data)
		if len(rec) > 4096 || snap > 4096 {
			t.Fatalf("%d ranks x %d files: record %d bytes, snapshot share %d; want <= 4 KiB", c.ranks, c.files, len(rec), snap)
		}
	}
}

// objIndex is an object's index taken apart, for tests that break it.
type objIndex struct {
	data   []byte // [0, Data)
	secs   [][]byte
	tb     table
	footer []byte // [Footer, Size)
}

func splitObject(t *testing.T, l *Log, tgb *TGB) *objIndex {
	t.Helper()
	b, err := store.ReadAll(t.Context(), l.Store, tgb.Object.Key)
	if err != nil {
		t.Fatal(err)
	}
	o := tgb.Object
	ix := &objIndex{data: b[:o.Data]}
	var err2 error
	if ix.tb, err2 = decodeTable(b[o.Table:o.tableEnd()]); err2 != nil {
		t.Fatal(err2)
	}
	ix.footer = b[o.tableEnd():]
	for _, e := range append(ix.tb.Ranks, *ix.tb.Shared) {
		ix.secs = append(ix.secs, b[e.Sec:e.Sec+e.Len])
	}
	return ix
}

// write stores the index (CRCs recomputed unless keepCRC) under the TGB's
// key and returns a TGB reference to it, as a log record would hold.
func (ix *objIndex) write(t *testing.T, l *Log, tgb *TGB, keepCRC bool) *TGB {
	t.Helper()
	var buf bytes.Buffer
	buf.Write(ix.data)
	es := append([]entry(nil), ix.tb.Ranks...)
	if ix.tb.Shared != nil {
		es = append(es, *ix.tb.Shared)
	}
	for i, s := range ix.secs {
		if i < len(es) {
			es[i].Sec, es[i].Len = int64(buf.Len()), int64(len(s))
			if !keepCRC {
				es[i].CRC = CRC32C(s)
			}
		}
		buf.Write(s)
	}
	tb := table{Ranks: es[:len(ix.tb.Ranks)]}
	if ix.tb.Shared != nil {
		tb.Shared = &es[len(es)-1]
	}
	tableOff := int64(buf.Len())
	tbBytes := tb.encode()
	buf.Write(tbBytes)
	footer := int64(buf.Len())
	buf.Write(ix.footer) // readers of the index never look at it
	if err := store.PutBytes(t.Context(), l.Store, tgb.Object.Key, buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	c := *tgb
	c.Object = &Object{Key: tgb.Object.Key, Size: int64(buf.Len()), Data: int64(len(ix.data)), Table: tableOff, TableCRC: CRC32C(tbBytes), Footer: footer}
	return &c
}

// rewriteTable edits the table of c's object in place, with its CRC (in
// the returned reference) made right, so only the edit is wrong.
func rewriteTable(t *testing.T, l *Log, c *TGB, edit func(*table)) *TGB {
	t.Helper()
	b, err := store.ReadAll(t.Context(), l.Store, c.Object.Key)
	if err != nil {
		t.Fatal(err)
	}
	tb, err := decodeTable(b[c.Object.Table:c.Object.tableEnd()])
	if err != nil {
		t.Fatal(err)
	}
	footer := slices.Clone(b[c.Object.tableEnd():])
	edit(&tb)
	tbb := tb.encode()
	b = append(b[:c.Object.Table], tbb...)
	c.Object.Footer = int64(len(b))
	b = append(b, footer...)
	if err := store.PutBytes(t.Context(), l.Store, c.Object.Key, b); err != nil {
		t.Fatal(err)
	}
	c.Object.Size, c.Object.TableCRC = int64(len(b)), CRC32C(tbb)
	return c
}

// TestCorruptIndex: a damaged or hostile index is ErrCorrupt naming the
// object, for the region asked for, before anything of a hostile size is
// allocated; a reader never gets a file outside its region.
func TestCorruptIndex(t *testing.T) {
	l, _ := objTestLog(t, 2, 4096)
	b := Batch{Name: "b1", Shared: []FileSource{BytesFile("meta", []byte("m"))}}
	for r := range 2 {
		b.Ranks = append(b.Ranks, []FileSource{objFile(r, 0, 5000), objFile(r, 1, 10)})
	}
	good, _ := commitOne(t, l, b)
	pristine, err := store.ReadAll(t.Context(), l.Store, good.Object.Key)
	if err != nil {
		t.Fatal(err)
	}
	editSection := func(ix *objIndex, r int, mut func(s *section)) {
		var s section
		if err := json.Unmarshal(ix.secs[r], &s); err != nil {
			t.Fatal(err)
		}
		mut(&s)
		ix.secs[r] = encode(&s)
	}
	cases := []struct {
		name string
		rank int
		mut  func(ix *objIndex) *TGB // nil result: write with fresh CRCs
		want string
	}{
		{"flipped section byte", 1, func(ix *objIndex) *TGB {
			ix.secs[1][5] ^= 1
			return ix.write(t, l, good, true)
		}, "section of region 1: CRC32C"},
		{"table CRC", 0, func(ix *objIndex) *TGB {
			c := ix.write(t, l, good, false)
			c.Object.TableCRC ^= 1
			return c
		}, "table CRC32C"},
		{"dotdot name", 0, func(ix *objIndex) *TGB {
			editSection(ix, 0, func(s *section) { s.Files[0].Name = "../../etc/passwd" })
			return nil
		}, `".." element`},
		{"absolute name", 0, func(ix *objIndex) *TGB {
			editSection(ix, 0, func(s *section) { s.Files[0].Name = "/etc/passwd" })
			return nil
		}, "not a clean relative path"},
		{"NUL in name", 0, func(ix *objIndex) *TGB {
			editSection(ix, 0, func(s *section) { s.Files[0].Name = "a\x00b" })
			return nil
		}, "NUL"},
		{"file larger than its region", 1, func(ix *objIndex) *TGB {
			editSection(ix, 1, func(s *section) { s.Files[1].Size = 1 << 40 })
			return nil
		}, "does not follow offset"},
		{"chunk CRCs missing", 0, func(ix *objIndex) *TGB {
			editSection(ix, 0, func(s *section) { s.Chunks = s.Chunks[:1] })
			return nil
		}, "chunk CRCs"},
		{"a rank missing", 0, func(ix *objIndex) *TGB {
			ix.tb.Ranks = ix.tb.Ranks[:1]
			ix.secs = append(ix.secs[:1], ix.secs[2])
			return nil
		}, "1 ranks, stream has 2"},
		{"region outside the data", 1, func(ix *objIndex) *TGB {
			return rewriteTable(t, l, ix.write(t, l, good, false), func(tb *table) { tb.Ranks[1].Size = 1 << 40 })
		}, "region 1"},
		{"section of 1 GB", 0, func(ix *objIndex) *TGB {
			return rewriteTable(t, l, ix.write(t, l, good, false), func(tb *table) { tb.Ranks[0].Len = 1 << 30 })
		}, "section 0"},
		{"truncated object", 0, func(ix *objIndex) *TGB {
			if err := store.PutBytes(t.Context(), l.Store, good.Object.Key, pristine[:good.Object.tableEnd()-3]); err != nil {
				t.Fatal(err)
			}
			return good
		}, "shorter than the log says"},
		{"unknown field", 0, func(ix *objIndex) *TGB {
			ix.secs[0] = append(bytes.TrimSuffix(bytes.TrimSuffix(ix.secs[0], []byte("\n")), []byte("}")), []byte(`,"x":1}`+"\n")...)
			return nil
		}, "unknown field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ix := splitObject(t, l, good)
			tgb := c.mut(ix)
			if tgb == nil {
				tgb = ix.write(t, l, good, false)
			}
			defer func() {
				if err := store.PutBytes(context.Background(), l.Store, good.Object.Key, pristine); err != nil {
					t.Fatal(err)
				}
			}()
			p, err := l.Pack(t.Context(), tgb, c.rank)
			if err == nil {
				t.Fatalf("accepted %+v", p)
			}
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), good.Object.Key) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q: want ErrCorrupt naming %s and saying %q", err, good.Object.Key, c.want)
			}
		})
	}
	// And the pristine object still reads.
	if _, _, err := l.Packs(t.Context(), good); err != nil {
		t.Fatal(err)
	}
}

// FuzzIndex feeds arbitrary index bytes (sections and table) to the
// reader, with the table's CRC right so the decoder itself is reached.
// Whatever the input: no panic, every error is ErrCorrupt, and an
// accepted region lies inside the data, its files tile it with valid
// names, and it has one chunk CRC per chunk.
func FuzzIndex(f *testing.F) {
	l, err := Create(context.Background(), store.NewMem(), CreateOptions{Ranks: 2, ChunkSize: 4096})
	if err != nil {
		f.Fatal(err)
	}
	b := Batch{Name: "b1", Shared: []FileSource{BytesFile("meta", []byte("m"))}}
	for r := range 2 {
		b.Ranks = append(b.Ranks, []FileSource{objFile(r, 0, 5000), objFile(r, 1, 10)})
	}
	w, err := newObjectWriter(ObjectKey("p", 1, 1), b.Ranks, b.Shared, 4096, &announcement{Producer: "p", Epoch: 1, Seq: 1})
	if err != nil {
		f.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(w); err != nil {
		f.Fatal(err)
	}
	obj := buf.Bytes()
	f.Add(obj[w.data:], w.table-w.data)
	f.Add([]byte("{}\n"), int64(0))
	f.Add(append([]byte("LSTB\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), make([]byte, 32)...), int64(0))
	data := obj[:w.data]
	f.Fuzz(func(t *testing.T, index []byte, tableAt int64) {
		if tableAt < 0 || tableAt >= int64(len(index)) {
			return
		}
		s := store.NewMem()
		key := ObjectKey("p", 1, 1)
		whole := append(append([]byte(nil), data...), index...)
		if err := store.PutBytes(context.Background(), s, key, whole); err != nil {
			t.Fatal(err)
		}
		fl := &Log{Store: s, Config: l.Config}
		tgb := &TGB{Producer: "p", Epoch: 1, Seq: 1, Object: &Object{
			Key: key, Size: int64(len(whole)), Data: int64(len(data)), Table: int64(len(data)) + tableAt,
			TableCRC: CRC32C(index[tableAt:]),
		}}
		ranks, shared, err := fl.Packs(context.Background(), tgb)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if shared != nil {
			ranks = append(ranks, shared)
		}
		for _, p := range ranks {
			if p.Off < 0 || p.Size < 0 || p.Off+p.Size > int64(len(data)) {
				t.Fatalf("accepted region [%d,+%d) outside the %d data bytes", p.Off, p.Size, len(data))
			}
			var off int64
			for _, fl := range p.Files {
				if err := ValidateName(fl.Name); err != nil || fl.Off != off || fl.Size < 0 {
					t.Fatalf("accepted file %+v (err %v) at %d", fl, err, off)
				}
				off += fl.Size
			}
			if off != p.Size || int64(len(p.Chunks)) != (p.Size+4095)/4096 {
				t.Fatalf("accepted region of %d bytes with files ending at %d and %d chunks", p.Size, off, len(p.Chunks))
			}
		}
	})
}

// hugeStore serves a 1 GiB object (of zeros, never allocated) under one key.
type hugeStore struct {
	store.Store
	key string
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func (h *hugeStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key == h.key {
		return io.NopCloser(io.LimitReader(zeros{}, 1<<30)), nil
	}
	return h.Store.Get(ctx, key)
}

// TestHugeObjectsRefused: a 1 GiB version record, snapshot or stream
// config is refused as ErrCorrupt, naming it, after reading no more than
// its kind's bound (the test would need a GiB per object otherwise).
func TestHugeObjectsRefused(t *testing.T) {
	longtest.Skip(t, "reads each object kind's size bound of zeros")
	ctx := t.Context()
	mem := store.NewMem()
	l, err := Create(ctx, mem, CreateOptions{Ranks: 1})
	if err != nil {
		t.Fatal(err)
	}
	commitOne(t, l, Batch{Ranks: [][]FileSource{{BytesFile("x", []byte("x"))}}})
	for _, key := range []string{VersionKey(2), SnapshotKey(2), StreamKey, VersionKey(3)} {
		hs := &hugeStore{Store: mem, key: key}
		if key == SnapshotKey(2) {
			if err := store.PutBytes(ctx, mem, HintKey, []byte("2\n")); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if key == StreamKey {
			_, err = Open(ctx, hs)
		} else {
			_, err = (&Log{Store: hs, Config: l.Config}).Load(ctx)
		}
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), key) || !strings.Contains(err.Error(), "more than any writer makes") {
			t.Fatalf("%s of 1 GiB: error %v, want ErrCorrupt naming it", key, err)
		}
	}
}

// FuzzStreamConfig: whatever _stream.json holds, Open does not panic, and
// what it accepts is a config a stream can run with.
func FuzzStreamConfig(f *testing.F) {
	f.Add([]byte(`{"format":2,"stream_id":"b852877a8499f6b1","ranks":2,"first_step":0,"chunk_size":4096,"created_at":"2026-12-03T07:10:35Z","snapshot_every":5,"retain_checkpoints":1}`))
	f.Add([]byte(`{"format":2,"ranks":70000,"chunk_size":1,"snapshot_every":0}`))
	f.Add([]byte(`{"format":1}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := store.NewMem()
		if err := store.PutBytes(context.Background(), s, StreamKey, data); err != nil {
			t.Fatal(err)
		}
		l, err := Open(context.Background(), s)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		c := l.Config
		if c.readerVersion() > FormatVersion || c.Format < minFormat || c.Ranks < 1 || c.Ranks > MaxRanks || c.FirstStep < 0 || c.ChunkSize < 4096 || c.SnapshotEvery < 1 || c.RetainCheckpoints < 1 {
			t.Fatalf("accepted config %+v", c)
		}
	})
}

// FuzzSnapshot: whatever the hinted snapshot holds, Load does not panic,
// refuses it as ErrCorrupt, or yields a state with contiguous steps whose
// objects are their TGBs' own.
func FuzzSnapshot(f *testing.F) {
	ctx := context.Background()
	mem := store.NewMem()
	l, err := Create(ctx, mem, CreateOptions{Ranks: 2, SnapshotEvery: 3})
	if err != nil {
		f.Fatal(err)
	}
	p, err := OpenProducer(ctx, l, ProducerOptions{ID: "p", Logger: discardLogger()})
	if err != nil {
		f.Fatal(err)
	}
	for range 2 {
		pd, err := p.Append(ctx, Batch{Ranks: [][]FileSource{{BytesFile("a", []byte("a"))}, {BytesFile("b/c", []byte("bc"))}}})
		if err != nil {
			f.Fatal(err)
		}
		if _, err := pd.Wait(ctx); err != nil {
			f.Fatal(err)
		}
	}
	if err := p.Close(ctx); err != nil {
		f.Fatal(err)
	}
	snap, err := store.ReadAll(ctx, mem, SnapshotKey(3))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(snap)
	f.Add([]byte(`{"format":2,"version":3,"live_from":-5,"steps":[null]}`))
	f.Add([]byte(`{"format":2,"version":3,"config":{"ranks":2},"steps":[{"step":0,"producer":"x"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := store.NewMem()
		for _, k := range []string{StreamKey, HintKey} {
			b, _ := store.ReadAll(ctx, mem, k)
			if err := store.PutBytes(ctx, s, k, b); err != nil {
				t.Fatal(err)
			}
		}
		if err := store.PutBytes(ctx, s, SnapshotKey(3), data); err != nil {
			t.Fatal(err)
		}
		st, err := (&Log{Store: s, Config: l.Config}).Load(ctx)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		for i, tg := range st.Steps {
			if tg == nil || tg.Step != st.LiveFrom+int64(i) || tg.validateObject(&l.Config) != nil || st.Producers[tg.Producer] == nil {
				t.Fatalf("accepted step at %d: %+v", i, tg)
			}
		}
	})
}
