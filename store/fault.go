package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"
)

// Op names one Store method, for selecting faults per operation.
type Op int

const (
	OpGet Op = iota
	OpGetRange
	OpStat
	OpPut
	OpCreate
	OpList
	OpDelete
	numOps
)

var opNames = [numOps]string{"get", "get-range", "stat", "put", "create", "list", "delete"}

func (o Op) String() string { return opNames[o] }

// ErrInjected is the error a Faulty store returns for an injected fault.
var ErrInjected = errors.New("injected fault")

// Fault says what a Faulty store does to one operation.
type Fault struct {
	// ErrRate is the probability that the call fails before reaching the
	// store.
	ErrRate float64
	// LostRate is the probability that the call is applied to the store but
	// the caller gets ErrInjected: a response lost after success. Only
	// meaningful for Put, Create and Delete.
	LostRate float64
	// Latency is added before every call (honouring the context).
	Latency time.Duration
}

// Faulty wraps a Store and injects errors, lost responses and latency, per
// operation. It is for tests and benchmarks (--store-latency).
type Faulty struct {
	Store

	mu     sync.Mutex
	rng    *rand.Rand    // GUARDED_BY(mu)
	faults [numOps]Fault // GUARDED_BY(mu)
	counts [numOps]int64 // GUARDED_BY(mu): injected faults per op
	calls  [numOps]int64 // GUARDED_BY(mu): calls per op, faulted or not
}

// NewFaulty wraps s; seed makes the fault sequence repeatable.
func NewFaulty(s Store, seed uint64) *Faulty {
	return &Faulty{Store: s, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Unwrap returns the wrapped store.
func (f *Faulty) Unwrap() Store { return f.Store }

// Set configures the fault for the given operations (all when none given).
func (f *Faulty) Set(fault Fault, ops ...Op) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(ops) == 0 {
		for i := range f.faults {
			f.faults[i] = fault
		}
		return
	}
	for _, op := range ops {
		f.faults[op] = fault
	}
}

// Injected returns how many faults (errors and lost responses) were
// injected into op so far.
func (f *Faulty) Injected(op Op) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[op]
}

// Calls returns how many calls of op were made so far (a tail read counts
// as OpGetRange), faulted or not: benchmarks count store requests by kind
// with it.
func (f *Faulty) Calls(op Op) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

// before sleeps the configured latency and decides the call's fate.
func (f *Faulty) before(ctx context.Context, op Op, key string) (lose bool, err error) {
	f.mu.Lock()
	f.calls[op]++
	ft := f.faults[op]
	fail := ft.ErrRate > 0 && f.rng.Float64() < ft.ErrRate
	lose = !fail && ft.LostRate > 0 && f.rng.Float64() < ft.LostRate
	if fail || lose {
		f.counts[op]++
	}
	f.mu.Unlock()
	if ft.Latency > 0 {
		t := time.NewTimer(ft.Latency)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return false, fmt.Errorf("%s %s: %w", op, key, ctx.Err())
		}
	}
	if fail {
		return false, fmt.Errorf("%s %s: %w", op, key, ErrInjected)
	}
	return lose, nil
}

func (f *Faulty) after(op Op, key string, lose bool, err error) error {
	if err == nil && lose {
		return fmt.Errorf("%s %s: response lost: %w", op, key, ErrInjected)
	}
	return err
}

func (f *Faulty) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if _, err := f.before(ctx, OpGet, key); err != nil {
		return nil, err
	}
	return f.Store.Get(ctx, key)
}

func (f *Faulty) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if _, err := f.before(ctx, OpGetRange, key); err != nil {
		return nil, err
	}
	return f.Store.GetRange(ctx, key, off, n)
}

// GetTail forwards TailGetter (one request, as the wrapped store makes it)
// with OpGetRange's faults.
func (f *Faulty) GetTail(ctx context.Context, key string, n int64) ([]byte, int64, error) {
	if _, err := f.before(ctx, OpGetRange, key); err != nil {
		return nil, 0, err
	}
	return GetTail(ctx, f.Store, key, n)
}

func (f *Faulty) Stat(ctx context.Context, key string) (Info, error) {
	if _, err := f.before(ctx, OpStat, key); err != nil {
		return Info{}, err
	}
	return f.Store.Stat(ctx, key)
}

func (f *Faulty) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	lose, err := f.before(ctx, OpPut, key)
	if err != nil {
		return err
	}
	return f.after(OpPut, key, lose, f.Store.Put(ctx, key, r, size))
}

func (f *Faulty) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	lose, err := f.before(ctx, OpCreate, key)
	if err != nil {
		return err
	}
	return f.after(OpCreate, key, lose, f.Store.Create(ctx, key, r, size))
}

func (f *Faulty) List(ctx context.Context, prefix, after string, limit int) ([]Info, bool, error) {
	if _, err := f.before(ctx, OpList, prefix); err != nil {
		return nil, false, err
	}
	return f.Store.List(ctx, prefix, after, limit)
}

// Walk lists in one pass where the wrapped store can (one list call),
// else page by page through f.List, so a wrapped store keeps its cost.
func (f *Faulty) Walk(ctx context.Context, prefix, after string, fn func(Info) error) error {
	w, ok := f.Store.(Walker)
	if !ok {
		return walkPages(ctx, f, prefix, after, fn)
	}
	if _, err := f.before(ctx, OpList, prefix); err != nil {
		return err
	}
	return w.Walk(ctx, prefix, after, fn)
}

func (f *Faulty) Delete(ctx context.Context, keys ...string) error {
	key := ""
	if len(keys) > 0 {
		key = keys[0]
	}
	lose, err := f.before(ctx, OpDelete, key)
	if err != nil {
		return err
	}
	return f.after(OpDelete, key, lose, f.Store.Delete(ctx, keys...))
}
