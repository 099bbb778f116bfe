// Package txntest is what tests that write a stream repeat: open a
// producer, commit batches through it, close it. Every helper fails the
// test on the first error; none hides a retry.
package txntest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/lakestream/lakestream/txn"
)

// Open opens producer opts.ID on l, quiet unless opts.Logger says
// otherwise, and closes it when t ends if the test has not.
func Open(t testing.TB, l *txn.Log, opts txn.ProducerOptions) *txn.Producer {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	p, err := txn.OpenProducer(t.Context(), l, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close(context.Background()) })
	return p
}

// Commit appends batches with p one at a time, waiting for each to commit
// before appending the next (so no two share a version), and returns the
// steps they committed as.
func Commit(t testing.TB, p *txn.Producer, batches ...txn.Batch) []int64 {
	t.Helper()
	steps := make([]int64, 0, len(batches))
	for i, b := range batches {
		pd, err := p.Append(t.Context(), b)
		if err != nil {
			t.Fatalf("appending batch %d of %d (%q): %v", i+1, len(batches), b.Name, err)
		}
		step, err := pd.Wait(t.Context())
		if err != nil {
			t.Fatalf("committing batch %d of %d (%q): %v", i+1, len(batches), b.Name, err)
		}
		steps = append(steps, step)
	}
	return steps
}

// Pipeline appends all batches without waiting (the producer groups them
// into versions as it would in production), then waits for the last and
// returns its step.
func Pipeline(t testing.TB, p *txn.Producer, batches ...txn.Batch) int64 {
	t.Helper()
	var last *txn.Pending
	for i, b := range batches {
		pd, err := p.Append(t.Context(), b)
		if err != nil {
			t.Fatalf("appending batch %d of %d (%q): %v", i+1, len(batches), b.Name, err)
		}
		last = pd
	}
	if last == nil {
		t.Fatal("txntest.Pipeline: no batches")
	}
	step, err := last.Wait(t.Context())
	if err != nil {
		t.Fatalf("committing the last of %d batches: %v", len(batches), err)
	}
	return step
}

// Produce opens producer opts.ID on l, commits batches one at a time
// (Commit) and closes it, so the next incarnation starts from them.
func Produce(t testing.TB, l *txn.Log, opts txn.ProducerOptions, batches ...txn.Batch) []int64 {
	t.Helper()
	p := Open(t, l, opts)
	steps := Commit(t, p, batches...)
	if err := p.Close(t.Context()); err != nil {
		t.Fatalf("closing producer %s: %v", opts.ID, err)
	}
	return steps
}

// Batches is f(0), ..., f(n-1).
func Batches(n int, f func(i int) txn.Batch) []txn.Batch {
	out := make([]txn.Batch, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// Load loads l's state, failing t on an error.
func Load(t testing.TB, l *txn.Log) *txn.State {
	t.Helper()
	st, err := l.Load(t.Context())
	if err != nil {
		t.Fatalf("loading the stream: %v", err)
	}
	return st
}
