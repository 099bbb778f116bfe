package scale

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestStartsFollowLiveSteps: what starting on a stream costs in store
// requests is the same at 300 and at 3,000 versions (the live steps and
// the versions since the newest snapshot being equal): Load (a new mount
// or reader), status, verify of the live steps, a restarted producer's
// registration, and a reader whose hint names a snapshot gc deleted; and
// gc lists the whole log once per run.
func TestStartsFollowLiveSteps(t *testing.T) {
	short, long := startCosts(t, 350), startCosts(t, 3050)
	for what, n := range short {
		if long[what] != n {
			t.Errorf("%s: %d store requests at 350 versions, %d at 3,050: it grows with the log", what, n, long[what])
		}
	}
	for _, c := range []map[string]int64{short, long} {
		if c["gc whole-log listings"] != 1 {
			t.Errorf("gc listed the whole log %d times; want once", c["gc whole-log listings"])
		}
	}
}

// startCosts builds a 5-step stream padded to versions versions and counts
// the requests of each start.
func startCosts(t *testing.T, versions uint64) map[string]int64 {
	ctx := t.Context()
	mem := store.NewMem()
	l, err := txn.Create(ctx, mem, txn.CreateOptions{Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	var row Row
	o := Options{Steps: 5, Files: 2, FileSize: 10, Logger: slog.New(slog.DiscardHandler)}
	if err := produce(ctx, l, o, 2, &row, &countingStore{Store: mem}); err != nil {
		t.Fatal(err)
	}
	if err := pad(ctx, l, versions, 8); err != nil {
		t.Fatal(err)
	}
	costs := map[string]int64{}
	count := func(what string, fn func(l *txn.Log) error) {
		t.Helper()
		f := store.NewFaulty(mem, 1)
		if err := fn(&txn.Log{Store: f, Config: l.Config}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		costs[what] = requests(f)
	}
	count("load", func(l *txn.Log) error { _, err := l.Load(ctx); return err })
	count("status", func(l *txn.Log) error { _, err := txn.StreamStatus(ctx, l); return err })
	count("verify", func(l *txn.Log) error { _, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 4}); return err })
	count("producer restart", func(l *txn.Log) error {
		p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "scale", Logger: o.Logger})
		if err != nil {
			return err
		}
		return p.Close(ctx)
	})
	// gc removed the hinted snapshot after a newer one was written (the
	// hint lags): the reader lists the log after the hinted version only.
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hinted := st.Version - st.Version%l.Config.SnapshotEvery
	if err := l.WriteSnapshot(ctx, st); err != nil {
		t.Fatal(err)
	}
	if err := store.PutBytes(ctx, mem, txn.HintKey, fmt.Appendf(nil, "%d\n", hinted)); err != nil {
		t.Fatal(err)
	}
	if err := mem.Delete(ctx, txn.SnapshotKey(hinted)); err != nil {
		t.Fatal(err)
	}
	count("load past a deleted snapshot", func(l *txn.Log) error { _, err := l.Load(ctx); return err })

	wc := &walkCounter{Store: store.NewFaulty(mem, 1)}
	gl := &txn.Log{Store: wc, Config: l.Config}
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	if _, err := txn.GC(context.WithoutCancel(ctx), gl, txn.GCOptions{Grace: txn.DefaultGrace, Now: later, Logger: o.Logger}); err != nil {
		t.Fatal(err)
	}
	costs["gc whole-log listings"] = wc.walks.Load()
	return costs
}
