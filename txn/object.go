package txn

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"

	"github.com/lakestream/lakestream/store"
)

// The index of a TGB object (format 2): a JSON section per region (its
// files and chunk CRCs, one line each, readable with a ranged GET and jq),
// then a binary table of fixed-size entries. Section CRCs are 8 lowercase
// hex digits and the table's entries fixed-width, so the index's size is
// known before the data is read, and the object can be streamed in one PUT
// whose length is declared up front.
const (
	// smallIndex: an index up to this size is fetched whole (one GET for
	// the table and every section); a larger one table first, then only
	// the sections asked for.
	smallIndex = 64 << 10
	// maxSection bounds one region's section (about 800,000 files): a
	// reader refuses a larger one before allocating it.
	maxSection = 64 << 20
	// The table is binary, little-endian: a 16-byte header (magic
	// "LSTB", the entry count, flags: bit 0 = the last entry is the shared
	// files'), then one 32-byte entry per region (offset, size, section
	// offset: uint64; section length, section CRC32C: uint32). Its size is
	// a function of the rank count, and a reader finds rank r's entry
	// without parsing the others.
	tableMagic  = "LSTB"
	tableHeader = 16
	entrySize   = 32
	flagShared  = 1
)

// hexCRC is a CRC32C written as exactly 8 lowercase hex digits.
type hexCRC uint32

func (c hexCRC) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, `"%08x"`, uint32(c)), nil
}

func (c *hexCRC) UnmarshalJSON(b []byte) error {
	if len(b) != 10 || b[0] != '"' || b[9] != '"' {
		return fmt.Errorf("CRC %s is not 8 hex digits", b)
	}
	v, err := strconv.ParseUint(string(b[1:9]), 16, 32)
	if err != nil {
		return fmt.Errorf("CRC %s is not 8 hex digits", b)
	}
	*c = hexCRC(v)
	return nil
}

// section is one region's file list and chunk CRCs; offsets count from the
// region's start.
type section struct {
	Files  []sectionFile `json:"files"`
	Chunks []hexCRC      `json:"chunks"`
}

type sectionFile struct {
	Name string `json:"name"`
	Off  int64  `json:"off"`
	Size int64  `json:"size"`
	CRC  hexCRC `json:"crc"`
}

// entry locates one region and its section in the object (absolute
// offsets).
type entry struct {
	Off  int64
	Size int64
	Sec  int64
	Len  int64
	CRC  uint32 // of the section's bytes
}

// table is the end of the object: where each region and its section are.
type table struct {
	Ranks  []entry
	Shared *entry
}

// tableSize is the size of a table of n regions.
func tableSize(n int) int64 { return tableHeader + int64(n)*entrySize }

func (t *table) encode() []byte {
	es := t.Ranks
	var flags uint32
	if t.Shared != nil {
		es = append(es[:len(es):len(es)], *t.Shared)
		flags |= flagShared
	}
	b := make([]byte, 0, tableSize(len(es)))
	b = append(b, tableMagic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(es)))
	b = binary.LittleEndian.AppendUint32(b, flags)
	b = binary.LittleEndian.AppendUint32(b, 0)
	for _, e := range es {
		b = binary.LittleEndian.AppendUint64(b, uint64(e.Off))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.Size))
		b = binary.LittleEndian.AppendUint64(b, uint64(e.Sec))
		b = binary.LittleEndian.AppendUint32(b, uint32(e.Len))
		b = binary.LittleEndian.AppendUint32(b, e.CRC)
	}
	return b
}

// decodeTable parses a table; values that do not fit an int64 are refused.
func decodeTable(b []byte) (table, error) {
	var t table
	if len(b) < tableHeader || string(b[:4]) != tableMagic {
		return t, errors.New("not a table (no LSTB header)")
	}
	n := binary.LittleEndian.Uint32(b[4:])
	flags := binary.LittleEndian.Uint32(b[8:])
	if flags&^flagShared != 0 || binary.LittleEndian.Uint32(b[12:]) != 0 {
		return t, fmt.Errorf("unknown table flags %#x", flags)
	}
	if int64(len(b)) != tableSize(int(n)) {
		return t, fmt.Errorf("%d bytes for %d entries", len(b), n)
	}
	es, err := decodeEntries(b[tableHeader:], 0)
	if err != nil {
		return t, err
	}
	t.Ranks = es
	if flags&flagShared != 0 {
		if n == 0 {
			return t, errors.New("shared flag without entries")
		}
		t.Ranks, t.Shared = es[:n-1], &es[n-1]
	}
	return t, nil
}

// decodeEntries parses consecutive table entries, the first of which is
// entry first of its table; values that do not fit an int64 are refused.
func decodeEntries(b []byte, first int) ([]entry, error) {
	es := make([]entry, len(b)/entrySize)
	for i := range es {
		p := b[i*entrySize:]
		off, size, sec := binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]), binary.LittleEndian.Uint64(p[16:])
		if off > math.MaxInt64 || size > math.MaxInt64 || sec > math.MaxInt64 {
			return nil, fmt.Errorf("entry %d out of range", first+i)
		}
		es[i] = entry{Off: int64(off), Size: int64(size), Sec: int64(sec), Len: int64(binary.LittleEndian.Uint32(p[24:])), CRC: binary.LittleEndian.Uint32(p[28:])}
	}
	return es, nil
}

func sectionOf(p *Pack) *section {
	s := &section{Files: make([]sectionFile, len(p.Files)), Chunks: make([]hexCRC, len(p.Chunks))}
	for i, f := range p.Files {
		s.Files[i] = sectionFile{Name: f.Name, Off: f.Off, Size: f.Size, CRC: hexCRC(f.CRC)}
	}
	for i, c := range p.Chunks {
		s.Chunks[i] = hexCRC(c)
	}
	return s
}

func (s *section) pack(key string, e entry) *Pack {
	p := &Pack{Key: key, Off: e.Off, Size: e.Size, Files: make([]File, len(s.Files)), Chunks: make([]uint32, len(s.Chunks))}
	for i, f := range s.Files {
		p.Files[i] = File{Name: f.Name, Off: f.Off, Size: f.Size, CRC: uint32(f.CRC)}
	}
	for i, c := range s.Chunks {
		p.Chunks[i] = uint32(c)
	}
	return p
}

// validateObject checks a TGB's object reference in a version record or
// snapshot: its key is a function of the TGB (no record can point at
// another step's data, which gc would delete under that step), and its
// parts are in order and of sane size.
func (t *TGB) validateObject(cfg *StreamConfig) error {
	o := t.Object
	if o == nil {
		return fmt.Errorf("step %d: no data object", t.Step)
	}
	if want := ObjectKey(t.Producer, t.Epoch, t.Seq); o.Key != want {
		return fmt.Errorf("step %d: object key %q, want %q", t.Step, o.Key, want)
	}
	if cfg.combining() != (o.Footer > 0) {
		return fmt.Errorf("step %d: object %s: footer at %d in a stream of writer version %d", t.Step, o.Key, o.Footer, cfg.writerVersion())
	}
	if o.Footer > 0 && (o.Footer > o.Size || o.Size-o.Footer > maxFooter) {
		return fmt.Errorf("step %d: object %s: footer at %d of %d bytes out of bounds", t.Step, o.Key, o.Footer, o.Size)
	}
	if n := o.tableEnd() - o.Table; o.Data < 0 || o.Table < o.Data || (n != tableSize(cfg.Ranks) && n != tableSize(cfg.Ranks+1)) {
		return fmt.Errorf("step %d: object %s: data %d, table %d, size %d out of order or out of bounds", t.Step, o.Key, o.Data, o.Table, o.Size)
	}
	if k := len(o.TableParts); k != 0 && k != tableParts(o.entries()) {
		return fmt.Errorf("step %d: object %s: %d table parts for %d entries, want %d", t.Step, o.Key, k, o.entries(), tableParts(o.entries()))
	}
	return nil
}

// objectWriter streams a TGB object: the regions one after the other, each
// checksummed by a packReader as its bytes go by, then the index, built
// once the last region's CRCs are known. Its size is fixed in advance
// (layout), so one PUT of declared length carries the whole TGB.
type objectWriter struct {
	key     string
	regions []*packReader // ranks, then shared
	shared  bool
	chunk   int64
	entries []entry // offsets and section lengths, from layout
	data    int64
	table   int64
	footer  int64         // where the self-description starts (0: none, format 2)
	desc    *announcement // nil: none
	size    int64

	i     int           // current region
	index *bytes.Reader // the index, once built
	packs []*Pack       // finished regions
}

// newObjectWriter lays out a TGB's object from its files' names and sizes,
// and checks them as a reader will, so that what reaches the store is valid
// before it is visible (a file that changes while it is read fails the
// stream before its last byte, and so the write). desc, if not nil, is the
// self-description to end the object with; its TableCRC is filled in.
func newObjectWriter(key string, ranks [][]FileSource, shared []FileSource, chunkSize int64, desc *announcement) (*objectWriter, error) {
	w := &objectWriter{key: key, chunk: chunkSize, shared: len(shared) > 0, desc: desc}
	sets := ranks
	if w.shared {
		sets = append(sets[:len(sets):len(sets)], shared)
	}
	var off int64
	for _, files := range sets {
		pr := newPackReader(key, files, chunkSize)
		w.regions = append(w.regions, pr)
		var size int64
		placeholder := &Pack{Key: key, Files: make([]File, len(files))}
		for j, f := range files {
			if f.Size < 0 {
				return nil, fmt.Errorf("%w: %s: negative size", ErrSource, f.Name)
			}
			placeholder.Files[j] = File{Name: f.Name, Off: size, Size: f.Size}
			size += f.Size
		}
		placeholder.Chunks = make([]uint32, (size+chunkSize-1)/chunkSize)
		placeholder.Size = size
		isShared := w.shared && len(w.regions) == len(sets)
		if err := validatePack(placeholder, chunkSize, isShared); err != nil {
			what := fmt.Sprintf("rank %d", len(w.regions)-1)
			if isShared {
				what = "shared files"
			}
			return nil, fmt.Errorf("%w: %s: %v", ErrSource, what, err)
		}
		sec, err := json.Marshal(sectionOf(placeholder))
		if err != nil {
			return nil, err
		}
		w.entries = append(w.entries, entry{Off: off, Size: size, Len: int64(len(sec)) + 1})
		off += size
	}
	w.data = off
	for i := range w.entries {
		w.entries[i].Sec = off
		off += w.entries[i].Len
	}
	w.table = off
	w.size = off + tableSize(len(w.entries))
	if desc != nil {
		desc.Data, desc.Table = w.data, w.table
		desc.TableParts = make([]hexCRC, tableParts(len(w.entries)))
		w.footer = w.size
		w.size += int64(len(desc.encodeFooter())) // CRCs are fixed-width
	}
	return w, nil
}

func (w *objectWriter) encodeTable() []byte {
	t := table{Ranks: w.entries}
	if w.shared {
		t.Ranks, t.Shared = w.entries[:len(w.entries)-1], &w.entries[len(w.entries)-1]
	}
	return t.encode()
}

func (w *objectWriter) Read(p []byte) (int, error) {
	for w.index == nil {
		if w.i == len(w.regions) {
			if err := w.buildIndex(); err != nil {
				return 0, err
			}
			break
		}
		n, err := w.regions[w.i].Read(p)
		if n > 0 || (err != nil && err != io.EOF) {
			return n, err
		}
		pk, err := w.regions[w.i].finish()
		if err != nil {
			return 0, err
		}
		w.packs = append(w.packs, pk)
		w.i++
	}
	return w.index.Read(p)
}

// buildIndex encodes the sections and the table now that every CRC is
// known. Their lengths must be the ones layout promised (CRCs are fixed
// width), or the declared object size would be a lie.
func (w *objectWriter) buildIndex() error {
	var buf bytes.Buffer
	for i, pk := range w.packs {
		sec := encode(sectionOf(pk))
		if int64(len(sec)) != w.entries[i].Len {
			return fmt.Errorf("internal: section %d is %d bytes, laid out as %d", i, len(sec), w.entries[i].Len)
		}
		w.entries[i].CRC = CRC32C(sec)
		buf.Write(sec)
	}
	tb := w.encodeTable()
	buf.Write(tb)
	if w.desc != nil {
		w.desc.TableCRC = hexCRC(CRC32C(tb))
		w.desc.TableParts = convertCRCs[hexCRC](partCRCs(tb))
		buf.Write(w.desc.encodeFooter())
	}
	if int64(buf.Len()) != w.size-w.data {
		return fmt.Errorf("internal: index is %d bytes, laid out as %d", buf.Len(), w.size-w.data)
	}
	w.index = bytes.NewReader(buf.Bytes())
	return nil
}

func (w *objectWriter) close() {
	for _, r := range w.regions {
		r.close()
	}
}

// finish returns the object's reference and its regions' packs (ranks, then
// shared or nil) once the store has taken every byte; like packReader, it
// reads on to EOF itself to close the last file and catch one that grew.
func (w *objectWriter) finish() (*Object, []*Pack, *Pack, error) {
	var one [1]byte
	for {
		n, err := w.Read(one[:])
		if n > 0 {
			return nil, nil, nil, fmt.Errorf("%w: object %s: input longer than declared", ErrSource, w.key)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, nil, nil, err
		}
	}
	for i, pk := range w.packs {
		pk.Off = w.entries[i].Off
	}
	tb := w.encodeTable()
	obj := &Object{Key: w.key, Size: w.size, Data: w.data, Table: w.table, TableCRC: CRC32C(tb), TableParts: partCRCs(tb), Footer: w.footer}
	ranks, shared := w.packs, (*Pack)(nil)
	if w.shared {
		ranks, shared = w.packs[:len(w.packs)-1], w.packs[len(w.packs)-1]
	}
	return obj, ranks, shared, nil
}

// uploadObject writes a TGB's files as its one data object: with Create
// (create-if-absent) when desc is set, the format 3 announcement, which
// must never replace anything; with Put for format 2.
func uploadObject(ctx context.Context, s store.Store, key string, ranks [][]FileSource, shared []FileSource, chunkSize int64, desc *announcement) (*Object, []*Pack, *Pack, error) {
	w, err := newObjectWriter(key, ranks, shared, chunkSize, desc)
	if err != nil {
		return nil, nil, nil, err
	}
	defer w.close()
	write := s.Put
	if desc != nil {
		write = s.Create
	}
	if err := write(ctx, key, w, w.size); err != nil {
		return nil, nil, nil, err
	}
	return w.finish()
}

// Index is what a reader knows of one TGB object after reading its table.
type Index struct {
	obj   *Object
	cfg   *StreamConfig
	table table
	// partial: table holds only the ranks from first on that some table
	// parts hold, and the shared files' entry when read with them
	// (readTableParts); a whole table's first is 0. hasShared: the TGB
	// has shared files (a partial table may not hold their entry).
	partial   bool
	first     int
	hasShared bool
	// raw holds the object's bytes from raw0 on, when fetched together
	// with the table (small indexes).
	raw  []byte
	raw0 int64
	// shared holds the shared files' section when a span read kept it
	// apart from raw (ReadIndexSpan).
	shared []byte
}

// ReadIndex fetches and checks a TGB's table (and, for a small index,
// every section with it).
func (l *Log) ReadIndex(ctx context.Context, t *TGB) (*Index, error) {
	o := t.Object
	if err := t.validateObject(&l.Config); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	from, end := o.Table, o.tableEnd()
	if end-o.Data <= smallIndex {
		from = o.Data
	}
	raw, err := getRange(ctx, l.Store, o.Key, from, end-from)
	if err != nil {
		return nil, err
	}
	return l.decodeIndex(t, raw, from)
}

// decodeIndex checks and decodes the table at the end of raw, the bytes
// [from, tableEnd) of t's object.
func (l *Log) decodeIndex(t *TGB, raw []byte, from int64) (*Index, error) {
	o := t.Object
	ix := &Index{obj: o, cfg: &l.Config, raw: raw, raw0: from}
	tb := raw[o.Table-from:]
	if got := CRC32C(tb); got != o.TableCRC {
		return nil, fmt.Errorf("%w: object %s: table CRC32C %08x, the log says %08x", ErrCorrupt, o.Key, got, o.TableCRC)
	}
	if len(o.TableParts) > 0 {
		// The parts must agree with the whole, or a node reading parts
		// would see another table than verify does.
		n := o.entries()
		for k, want := range o.TableParts {
			if err := checkPart(o, k, tb[partStart(k):partEnd(k, n)], want); err != nil {
				return nil, err
			}
		}
	}
	var err error
	if ix.table, err = decodeTable(tb); err != nil {
		return nil, fmt.Errorf("%w: object %s: table: %v", ErrCorrupt, o.Key, err)
	}
	if err := ix.validate(t.Step); err != nil {
		return nil, fmt.Errorf("%w: object %s: %v", ErrCorrupt, o.Key, err)
	}
	return ix, nil
}

// validate checks the table against the object: one entry per rank,
// regions tiling [0, Data) in order, sections tiling [Data, Table). Of a
// partial table it checks what it holds: its ranks' regions and sections
// follow one another within those bounds, starting at 0 and Data when
// they are the first ranks, and with the shared files' entry end at Data
// and Table.
func (ix *Index) validate(step int64) error {
	ranks, o := ix.table.Ranks, ix.obj
	if !ix.partial && len(ranks) != ix.cfg.Ranks {
		return fmt.Errorf("step %d: %d ranks, stream has %d", step, len(ranks), ix.cfg.Ranks)
	}
	off, sec := int64(0), o.Data
	if ix.first > 0 && len(ranks) > 0 {
		off, sec = ranks[0].Off, max(ranks[0].Sec, o.Data)
	}
	off, sec, err := ix.tile(ranks, ix.first, off, sec)
	if err != nil {
		return err
	}
	toEnd := ix.first+len(ranks) == ix.cfg.Ranks
	if sh := ix.table.Shared; sh != nil {
		if !toEnd {
			off, sec = sh.Off, max(sh.Sec, o.Data)
		}
		if off, sec, err = ix.tile([]entry{*sh}, -1, off, sec); err != nil {
			return err
		}
		toEnd = true
	} else if ix.hasShared {
		toEnd = false // the shared files' entry follows, not read
	}
	if toEnd && (off != o.Data || sec != o.Table) {
		return fmt.Errorf("regions end at %d and sections at %d, want %d and %d", off, sec, o.Data, o.Table)
	}
	return nil
}

// tile checks that es (region first on; -1: the shared files') follow one
// another from off and sec, within [0, Data) and [Data, Table), and
// returns where they end.
func (ix *Index) tile(es []entry, first int, off, sec int64) (int64, int64, error) {
	region := func(i int) string { // named only for an error: this loop runs per rank
		if first < 0 {
			return "of the shared files"
		}
		return strconv.Itoa(first + i)
	}
	for i, e := range es {
		if e.Off != off || e.Size < 0 || e.Size > ix.obj.Data-off {
			return 0, 0, fmt.Errorf("region %s at %d size %d does not follow offset %d", region(i), e.Off, e.Size, off)
		}
		if e.Sec != sec || e.Len < 2 || e.Len > maxSection || e.Len > ix.obj.Table-sec {
			return 0, 0, fmt.Errorf("section %s at %d length %d does not follow offset %d", region(i), e.Sec, e.Len, sec)
		}
		off += e.Size
		sec += e.Len
	}
	return off, sec, nil
}

// Pack returns rank r's region (r >= 0), or the shared files' (r < 0;
// nil, nil when the TGB has none), checked against its section's CRC and
// the same rules as the log.
func (ix *Index) Pack(ctx context.Context, s store.Store, r int) (*Pack, error) {
	var e entry
	switch {
	case r < 0 && ix.table.Shared == nil:
		return nil, nil
	case r < 0:
		e = *ix.table.Shared
	case r >= ix.cfg.Ranks:
		return nil, fmt.Errorf("object %s has no rank %d", ix.obj.Key, r)
	case r < ix.first || r >= ix.first+len(ix.table.Ranks):
		// A rank the parts read do not hold: read its part.
		part, err := readTableParts(ctx, s, ix.obj, ix.cfg, r/partEntries, r/partEntries, false)
		if err != nil {
			return nil, err
		}
		e = part.table.Ranks[r-part.first]
	default:
		e = ix.table.Ranks[r-ix.first]
	}
	var raw []byte
	if r < 0 && ix.shared != nil {
		raw = ix.shared
	} else if ix.raw != nil && e.Sec >= ix.raw0 && e.Sec+e.Len <= ix.raw0+int64(len(ix.raw)) {
		raw = ix.raw[e.Sec-ix.raw0 : e.Sec-ix.raw0+e.Len]
	} else {
		var err error
		if raw, err = getRange(ctx, s, ix.obj.Key, e.Sec, e.Len); err != nil {
			return nil, err
		}
	}
	if got := CRC32C(raw); got != e.CRC {
		return nil, fmt.Errorf("%w: object %s: section of region %d: CRC32C %08x, the table says %08x", ErrCorrupt, ix.obj.Key, r, got, e.CRC)
	}
	var sec section
	if err := strictDecode(raw, &sec); err != nil {
		return nil, fmt.Errorf("%w: object %s: section of region %d: %v", ErrCorrupt, ix.obj.Key, r, err)
	}
	p := sec.pack(ix.obj.Key, e)
	if err := validatePack(p, ix.cfg.ChunkSize, r < 0); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	return p, nil
}

// Pack returns rank r's pack (r >= 0) or the shared step-level files' (r <
// 0; nil, nil when the TGB has none) of a committed TGB: the table and the
// section of that region, fetched and checked. Nothing else of the TGB is
// read, so a node pays for the ranks it reads only.
func (l *Log) Pack(ctx context.Context, t *TGB, r int) (*Pack, error) {
	read := l.ReadIndex
	if o := t.Object; o != nil && len(o.TableParts) > 0 && r >= 0 && r < l.Config.Ranks {
		read = func(ctx context.Context, t *TGB) (*Index, error) {
			if err := t.validateObject(&l.Config); err != nil {
				return nil, fmt.Errorf("%w: %v", ErrCorrupt, err)
			}
			return l.readIndexParts(ctx, t, r, r)
		}
	}
	ix, err := read(ctx, t)
	if err != nil {
		return nil, err
	}
	return ix.Pack(ctx, l.Store, r)
}

// Packs returns every region of a TGB: its ranks' packs and the shared
// one (nil when none).
func (l *Log) Packs(ctx context.Context, t *TGB) ([]*Pack, *Pack, error) {
	ix, err := l.ReadIndex(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	if ix.raw0 > ix.obj.Data {
		// A large index: fetch the sections in one read rather than one
		// GET each.
		if ix.raw, err = getRange(ctx, l.Store, ix.obj.Key, ix.obj.Data, ix.obj.tableEnd()-ix.obj.Data); err != nil {
			return nil, nil, err
		}
		ix.raw0 = ix.obj.Data
	}
	ranks := make([]*Pack, len(ix.table.Ranks))
	for r := range ranks {
		if ranks[r], err = ix.Pack(ctx, l.Store, r); err != nil {
			return nil, nil, err
		}
	}
	shared, err := ix.Pack(ctx, l.Store, -1)
	if err != nil {
		return nil, nil, err
	}
	return ranks, shared, nil
}

func getRange(ctx context.Context, s store.Store, key string, off, n int64) ([]byte, error) {
	b, err := s.GetRange(ctx, key, off, n)
	if errors.Is(err, store.ErrRange) {
		return nil, fmt.Errorf("%w: object %s is shorter than the log says: %v", ErrCorrupt, key, err)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s [%d,+%d): %w", key, off, n, err)
	}
	return b, nil
}

// Bounds on what a reader reads of each kind of object, so that a hostile
// or damaged store cannot make it allocate without limit. Each is far above
// what a writer makes: a version holds at most DefaultMaxGroup TGBs of a
// few hundred bytes, a snapshot a live window of 100,000 steps is ~30 MB.
const (
	maxConfigBytes    = 64 << 10
	maxHintBytes      = 64
	maxHeartbeatBytes = 64 << 10
	maxRecordBytes    = 64 << 20
	maxSnapshotBytes  = 256 << 20
)

// readBounded reads a whole object of at most limit bytes; a larger one is
// ErrCorrupt, found without reading more than limit+1 bytes of it.
func readBounded(ctx context.Context, s store.Store, key string, limit int64) ([]byte, error) {
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%w: %s is over %d bytes, more than any writer makes", ErrCorrupt, key, limit)
	}
	return b, nil
}

// strictDecode parses exactly one JSON value followed by a newline.
func strictDecode(b []byte, x any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(x); err != nil {
		return err
	}
	if dec.More() || !bytes.HasSuffix(b, []byte("\n")) {
		return errors.New("trailing data")
	}
	return nil
}
