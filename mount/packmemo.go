package mount

import (
	"context"
	"slices"
	"sync"

	"github.com/lakestream/lakestream/txn"
)

// packMemo keeps the step indexes this node has read (only its own ranks'
// packs), so that a step prefetched before the store became unreachable
// can still be opened and read from the cache while it is down. Failures
// are not kept. It holds at most max steps, dropping the lowest.
type packMemo struct {
	read  func(context.Context, *txn.TGB) ([]*txn.Pack, *txn.Pack, error)
	ranks []int // nil: all
	max   int

	mu    sync.Mutex
	steps map[*txn.TGB]memoEntry // GUARDED_BY(mu)
}

type memoEntry struct {
	ranks  []*txn.Pack // nil at ranks this node does not serve
	shared *txn.Pack
}

func newPackMemo(read func(context.Context, *txn.TGB) ([]*txn.Pack, *txn.Pack, error), ranks []int, max int) *packMemo {
	return &packMemo{read: read, ranks: ranks, max: max, steps: map[*txn.TGB]memoEntry{}}
}

// Packs is txn.Log.Packs through the memo.
func (p *packMemo) Packs(ctx context.Context, t *txn.TGB) ([]*txn.Pack, *txn.Pack, error) {
	p.mu.Lock()
	e, ok := p.steps[t]
	p.mu.Unlock()
	if ok {
		return e.ranks, e.shared, nil
	}
	ranks, shared, err := p.read(ctx, t)
	if err != nil {
		return nil, nil, err
	}
	if p.ranks != nil {
		kept := make([]*txn.Pack, len(ranks))
		for r, pk := range ranks {
			if slices.Contains(p.ranks, r) {
				kept[r] = pk
			}
		}
		ranks = kept
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.steps[t] = memoEntry{ranks: ranks, shared: shared}
	for len(p.steps) > p.max {
		var low *txn.TGB
		for k := range p.steps {
			if low == nil || k.Step < low.Step {
				low = k
			}
		}
		delete(p.steps, low)
	}
	return ranks, shared, nil
}
