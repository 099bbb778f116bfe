package txn

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/store"
)

// A table is 32 bytes a region, and its CRC32C in the log covers it whole:
// a node showing 8 of 10,000 ranks would read 320 KB of table a step to
// check the 256 bytes of its entries. So a table of more than partsFrom
// entries is also checked in parts of partEntries entries (32 KiB), and
// the log (and the object's self-description) holds each part's CRC32C
// beside the whole table's: Object.TableParts. A node reads the part
// holding its ranks' entries and the part holding the shared files' entry,
// side by side (readTableParts): for up to 1,024 adjacent ranks at most
// three parts (96 KiB) whatever the rank count.
// Whoever reads the whole table checks the parts against it too
// (decodeIndex). A node checks what it reads: its parts, part 0's header
// when it reads part 0, and that the entries it holds follow one another;
// the tiling of the whole table is checked by whoever reads it whole
// (verify). The object's layout does not change; its self-description
// gains the list. A record without parts (written before them) is read
// whole.
//
// Part k covers the table's bytes [partStart(k), partEnd(k, n)): entries
// k*partEntries up to (k+1)*partEntries, and part 0 the header too.
const (
	partEntries = 1024
	// partsFrom: up to 4 parts' worth of entries (128 KiB) the table is
	// read whole, so streams up to 4,096 ranks keep their records, and a
	// node reading parts always saves at least half the table.
	partsFrom = 4 * partEntries
)

// tableParts is how many parts a table of n entries is checked in: 0 when
// it is checked whole only.
func tableParts(n int) int {
	if n <= partsFrom {
		return 0
	}
	return (n + partEntries - 1) / partEntries
}

func partStart(k int) int64 {
	if k == 0 {
		return 0
	}
	return tableHeader + int64(k)*partEntries*entrySize
}

func partEnd(k, n int) int64 {
	return tableHeader + int64(min((k+1)*partEntries, n))*entrySize
}

// partCRCs returns the CRC32C of each part of the table tb, nil when it
// is checked whole only.
func partCRCs(tb []byte) []uint32 {
	n := int((int64(len(tb)) - tableHeader) / entrySize)
	k := tableParts(n)
	if k == 0 {
		return nil
	}
	crcs := make([]uint32, k)
	for i := range crcs {
		crcs[i] = CRC32C(tb[partStart(i):partEnd(i, n)])
	}
	return crcs
}

// entries is the number of entries of o's table (its size was checked by
// validateObject).
func (o *Object) entries() int {
	return int((o.tableEnd() - o.Table - tableHeader) / entrySize)
}

// same reports whether two references name the same object the same way.
func (o *Object) same(p *Object) bool {
	return o.Key == p.Key && o.Size == p.Size && o.Data == p.Data && o.Table == p.Table &&
		o.TableCRC == p.TableCRC && o.Footer == p.Footer && slices.Equal(o.TableParts, p.TableParts)
}

func checkPart(o *Object, k int, b []byte, want uint32) error {
	if got := CRC32C(b); got != want {
		return fmt.Errorf("%w: object %s: table part %d CRC32C %08x, the log says %08x", ErrCorrupt, o.Key, k, got, want)
	}
	return nil
}

// readTableParts reads parts lo..hi of o's table and, when withShared and
// the TGB has shared files, the part holding their entry (in the same GET
// when it is the next one, else in a second GET beside the first), each
// checked against the log, and returns them as a partial Index of the
// ranks they hold.
func readTableParts(ctx context.Context, s store.Store, o *Object, cfg *StreamConfig, lo, hi int, withShared bool) (*Index, error) {
	n, last := o.entries(), len(o.TableParts)-1
	hasShared := n == cfg.Ranks+1
	if lo < 0 || hi < lo || hi > last {
		return nil, fmt.Errorf("table parts %d-%d of object %s, which has %d", lo, hi, o.Key, last+1)
	}
	withShared = withShared && hasShared
	if withShared && hi == last-1 {
		hi = last
	}
	var es, tail []entry
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		es, err = readParts(gctx, s, o, lo, hi, hasShared)
		return err
	})
	if withShared && hi < last {
		g.Go(func() (err error) {
			tail, err = readParts(gctx, s, o, last, last, hasShared)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	ix := &Index{obj: o, cfg: cfg, partial: true, first: lo * partEntries, hasShared: hasShared}
	ix.table.Ranks = es[:min(len(es), cfg.Ranks-ix.first)]
	if withShared {
		if hi < last {
			es = tail
		}
		ix.table.Shared = &es[len(es)-1]
	}
	if err := ix.validate(-1); err != nil {
		return nil, fmt.Errorf("%w: object %s: %v", ErrCorrupt, o.Key, err)
	}
	return ix, nil
}

// readParts fetches and checks parts lo..hi of o's table and returns
// their entries (part 0's header checked and skipped).
func readParts(ctx context.Context, s store.Store, o *Object, lo, hi int, hasShared bool) ([]entry, error) {
	n := o.entries()
	from, to := partStart(lo), partEnd(hi, n)
	raw, err := getRange(ctx, s, o.Key, o.Table+from, to-from)
	if err != nil {
		return nil, err
	}
	for k := lo; k <= hi; k++ {
		if err := checkPart(o, k, raw[partStart(k)-from:partEnd(k, n)-from], o.TableParts[k]); err != nil {
			return nil, err
		}
	}
	if lo == 0 {
		if err := checkHeader(raw, n, hasShared); err != nil {
			return nil, fmt.Errorf("%w: object %s: table: %v", ErrCorrupt, o.Key, err)
		}
		raw = raw[tableHeader:]
	}
	es, err := decodeEntries(raw, lo*partEntries)
	if err != nil {
		return nil, fmt.Errorf("%w: object %s: table: %v", ErrCorrupt, o.Key, err)
	}
	return es, nil
}

// checkHeader checks a table's header against the n entries its size
// says it has, and its shared flag against whether n counts the shared
// files' entry.
func checkHeader(b []byte, n int, hasShared bool) error {
	if string(b[:4]) != tableMagic {
		return fmt.Errorf("not a table (no %s header)", tableMagic)
	}
	if got := binary.LittleEndian.Uint32(b[4:]); int64(got) != int64(n) {
		return fmt.Errorf("header says %d entries, its size %d", got, n)
	}
	flags := binary.LittleEndian.Uint32(b[8:])
	if flags&^flagShared != 0 || binary.LittleEndian.Uint32(b[12:]) != 0 {
		return fmt.Errorf("unknown table flags %#x", flags)
	}
	if (flags&flagShared != 0) != hasShared {
		return fmt.Errorf("shared flag %v in a table of %d entries", flags&flagShared != 0, n)
	}
	return nil
}

// readIndexParts is ReadIndexSpan for an object whose table is checked in
// parts: the parts holding ranks lo..hi and the shared files' entry (side
// by side), then the sections of lo..hi and the shared files' (one GET
// when they are near each other, else two side by side). What a node
// reads of the index no longer grows with the stream's rank count.
func (l *Log) readIndexParts(ctx context.Context, t *TGB, lo, hi int) (*Index, error) {
	o := t.Object
	ix, err := readTableParts(ctx, l.Store, o, &l.Config, lo/partEntries, hi/partEntries, true)
	if err != nil {
		return nil, err
	}
	first, last := ix.table.Ranks[lo-ix.first], ix.table.Ranks[hi-ix.first]
	from, to := first.Sec, last.Sec+last.Len
	sh := ix.table.Shared
	if sh != nil && sh.Sec-to <= smallIndex {
		to, sh = sh.Sec+sh.Len, nil // one range holds both
	}
	if to-from > maxIndexSpan {
		return ix, nil // Pack fetches each section asked for
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		ix.raw, err = getRange(gctx, l.Store, o.Key, from, to-from)
		return err
	})
	if sh != nil {
		g.Go(func() (err error) {
			ix.shared, err = getRange(gctx, l.Store, o.Key, sh.Sec, sh.Len)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	ix.raw0 = from
	return ix, nil
}

// convertCRCs converts between the log's CRCs and the self-description's
// fixed-width hex ones; nil stays nil (no parts: the field is omitted).
func convertCRCs[To, From ~uint32](from []From) []To {
	if len(from) == 0 {
		return nil
	}
	to := make([]To, len(from))
	for i, c := range from {
		to[i] = To(c)
	}
	return to
}
