package txn

import (
	"bytes"
	"context"
	"fmt"
)

// A node reads a few adjacent ranks of each step. ReadIndexSpan gets what
// it needs of a step's index, the table and the sections of ranks lo..hi,
// in one ranged GET, without a layout change: sections are stored in rank
// order right before the table (docs/FORMAT.md), so one range from rank
// lo's section to the table's end holds both (and the sections of the
// ranks after hi, which cost bytes, not requests).
//
// Where lo's section starts is known only from a table. The caller passes
// where it started in a previous step's index (the guess ReadIndexSpan
// returned), as a fraction of the sections' bytes [Data, Table); the range
// starts a little before it. Steps of one stream look alike (the same
// files per rank), so the guess is usually right; when it falls short, a
// second GET fetches the sections asked for. Either way the bytes are
// checked as ReadIndex checks them. What is kept (for the steps a loader
// holds) is the sections of lo..hi and the shared files' section, not the
// span: the span's bytes are transfer, not memory.

// maxIndexSpan bounds the bytes one span GET may fetch. Past it (a node of
// low ranks in a stream with large sections) the table is fetched alone;
// then the sections of lo..hi come in one more GET when they fit under it
// together, and otherwise (wide) one by one, as readers ask for each rank
// (Index.Pack).
const maxIndexSpan = 4 << 20

// SpanGuessUnknown asks ReadIndexSpan to assume equal sections (the first
// step a node reads).
const SpanGuessUnknown = -1.0

// ReadIndexSpan fetches and checks t's table and the sections of ranks
// lo..hi (0 <= lo <= hi < Ranks), usually in one GET: Index.Pack of those
// ranks then fetches nothing. A table checked in parts (more than
// partsFrom entries) is read in parts instead: readIndexParts. It returns the guess for the next step's
// call. Ranks whose sections would exceed maxIndexSpan by themselves get
// the table alone, as ReadIndex does for a large index: Pack then fetches
// each section asked for (a node showing every rank reads few of them).
func (l *Log) ReadIndexSpan(ctx context.Context, t *TGB, lo, hi int, guess float64) (*Index, float64, error) {
	o := t.Object
	if err := t.validateObject(&l.Config); err != nil {
		return nil, guess, fmt.Errorf("%w: %v", ErrCorrupt, err)
	}
	ranks := l.Config.Ranks
	if lo < 0 || hi < lo || hi >= ranks {
		return nil, guess, fmt.Errorf("index span of ranks %d-%d in a stream of %d ranks", lo, hi, ranks)
	}
	if len(o.TableParts) > 0 {
		ix, err := l.readIndexParts(ctx, t, lo, hi)
		return ix, guess, err
	}
	from, wide := spanStart(o, lo, hi, ranks, guess)
	end := o.tableEnd()
	raw, err := getRange(ctx, l.Store, o.Key, from, end-from)
	if err != nil {
		return nil, guess, err
	}
	ix, err := l.decodeIndex(t, raw, from)
	if err != nil {
		return nil, guess, err
	}
	first, last := ix.table.Ranks[lo], ix.table.Ranks[hi]
	next := float64(first.Sec-o.Data) / float64(max(1, o.Table-o.Data))
	if wide {
		return ix, next, nil
	}
	if first.Sec >= from {
		ix.keep(first.Sec, last.Sec+last.Len)
		return ix, next, nil
	}
	// The guess fell short, or the span from it would have passed
	// maxIndexSpan and the table came alone (not wide: lo..hi's sections
	// fit under it together): fetch exactly the sections asked for, in one
	// more GET. The bytes already fetched past them are dropped; other
	// ranks' sections are fetched when asked for.
	secs, err := getRange(ctx, l.Store, o.Key, first.Sec, last.Sec+last.Len-first.Sec)
	if err != nil {
		return nil, guess, err
	}
	ix.raw, ix.raw0 = secs, first.Sec
	return ix, next, nil
}

// spanStart is where the span GET starts: the whole index when it is small
// (as ReadIndex does), the table alone when lo..hi's sections by
// themselves would be too large (wide) or the span would, else a little
// before where lo's section is guessed to be.
func spanStart(o *Object, lo, hi, ranks int, guess float64) (from int64, wide bool) {
	end, secs := o.tableEnd(), o.Table-o.Data
	if end-o.Data <= smallIndex {
		return o.Data, false
	}
	perRank := secs / int64(ranks)
	if perRank*int64(hi-lo+1) > maxIndexSpan {
		return o.Table, true
	}
	if guess < 0 || guess > 1 {
		guess = float64(lo) / float64(ranks)
	}
	// Slack: two average sections, so that a step whose earlier ranks
	// carry a few more files than the last one's still fits.
	from = o.Data + int64(guess*float64(secs)) - 2*perRank - 64
	from = max(o.Data, min(from, o.Table))
	if end-from > maxIndexSpan {
		return o.Table, false
	}
	return from, false
}

// keep trims what the index holds to the sections [from, to) (copied, so
// the span's buffer is let go) and the shared files' section, when raw
// holds them.
func (ix *Index) keep(from, to int64) {
	end := ix.raw0 + int64(len(ix.raw))
	if sh := ix.table.Shared; sh != nil && sh.Sec >= ix.raw0 && sh.Sec+sh.Len <= end {
		ix.shared = bytes.Clone(ix.raw[sh.Sec-ix.raw0 : sh.Sec+sh.Len-ix.raw0])
	}
	if from >= ix.raw0 && to <= end {
		ix.raw, ix.raw0 = bytes.Clone(ix.raw[from-ix.raw0:to-ix.raw0]), from
	}
}
