package mount

import (
	"context"
	"slices"
	"sync"

	"github.com/lakestream/lakestream/fs"
	"github.com/lakestream/lakestream/txn"
)

// packLoader hands out the packs (file lists) of the ranks this node
// reads, fetching each (step, rank) once from its TGB's index, however
// many readers and the prefetcher ask at the same time, and keeping it
// while the step is live. A rank nobody opens is never fetched, so the
// node's metadata follows the ranks it reads, not the ranks of the
// stream. A failed load is not kept: the next call tries again.
//
// A node showing a few adjacent ranks (--ranks) fetches each step's index
// as one span: the table and its ranks' sections in one GET
// (txn.ReadIndexSpan), whichever rank is asked for first.
//
// Lock order: mu only; no I/O under it.
type packLoader struct {
	log *txn.Log
	// step returns a live step's TGB (read-ahead only looks at those).
	step  func(n int64) (*txn.TGB, bool)
	ahead chan struct{} // semaphore of read-ahead loads
	span  rankSpan      // the stream ranks whose sections come with the table

	mu      sync.Mutex
	steps   map[int64]*stepPacks // GUARDED_BY(mu)
	walking map[int]bool         // GUARDED_BY(mu): ranks being read ahead
	// recent indexes (tables), so the ranks of one step read together
	// share one fetch of its table; a few steps' worth, no more.
	indexes []*stepPacks // GUARDED_BY(mu): stepPacks whose ix is set, oldest first
	guess   float64      // GUARDED_BY(mu): where span.lo's section started last
}

// rankSpan is the stream ranks lo..hi a node shows; ok is false when it
// shows every rank (no --ranks): its readers' ranks are not known ahead,
// so the table comes alone and each section asked for after it.
type rankSpan struct {
	lo, hi int
	ok     bool
}

// nodeSpan is the span of the stream ranks behind the shown ranks (ranks
// of the view when viewRanks > 0: view rank v holds stream ranks
// v*k..(v+1)*k-1, k = streamRanks/viewRanks).
func nodeSpan(ranks []int, viewRanks, streamRanks int) rankSpan {
	if len(ranks) == 0 || streamRanks <= 0 {
		return rankSpan{}
	}
	k := 1
	if viewRanks > 0 {
		k = streamRanks / viewRanks
	}
	lo, hi := slices.Min(ranks)*k, (slices.Max(ranks)+1)*k-1
	if lo < 0 || hi >= streamRanks {
		return rankSpan{}
	}
	return rankSpan{lo: lo, hi: hi, ok: true}
}

// Metadata read-ahead: loading rank r of step n (for a reader) also loads
// rank r of steps n+1..n+metaAhead in the background, at most metaLoads at
// a time, so that listing a rank step after step (find, a dataloader's
// directory scan) costs one round trip for many steps, not two per step.
const (
	metaAhead = 16
	metaLoads = 8
)

// stepPacks is what the loader holds of one step.
type stepPacks struct {
	tgb   *txn.TGB
	ranks map[int]*loading // GUARDED_BY(packLoader.mu); rank -1: shared files
	ix    *loading         // GUARDED_BY(packLoader.mu): the index, while recent
}

// loading is one fetch, shared by everyone who asks while it runs; done is
// closed when val or err is set.
type loading struct {
	done chan struct{}
	val  any
	err  error
}

// recentIndexes bounds the tables kept: twice the read-ahead window. A
// table holds about 60 B per rank (some 60 KiB for 1,024 ranks); one read
// in parts (txn.ReadIndexSpan past 1,024 ranks) only its parts' ranks.
const recentIndexes = 2 * metaAhead

func newPackLoader(l *txn.Log, step func(int64) (*txn.TGB, bool), span rankSpan) *packLoader {
	return &packLoader{log: l, step: step, ahead: make(chan struct{}, metaLoads), span: span, guess: txn.SpanGuessUnknown,
		steps: map[int64]*stepPacks{}, walking: map[int]bool{}}
}

// Pack returns rank r's pack of t (r < 0: the shared files; nil, nil when
// there are none).
func (pl *packLoader) Pack(ctx context.Context, t *txn.TGB, r int) (*txn.Pack, error) {
	pl.mu.Lock()
	sp := pl.steps[t.Step]
	if sp == nil || sp.tgb != t {
		sp = &stepPacks{tgb: t, ranks: map[int]*loading{}}
		pl.steps[t.Step] = sp
		pl.trimLocked(t.Step)
	}
	ld, found := sp.ranks[r]
	if !found {
		ld = &loading{done: make(chan struct{})}
		sp.ranks[r] = ld
	}
	pl.mu.Unlock()
	if !found {
		// The fetch outlives a caller that gives up: others may wait on it.
		go pl.load(context.WithoutCancel(ctx), sp, r, ld)
		pl.readAhead(context.WithoutCancel(ctx), t.Step, r)
	}
	select {
	case <-ld.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if ld.err != nil {
		return nil, ld.err
	}
	p, _ := ld.val.(*txn.Pack)
	return p, nil
}

func (pl *packLoader) load(ctx context.Context, sp *stepPacks, r int, ld *loading) {
	var p *txn.Pack
	ix, err := pl.index(ctx, sp)
	if err == nil {
		p, err = ix.Pack(ctx, pl.log.Store, r)
	}
	ld.val, ld.err = p, err
	if err != nil {
		pl.mu.Lock()
		if sp.ranks[r] == ld {
			delete(sp.ranks, r)
		}
		pl.mu.Unlock()
	}
	close(ld.done)
}

// readAhead loads rank r of the live steps after n that are not loaded or
// loading, in the background, at most metaLoads at a time across the
// node; one walker per rank at a time.
func (pl *packLoader) readAhead(ctx context.Context, n int64, r int) {
	pl.mu.Lock()
	if pl.walking[r] {
		pl.mu.Unlock()
		return
	}
	pl.walking[r] = true
	pl.mu.Unlock()
	go func() {
		defer func() {
			pl.mu.Lock()
			delete(pl.walking, r)
			pl.mu.Unlock()
		}()
		for s := n + 1; s <= n+metaAhead; s++ {
			t, ok := pl.step(s)
			if !ok {
				return
			}
			pl.mu.Lock()
			sp := pl.steps[s]
			if sp == nil || sp.tgb != t {
				sp = &stepPacks{tgb: t, ranks: map[int]*loading{}}
				pl.steps[s] = sp
			}
			_, found := sp.ranks[r]
			var ld *loading
			if !found {
				ld = &loading{done: make(chan struct{})}
				sp.ranks[r] = ld
			}
			pl.mu.Unlock()
			if found {
				continue
			}
			pl.ahead <- struct{}{}
			go func() {
				defer func() { <-pl.ahead }()
				pl.load(ctx, sp, r, ld)
			}()
		}
	}()
}

// index returns the step's table, fetched once for the ranks asked for
// together.
func (pl *packLoader) index(ctx context.Context, sp *stepPacks) (*txn.Index, error) {
	pl.mu.Lock()
	ld := sp.ix
	mine := ld == nil
	if mine {
		ld = &loading{done: make(chan struct{})}
		sp.ix = ld
	}
	pl.mu.Unlock()
	if mine {
		ix, err := pl.readIndex(ctx, sp.tgb)
		ld.val, ld.err = ix, err
		pl.mu.Lock()
		if err != nil {
			sp.ix = nil
		} else {
			pl.indexes = append(pl.indexes, sp)
			if over := len(pl.indexes) - recentIndexes; over > 0 {
				for _, old := range pl.indexes[:over] {
					old.ix = nil
				}
				pl.indexes = append([]*stepPacks(nil), pl.indexes[over:]...)
			}
		}
		pl.mu.Unlock()
		close(ld.done)
	}
	<-ld.done
	if ld.err != nil {
		return nil, ld.err
	}
	return ld.val.(*txn.Index), nil
}

// readIndex reads t's index: the node's span with it when known.
func (pl *packLoader) readIndex(ctx context.Context, t *txn.TGB) (*txn.Index, error) {
	if !pl.span.ok {
		return pl.log.ReadIndex(ctx, t)
	}
	pl.mu.Lock()
	guess := pl.guess
	pl.mu.Unlock()
	ix, next, err := pl.log.ReadIndexSpan(ctx, t, pl.span.lo, pl.span.hi, guess)
	if err == nil {
		pl.mu.Lock()
		pl.guess = next
		pl.mu.Unlock()
	}
	return ix, err
}

// trimLocked keeps the loader's memory a window: with more than
// 2*fs.StepWindow+metaAhead steps held, it drops those outside
// [n-StepWindow, n+StepWindow+metaAhead] (they are fetched again if asked
// for). A load in flight finishes for its waiters either way.
func (pl *packLoader) trimLocked(n int64) {
	if len(pl.steps) <= 2*fs.StepWindow+metaAhead {
		return
	}
	for s, sp := range pl.steps {
		if s < n-fs.StepWindow || s > n+fs.StepWindow+metaAhead {
			sp.ix = nil
			delete(pl.steps, s)
		}
	}
	pl.indexes = slices.DeleteFunc(pl.indexes, func(sp *stepPacks) bool { return pl.steps[sp.tgb.Step] != sp })
}

// forgetBelow drops what the loader holds of steps below live (reclaimed).
func (pl *packLoader) forgetBelow(live int64) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for n, sp := range pl.steps {
		if n < live {
			sp.ix = nil
			delete(pl.steps, n)
		}
	}
	pl.indexes = slices.DeleteFunc(pl.indexes, func(sp *stepPacks) bool { return sp.tgb.Step < live })
}
