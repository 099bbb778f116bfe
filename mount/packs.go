package mount

import (
	"context"
	"slices"
	"sync"

	"github.com/lakestream/lakestream/txn"
)

// packLoader hands out the packs (file lists) of the ranks this node
// reads, fetching each (step, rank) once from its TGB's index, however
// many readers and the prefetcher ask at the same time, and keeping it
// while the step is live. A rank nobody opens is never fetched, so the
// node's metadata follows the ranks it reads, not the ranks of the
// stream. A failed load is not kept: the next call tries again.
//
// Lock order: mu only; no I/O under it.
type packLoader struct {
	log *txn.Log

	mu    sync.Mutex
	steps map[int64]*stepPacks // GUARDED_BY(mu)
	// recent indexes (tables), so the ranks of one step read together
	// share one fetch of its table; a few steps' worth, no more.
	indexes []*stepPacks // GUARDED_BY(mu): stepPacks whose ix is set, oldest first
}

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

// recentIndexes bounds the tables kept: 8 steps x (1,024 ranks x ~50 B).
const recentIndexes = 8

func newPackLoader(l *txn.Log) *packLoader {
	return &packLoader{log: l, steps: map[int64]*stepPacks{}}
}

// Pack returns rank r's pack of t (r < 0: the shared files; nil, nil when
// there are none).
func (pl *packLoader) Pack(ctx context.Context, t *txn.TGB, r int) (*txn.Pack, error) {
	pl.mu.Lock()
	sp := pl.steps[t.Step]
	if sp == nil || sp.tgb != t {
		sp = &stepPacks{tgb: t, ranks: map[int]*loading{}}
		pl.steps[t.Step] = sp
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
		ix, err := pl.log.ReadIndex(ctx, sp.tgb)
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
