package scale

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// build makes the stream under test in dst: o.Steps real steps committed
// by the real producer, then the log padded to o.Versions versions. It
// fills the row's log figures and how long building took (BuildS, PadS),
// which is not part of any measurement.
func build(ctx context.Context, o Options, dst store.Store, ranks int, row *Row) (*txn.Log, error) {
	started := time.Now()
	cs := &countingStore{Store: dst}
	l, err := txn.Create(ctx, cs, txn.CreateOptions{Ranks: ranks})
	if err != nil {
		return nil, err
	}
	if err := produce(ctx, l, o, ranks, row, cs); err != nil {
		return nil, err
	}
	padStart := time.Now()
	if err := pad(ctx, l, uint64(o.Versions), o.PadParallel); err != nil {
		return nil, fmt.Errorf("padding the log: %w", err)
	}
	row.PadS = time.Since(padStart).Seconds()
	row.BuildS = time.Since(started).Seconds()
	st, err := l.Load(ctx)
	if err != nil {
		return nil, err
	}
	if v := st.Version - st.Version%l.Config.SnapshotEvery; v > 0 {
		info, err := dst.Stat(ctx, txn.SnapshotKey(v))
		if err != nil {
			return nil, err
		}
		row.SnapshotTotal = int(info.Size)
	}
	row.LogBytesPerStep = float64(row.RecordBytes) + float64(row.SnapshotTotal)/float64(l.Config.SnapshotEvery)
	return l, nil
}

// produce commits o.Steps TGBs of ranks x o.Files files, one a version.
func produce(ctx context.Context, l *txn.Log, o Options, ranks int, row *Row, cs *countingStore) error {
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "scale", Logger: o.Logger})
	if err != nil {
		return err
	}
	var writes int64
	for s := range o.Steps {
		before := cs.writes.Load()
		pd, err := p.Append(ctx, scaleBatch(fmt.Sprintf("b%08d", s), ranks, o.Files, o.FileSize))
		if err != nil {
			return err
		}
		// One step at a time, so that each version holds one TGB and the
		// writes are counted per step.
		if _, err := pd.Wait(ctx); err != nil {
			return err
		}
		writes += cs.writes.Load() - before
	}
	if err := p.Close(ctx); err != nil {
		return err
	}
	row.WritesPerStep = float64(writes) / float64(o.Steps)
	st, err := l.Load(ctx)
	if err != nil {
		return err
	}
	rec, err := store.ReadAll(ctx, l.Store, txn.VersionKey(st.Version))
	if err != nil {
		return err
	}
	row.RecordBytes = len(rec)
	t := st.Steps[len(st.Steps)-1]
	share, _ := json.Marshal(t)
	row.SnapshotBytes = len(share) + 1
	row.ObjectBytes = t.Object.Size
	row.IndexBytes = t.Object.Size - t.Object.Data
	return nil
}

// scaleBatch is one step's batch: ranks x files files of size bytes.
func scaleBatch(name string, ranks, files, size int) txn.Batch {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i)
	}
	b := txn.Batch{Name: name, Cursor: name, Ranks: make([][]txn.FileSource, ranks)}
	for r := range b.Ranks {
		fs := make([]txn.FileSource, files)
		for f := range fs {
			fs[f] = txn.BytesFile(fmt.Sprintf("sample-%03d.bin", f), data)
		}
		b.Ranks[r] = fs
	}
	return b
}

// pad extends l's log to versions versions with checkpoint records of the
// head, written straight to the store, parallel bounded: each is the record
// Log.Commit would write on the state after the real steps, which no
// padding version changes but for its number and time, so the records and
// the snapshots every SnapshotEvery versions can be made independently.
// The hint is written last, naming the newest snapshot. Committing them one
// by one (and building elsewhere and copying, as this did before) took
// more than 15 minutes at a million versions.
func pad(ctx context.Context, l *txn.Log, versions uint64, parallel int) error {
	st, err := l.Load(ctx)
	if err != nil {
		return err
	}
	head, ok := st.Head()
	if !ok || st.Version >= versions {
		return nil
	}
	from, every := st.Version+1, l.Config.SnapshotEvery
	now := time.Now().UTC()
	snap := st.Clone()
	if i, found := slices.BinarySearch(snap.Checkpoints, head); !found {
		snap.Checkpoints = slices.Insert(snap.Checkpoints, i, head)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(parallel, 1))
	for v := from; v <= versions; v++ {
		g.Go(func() error {
			rec := &txn.Version{Format: st.Format, Version: v, Time: now, Txn: fmt.Sprintf("pad%013x", v), Checkpoints: []int64{head}}
			if err := putJSON(gctx, l.Store, txn.VersionKey(v), rec); err != nil {
				return err
			}
			if v%every != 0 {
				return nil
			}
			s := *snap // shares the read-only slices
			s.Version, s.Time = v, now
			return putJSON(gctx, l.Store, txn.SnapshotKey(v), &s)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	if newest := versions - versions%every; newest >= from {
		return store.PutBytes(ctx, l.Store, txn.HintKey, fmt.Appendf(nil, "%d\n", newest))
	}
	return nil
}

// putJSON stores x as the log does: one JSON value and a newline.
func putJSON(ctx context.Context, s store.Store, key string, x any) error {
	b, err := json.Marshal(x)
	if err != nil {
		return err
	}
	return store.PutBytes(ctx, s, key, append(b, '\n'))
}
