package txn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// gcGrace is the grace period the GC tests run with; the clock (GCOptions.Now)
// is moved past it instead of waiting.
const gcGrace = 10 * time.Minute

// gcAt is GC at the wall clock plus d, with gcGrace.
func gcAt(d time.Duration) txn.GCOptions {
	return txn.GCOptions{Grace: gcGrace, Logger: quietLogger(), Now: func() time.Time { return time.Now().Add(d) }}
}

func gcRun(t *testing.T, l *txn.Log, o txn.GCOptions) *txn.GCReport {
	t.Helper()
	rep, err := txn.GC(t.Context(), l, o)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// gcAppend appends n TGBs as producer id, continuing after its committed
// seq, and waits for their commit. gate, if set, is called before each
// append.
func gcAppend(ctx context.Context, l *txn.Log, id string, n int, gate func(seq uint64) error) error {
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: id, Logger: quietLogger()})
	if err != nil {
		return err
	}
	seq := p.Resume().Seq
	var last *txn.Pending
	for range n {
		seq++
		if gate != nil {
			if err := gate(seq); err != nil {
				return err
			}
		}
		pd, err := p.Append(ctx, batchFor(id, seq, l.Config.Ranks))
		if err != nil {
			return fmt.Errorf("%s append %d: %w", id, seq, err)
		}
		last = pd
	}
	if last != nil {
		if _, err := last.Wait(ctx); err != nil {
			return err
		}
	}
	return p.Close(ctx)
}

func gcProduce(t *testing.T, l *txn.Log, id string, n int) {
	t.Helper()
	if err := gcAppend(t.Context(), l, id, n, nil); err != nil {
		t.Fatal(err)
	}
}

func gcCheckpoints(t *testing.T, l *txn.Log, steps ...int64) {
	t.Helper()
	for _, s := range steps {
		if _, err := txn.RecordCheckpoint(t.Context(), l, s, quietLogger()); err != nil {
			t.Fatal(err)
		}
	}
}

// gcObjects lists the objects under prefix: key -> size.
func gcObjects(t *testing.T, s store.Store, prefix string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := store.Walk(t.Context(), s, prefix, "", func(o store.Info) error {
		out[o.Key] = o.Size
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// gcStepKeys returns the pack keys of the live steps below `below`.
func gcStepKeys(st *txn.State, below int64) []string {
	var keys []string
	for _, tgb := range st.Steps {
		if tgb.Step < below {
			keys = append(keys, tgb.Object.Key)
		}
	}
	return keys
}

func gcLiveKeys(st *txn.State) []string { return gcStepKeys(st, st.NextStep()) }

func gcPendingKeys(st *txn.State) []string {
	var keys []string
	for _, pd := range st.Pending {
		keys = append(keys, pd.Keys...)
	}
	return keys
}

// gcSameSet reports whether a and b hold the same strings, ignoring order.
func gcSameSet(a, b []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
}

// gcCheck checks the stream through a clean store: Verify finds every live
// pack present and intact, the live steps are contiguous, and each
// producer's live TGBs have consecutive seqs (nothing lost or duplicated in
// the window). It returns the state.
func gcCheck(t *testing.T, l *txn.Log) *txn.State {
	t.Helper()
	rep, err := txn.Verify(t.Context(), l, txn.VerifyOptions{Parallel: 8})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("verify at version %d: %d problems, first: %v", rep.Version, len(rep.Problems), rep.Problems[0])
	}
	st := txntest.Load(t, l)
	seen := map[string]uint64{}
	for i, tgb := range st.Steps {
		if tgb.Step != st.LiveFrom+int64(i) {
			t.Fatalf("step %d at index %d of a window from %d", tgb.Step, i, st.LiveFrom)
		}
		if last, ok := seen[tgb.Producer]; ok && tgb.Seq != last+1 {
			t.Fatalf("step %d: producer %s seq %d after seq %d", tgb.Step, tgb.Producer, tgb.Seq, last)
		}
		seen[tgb.Producer] = tgb.Seq
	}
	return st
}

// gcExactlyOnce checks a stream written by producer id alone with n TGBs:
// the i-th TGB ever appended (seq i) is step FirstStep+i-1, so the live
// window holds exactly the newest ones, once each, with their bytes.
func gcExactlyOnce(t *testing.T, l *txn.Log, st *txn.State, id string, n uint64) {
	t.Helper()
	for _, tgb := range st.Steps {
		if tgb.Producer != id || tgb.Seq != uint64(tgb.Step-l.Config.FirstStep+1) {
			t.Fatalf("step %d holds %s seq %d: lost, duplicated or reordered", tgb.Step, tgb.Producer, tgb.Seq)
		}
		checkTGBBytes(t, l, tgb)
	}
	if head, ok := st.Head(); !ok || uint64(head-l.Config.FirstStep+1) != n {
		t.Fatalf("head %d (ok %v), want %d TGBs", head, ok, n)
	}
	if ps := st.Producers[id]; ps == nil || ps.Seq != n || ps.Cursor != fmt.Sprintf("c%06d", n) {
		t.Fatalf("producer %s state %+v, want seq %d", id, ps, n)
	}
}

// gcVersions reads every version still in the log, in order.
func gcVersions(t *testing.T, l *txn.Log) []*txn.Version {
	t.Helper()
	var out []*txn.Version
	for key := range gcObjects(t, l.Store, txn.LogPrefix) {
		v, ok := txn.ParseVersionKey(key)
		if !ok {
			continue
		}
		ver, err := l.ReadVersion(t.Context(), v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ver)
	}
	slices.SortFunc(out, func(a, b *txn.Version) int { return int(a.Version) - int(b.Version) })
	return out
}

func TestReclaimTarget(t *testing.T) {
	for _, c := range []struct {
		retain int
		cps    []int64
		want   int64
		ok     bool
	}{
		{2, nil, 0, false},
		{2, []int64{50}, 0, false},
		{2, []int64{50, 100, 150}, 101, true},
		{1, []int64{50, 100, 150}, 151, true},
		{3, []int64{50, 100, 150}, 51, true},
		{4, []int64{50, 100, 150}, 0, false},
	} {
		st := txn.NewState(txn.StreamConfig{Ranks: 1, RetainCheckpoints: c.retain})
		st.Checkpoints = c.cps
		got, ok := txn.ReclaimTarget(st)
		if ok != c.ok || ok && got != c.want {
			t.Errorf("retain %d, checkpoints %v: target %d ok %v, want %d ok %v", c.retain, c.cps, got, ok, c.want, c.ok)
		}
	}
}

// TestGCReclaim walks one stream through the lifecycle: no reclamation
// before K checkpoints; then a reclamation record, the steps leave the
// state and their packs become pending but stay during the grace period;
// after it they are deleted and a purge record commits. Every GC repeated
// is a no-op.
func TestGCReclaim(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			l := newLog(t, s, txn.CreateOptions{Ranks: 2, ChunkSize: 4096, SnapshotEvery: 25, RetainCheckpoints: 2})
			gcProduce(t, l, "p", 160)

			nothing := func(what string, rep *txn.GCReport, v0 uint64) {
				t.Helper()
				if rep.ReclaimedSteps != 0 || rep.ReclaimedBelow != 0 || len(rep.DataDeleted)+len(rep.Orphans)+len(rep.LogDeleted) > 0 {
					t.Fatalf("%s: gc did something: %+v", what, rep)
				}
				if v := txntest.Load(t, l).Version; v != v0 || rep.Version != v0 {
					t.Fatalf("%s: gc moved the log from version %d to %d (report %d)", what, v0, v, rep.Version)
				}
			}
			// Fewer checkpoints than RetainCheckpoints: nothing to reclaim.
			for _, cps := range [][]int64{nil, {50}} {
				gcCheckpoints(t, l, cps...)
				v0 := txntest.Load(t, l).Version
				nothing(fmt.Sprintf("checkpoints %v", cps), gcRun(t, l, gcAt(0)), v0)
			}

			gcCheckpoints(t, l, 100, 150) // checkpoints 50 100 150, K=2: below 101
			st := txntest.Load(t, l)
			reclaimed := gcStepKeys(st, 101)
			objs := gcObjects(t, s, txn.DataPrefix)
			rep := gcRun(t, l, gcAt(0))
			if rep.ReclaimedBelow != 101 || rep.ReclaimedSteps != 101 || len(rep.DataDeleted) > 0 || len(rep.Orphans) > 0 {
				t.Fatalf("first gc: %+v; want steps 0-100 reclaimed and nothing deleted", rep)
			}
			st = gcCheck(t, l)
			if st.LiveFrom != 101 || len(st.Steps) != 59 || rep.Version != st.Version {
				t.Fatalf("after reclaim: live from %d, %d steps, version %d (report %d)", st.LiveFrom, len(st.Steps), st.Version, rep.Version)
			}
			if ver, err := l.ReadVersion(t.Context(), st.Version); err != nil || ver.Reclaim == nil || ver.Reclaim.Below != 101 {
				t.Fatalf("version %d: %+v, %v; want a reclamation record below 101", st.Version, ver, err)
			}
			if !gcSameSet(gcPendingKeys(st), reclaimed) {
				t.Fatalf("pending deletes %v, want the packs of steps 0-100", gcPendingKeys(st))
			}
			if got := gcObjects(t, s, txn.DataPrefix); !maps.Equal(got, objs) {
				t.Fatalf("reclamation deleted data within the grace period: %d objects left of %d", len(got), len(objs))
			}

			nothing("second gc", gcRun(t, l, gcAt(0)), st.Version)
			nothing("gc within the grace period", gcRun(t, l, gcAt(gcGrace/2)), st.Version)
			if got := gcObjects(t, s, txn.DataPrefix); !maps.Equal(got, objs) {
				t.Fatal("data deleted within the grace period")
			}

			rep = gcRun(t, l, gcAt(gcGrace+time.Minute))
			var bytes int64
			for _, k := range reclaimed {
				bytes += objs[k]
			}
			if !gcSameSet(rep.DataDeleted, reclaimed) || rep.Bytes != bytes || len(rep.Orphans) > 0 || rep.ReclaimedSteps != 0 {
				t.Fatalf("gc after the grace period: %d deleted (want %d), %d bytes (want %d), orphans %v, reclaimed %d",
					len(rep.DataDeleted), len(reclaimed), rep.Bytes, bytes, rep.Orphans, rep.ReclaimedSteps)
			}
			st2 := gcCheck(t, l)
			if st2.Version != st.Version+1 || len(st2.Pending) > 0 || st2.LiveFrom != 101 {
				t.Fatalf("after purge: version %d (was %d), %d pending, live from %d", st2.Version, st.Version, len(st2.Pending), st2.LiveFrom)
			}
			if ver, err := l.ReadVersion(t.Context(), st2.Version); err != nil || !gcSameSet(ver.Purged, reclaimed) {
				t.Fatalf("version %d is not the purge record of the reclaimed packs (err %v)", st2.Version, err)
			}
			if got := slices.Collect(maps.Keys(gcObjects(t, s, txn.DataPrefix))); !gcSameSet(got, gcLiveKeys(st2)) {
				t.Fatalf("data/ holds %d objects, the live steps %d", len(got), len(gcLiveKeys(st2)))
			}
			nothing("gc after the purge", gcRun(t, l, gcAt(gcGrace+time.Minute)), st2.Version)
		})
	}
}

// TestGCConcurrent: four GCs at once, while a producer commits: none fails,
// exactly one reclamation record commits, every reclaimed pack is deleted
// by someone, and no live pack is touched.
func TestGCConcurrent(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := open(t)
			l := newLog(t, s, txn.CreateOptions{Ranks: 2, ChunkSize: 4096, SnapshotEvery: 10, RetainCheckpoints: 2})
			gcProduce(t, l, "p", 160)
			gcCheckpoints(t, l, 50, 100, 150)
			reclaimed := gcStepKeys(txntest.Load(t, l), 101)

			const gcs = 4
			var wg sync.WaitGroup
			reps := make([]*txn.GCReport, gcs)
			errs := make([]error, gcs+1)
			wg.Go(func() { errs[gcs] = gcAppend(ctx, l, "p", 40, nil) })
			for i := range gcs {
				wg.Go(func() { reps[i], errs[i] = txn.GC(ctx, l, gcAt(gcGrace+time.Minute)) })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			var deleted, orphans []string
			for _, r := range reps {
				deleted = append(deleted, r.DataDeleted...)
				orphans = append(orphans, r.Orphans...)
			}
			if !gcSameSet(slices.Compact(slices.Sorted(slices.Values(deleted))), reclaimed) || len(orphans) > 0 {
				t.Fatalf("the gcs deleted %d distinct reclaimed packs of %d, and orphans %v", len(slices.Compact(slices.Sorted(slices.Values(deleted)))), len(reclaimed), orphans)
			}
			st := gcCheck(t, l)
			if st.LiveFrom != 101 || len(st.Pending) > 0 {
				t.Fatalf("live from %d, %d pending deletes; want 101 and none", st.LiveFrom, len(st.Pending))
			}
			data := gcObjects(t, s, txn.DataPrefix)
			for _, k := range reclaimed {
				if _, ok := data[k]; ok {
					t.Fatalf("reclaimed pack %s still stored", k)
				}
			}
			reclaims := 0
			for _, v := range gcVersions(t, l) {
				if v.Reclaim != nil {
					reclaims++
				}
			}
			if reclaims != 1 {
				t.Fatalf("%d reclamation records, want 1", reclaims)
			}
			gcExactlyOnce(t, l, st, "p", 200)
		})
	}
}

// TestGCDryRun: a dry run deletes and commits nothing, and reports what a
// real run would do.
func TestGCDryRun(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := open(t)
			l := newLog(t, s, txn.CreateOptions{Ranks: 2, ChunkSize: 4096, RetainCheckpoints: 2})
			gcProduce(t, l, "p", 60)
			gcCheckpoints(t, l, 20, 40)
			gcRun(t, l, gcAt(0)) // steps 0-20 reclaimed, their packs pending
			pending := gcPendingKeys(txntest.Load(t, l))
			gcCheckpoints(t, l, 59) // now reclaimable below 41
			orphan := "data/ghost/1/1/rank-0.pack"
			if err := store.PutBytes(ctx, s, orphan, []byte("left behind")); err != nil {
				t.Fatal(err)
			}
			before := gcObjects(t, s, "")
			v0 := txntest.Load(t, l).Version

			o := gcAt(gcGrace + time.Minute)
			o.DryRun = true
			rep := gcRun(t, l, o)
			if rep.ReclaimedBelow != 41 || rep.ReclaimedSteps != 20 || !slices.Equal(rep.Orphans, []string{orphan}) || rep.Bytes == 0 {
				t.Fatalf("dry run report %+v; want 20 steps below 41 and the orphan", rep)
			}
			for _, k := range pending {
				if !slices.Contains(rep.DataDeleted, k) {
					t.Fatalf("dry run does not list the pending pack %s", k)
				}
			}
			if after := gcObjects(t, s, ""); !maps.Equal(after, before) {
				t.Fatalf("dry run changed the store: %d objects before, %d after", len(before), len(after))
			}
			if st := gcCheck(t, l); st.Version != v0 || st.LiveFrom != 21 {
				t.Fatalf("dry run committed: version %d -> %d, live from %d", v0, st.Version, st.LiveFrom)
			}

			// What `gc --dry-run --grace 0s` lists is what `gc --grace 0s`
			// then deletes.
			t.Run("matches a real run", func(t *testing.T) {
				o := txn.GCOptions{Grace: 0, Now: time.Now, Logger: quietLogger(), DryRun: true}
				dry := gcRun(t, l, o)
				o.DryRun = false
				run := gcRun(t, l, o)
				if dry.ReclaimedBelow != run.ReclaimedBelow || dry.ReclaimedSteps != run.ReclaimedSteps || !gcSameSet(dry.Orphans, run.Orphans) {
					t.Errorf("dry run reclaims below %d (%d steps), orphans %v; the real run below %d (%d steps), orphans %v",
						dry.ReclaimedBelow, dry.ReclaimedSteps, dry.Orphans, run.ReclaimedBelow, run.ReclaimedSteps, run.Orphans)
				}
				if !gcSameSet(dry.DataDeleted, run.DataDeleted) || dry.Bytes != run.Bytes {
					var missed []string
					for _, k := range run.DataDeleted {
						if !slices.Contains(dry.DataDeleted, k) {
							missed = append(missed, k)
						}
					}
					t.Errorf("dry run lists %d data objects (%d bytes); the real run deleted %d (%d bytes); not listed: %d, e.g. %v",
						len(dry.DataDeleted), dry.Bytes, len(run.DataDeleted), run.Bytes, len(missed), missed[:min(len(missed), 3)])
				}
			})
		})
	}
}

// TestGCOrphans: unreferenced data goes once it is older than the grace
// period, unless a commit could still reference it (the producer's current
// incarnation, a seq beyond its committed one); live packs never go.
func TestGCOrphans(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := open(t)
			l := newLog(t, s, txn.CreateOptions{Ranks: 2, ChunkSize: 4096})
			gcProduce(t, l, "p", 5) // epoch 1: seq 1-5
			gcProduce(t, l, "p", 5) // epoch 2: seq 6-10
			if ps := txntest.Load(t, l).Producers["p"]; ps.Epoch != 2 || ps.Seq != 10 {
				t.Fatalf("producer state %+v", ps)
			}
			garbage := []string{
				"data/p/1/11/rank-0.pack",    // an upload of the fenced epoch 1 that never committed
				"data/p/2/10/rank-7.pack",    // epoch 2, seq committed without it (a retried append)
				"data/ghost/1/1/rank-0.pack", // no such producer
				"data/junk.bin",              // not a pack this system writes
			}
			inflight := []string{
				"data/p/2/11/rank-0.pack", // epoch 2's next TGB: its commit may be in flight
				"data/p/2/12/shared.pack",
			}
			for _, k := range append(slices.Clone(garbage), inflight...) {
				if err := store.PutBytes(ctx, s, k, []byte("payload of "+k)); err != nil {
					t.Fatal(err)
				}
			}
			objs := gcObjects(t, s, txn.DataPrefix)
			for _, d := range []time.Duration{0, gcGrace / 2} {
				if rep := gcRun(t, l, gcAt(d)); len(rep.Orphans) > 0 {
					t.Fatalf("orphans younger than the grace period deleted: %v", rep.Orphans)
				}
			}
			rep := gcRun(t, l, gcAt(gcGrace+time.Minute))
			var bytes int64
			for _, k := range garbage {
				bytes += objs[k]
			}
			if !gcSameSet(rep.Orphans, garbage) || rep.Bytes != bytes {
				t.Fatalf("orphans %v (%d bytes); want %v (%d bytes)", rep.Orphans, rep.Bytes, garbage, bytes)
			}
			st := gcCheck(t, l)
			got := slices.Collect(maps.Keys(gcObjects(t, s, txn.DataPrefix)))
			if want := append(gcLiveKeys(st), inflight...); !gcSameSet(got, want) {
				t.Fatalf("data/ after gc holds %v, want the live packs and the in-flight ones", got)
			}
			gcExactlyOnce(t, l, st, "p", 10)

			// However old, in-flight uploads stay while their incarnation
			// can still commit them...
			if rep := gcRun(t, l, gcAt(50*time.Minute)); len(rep.Orphans) > 0 {
				t.Fatalf("in-flight uploads of the current incarnation deleted: %v", rep.Orphans)
			}
			// ...and go once a newer incarnation fenced it.
			gcProduce(t, l, "p", 0) // epoch 3
			if rep := gcRun(t, l, gcAt(gcGrace+time.Minute)); !gcSameSet(rep.Orphans, inflight) {
				t.Fatalf("after epoch 3 registered: orphans %v, want %v", rep.Orphans, inflight)
			}
			gcExactlyOnce(t, l, gcCheck(t, l), "p", 10)
		})
	}
}

// TestGCLog: log versions and snapshots are deleted only once they are
// older than LogRetention, and then everything but what a reader needs (the
// newest snapshot and the versions after it); the state read afterwards is
// the same.
func TestGCLog(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := open(t)
			l := newLog(t, s, txn.CreateOptions{Ranks: 1, ChunkSize: 4096, SnapshotEvery: 10, RetainCheckpoints: 2})
			txntest.Produce(t, l, txn.ProducerOptions{ID: "p", Solo: true}, batchesFor("p", 1, 55, 1)...) // one version each
			gcCheckpoints(t, l, 20, 40)
			gcRun(t, l, gcAt(gcGrace+time.Minute)) // reclaim below 21 and purge
			gcProduce(t, l, "p", 7)

			// The reference: the state rebuilt from every version.
			ref := txn.NewState(l.Config)
			if _, err := l.Refresh(ctx, ref); err != nil {
				t.Fatal(err)
			}
			if got := txntest.Load(t, l); !slices.Equal(jsonMarshal(t, got), jsonMarshal(t, ref)) {
				t.Fatal("the state loaded from the newest snapshot differs from the one rebuilt from all versions")
			}
			logBefore := gcObjects(t, s, txn.LogPrefix)

			if rep := gcRun(t, l, gcAt(0)); len(rep.LogDeleted) > 0 {
				t.Fatalf("gc deleted young log objects: %v", rep.LogDeleted)
			}
			if got := gcObjects(t, s, txn.LogPrefix); !maps.Equal(got, logBefore) {
				t.Fatal("_log/ changed though every object in it is young")
			}

			// An hour later: all but the newest snapshot and what follows it.
			var newest uint64
			for k := range logBefore {
				if v, ok := txn.ParseSnapshotKey(k); ok {
					newest = max(newest, v)
				}
			}
			if newest < 60 {
				t.Fatalf("newest snapshot %d; the test expects several", newest)
			}
			var want []string
			for k := range logBefore {
				if v, ok := txn.ParseSnapshotKey(k); ok && v < newest {
					want = append(want, k)
				} else if v, ok := txn.ParseVersionKey(k); ok && v <= newest {
					want = append(want, k)
				}
			}
			rep := gcRun(t, l, gcAt(txn.LogRetention+time.Minute))
			if !gcSameSet(rep.LogDeleted, want) {
				t.Fatalf("log gc deleted %d objects, want %d (all but snapshot %d and the versions after it)", len(rep.LogDeleted), len(want), newest)
			}
			left := gcObjects(t, s, txn.LogPrefix)
			for _, k := range want {
				if _, ok := left[k]; ok {
					t.Fatalf("%s still stored", k)
				}
			}
			if len(left) != len(logBefore)-len(want) {
				t.Fatalf("_log/ holds %d objects, want %d", len(left), len(logBefore)-len(want))
			}

			fresh, err := txn.Open(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if got := txntest.Load(t, fresh); !slices.Equal(jsonMarshal(t, got), jsonMarshal(t, ref)) {
				t.Fatalf("after log gc the loaded state differs:\n got %s\nwant %s", jsonMarshal(t, got), jsonMarshal(t, ref))
			}
			// Data is untouched, and the stream goes on.
			gcCheck(t, fresh)
			gcProduce(t, fresh, "p", 3)
			gcExactlyOnce(t, fresh, gcCheck(t, fresh), "p", 65)
		})
	}
}

// TestGCRacesCommits: GC with no grace period, run again and again while a
// producer commits through a store that fails calls and loses responses
// (and so does the GC's store). After every round every live step's packs
// are there and intact and the steps are contiguous; at the end the live
// TGBs are exactly once each, and data/ holds nothing but them.
func TestGCRacesCommits(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			if name == "s3" {
				longtest.Skip(t, "240 commits racing gc through faults on versitygw; file:// stays")
			}
			const total = 240
			ctx := t.Context()
			clean := open(t)
			newLog(t, clean, txn.CreateOptions{Ranks: 2, ChunkSize: 4096, SnapshotEvery: 20, RetainCheckpoints: 2})
			faulty := func(seed uint64) *store.Faulty {
				f := store.NewFaulty(clean, seed)
				f.Set(store.Fault{ErrRate: 0.05})
				f.Set(store.Fault{ErrRate: 0.05, LostRate: 0.1}, store.OpCreate, store.OpPut, store.OpDelete)
				return f
			}
			pf, gf := faulty(11), faulty(12)
			openLog := func(s store.Store) *txn.Log {
				for {
					l, err := txn.Open(ctx, s)
					if err == nil {
						return l
					}
					if !errors.Is(err, store.ErrInjected) {
						t.Fatal(err)
					}
				}
			}
			pl, gl, cl := openLog(pf), openLog(gf), openLog(clean)
			// retry repeats an operation through the faulty store until it
			// gets through; any error but an injected one fails the test.
			retry := func(what string, f func() error) {
				t.Helper()
				for i := 0; ; i++ {
					err := f()
					if err == nil {
						return
					}
					if !errors.Is(err, store.ErrInjected) || i == 200 {
						t.Fatalf("%s: %v", what, err)
					}
				}
			}

			// The producer runs at most 16 TGBs ahead of the gc rounds, so
			// that rounds keep racing with its commits however fast each
			// side is.
			var roundsDone atomic.Uint64
			gate := func(seq uint64) error {
				for seq > 16*(roundsDone.Load()+1) {
					if err := ctx.Err(); err != nil {
						return err
					}
					time.Sleep(time.Millisecond)
				}
				return nil
			}
			done := make(chan error, 1)
			go func() { done <- gcAppend(ctx, pl, "p", total, gate) }()
			// Rounds run back to back while the producer commits (each
			// waits for a few new steps, so there are at most total/4 of
			// them), then twice more.
			finished, after := false, 0
			var prodErr error
			next, liveFrom := int64(0), int64(0)
			racing, reclaiming := 0, 0
			for round := 0; after < 2; round++ {
				for !finished {
					if st := txntest.Load(t, cl); st.NextStep() >= next+4 {
						break
					}
					select {
					case prodErr = <-done:
						finished = true
					case <-time.After(5 * time.Millisecond):
					}
				}
				if finished {
					after++
				} else {
					racing++
				}
				st := txntest.Load(t, cl)
				next = st.NextStep()
				if head, ok := st.Head(); ok {
					retry("checkpoint", func() error {
						_, err := txn.RecordCheckpoint(ctx, gl, head, quietLogger())
						return err
					})
				}
				var rep *txn.GCReport
				retry("gc", func() (err error) {
					rep, err = txn.GC(ctx, gl, txn.GCOptions{Grace: 0, Now: time.Now, Logger: quietLogger()})
					return err
				})
				st = gcCheck(t, cl)
				if st.LiveFrom > liveFrom && !finished {
					reclaiming++
				}
				liveFrom = st.LiveFrom
				roundsDone.Add(1)
				t.Logf("round %d: live %d-%d, version %d; the last gc attempt reclaimed %d steps, deleted %d packs and %d orphans",
					round, st.LiveFrom, st.NextStep()-1, st.Version, rep.ReclaimedSteps, len(rep.DataDeleted), len(rep.Orphans))
			}
			if prodErr != nil {
				t.Fatal(prodErr)
			}
			retry("final gc", func() error {
				_, err := txn.GC(ctx, gl, txn.GCOptions{Grace: 0, Now: time.Now, Logger: quietLogger()})
				return err
			})
			st := gcCheck(t, cl)
			gcExactlyOnce(t, cl, st, "p", total)
			if got := slices.Collect(maps.Keys(gcObjects(t, clean, txn.DataPrefix))); !gcSameSet(got, gcLiveKeys(st)) {
				t.Fatalf("data/ holds %d objects after the final gc; the %d live steps have %d packs", len(got), len(st.Steps), len(gcLiveKeys(st)))
			}
			if reclaiming < 3 || racing < total/32 {
				t.Fatalf("%d gc rounds ran while the producer committed, %d of them reclaimed steps: the test did not exercise the race", racing, reclaiming)
			}
			if pf.Injected(store.OpCreate) == 0 || gf.Injected(store.OpDelete)+gf.Injected(store.OpCreate) == 0 {
				t.Fatal("no faults were injected")
			}
			t.Logf("faults injected: producer create %d put %d get %d; gc create %d delete %d",
				pf.Injected(store.OpCreate), pf.Injected(store.OpPut), pf.Injected(store.OpGet), gf.Injected(store.OpCreate), gf.Injected(store.OpDelete))
		})
	}
}

// TestGCLogConcurrentLoadStaleHint: the hint names an older snapshot than
// the newest (its write after the newest snapshot failed, or two writers'
// hint puts landed out of order), and log gc runs an hour later exactly
// while a reader loads from that hinted snapshot. The reader must end up at
// the head or get an error; a state behind the head that it believes
// current would let its next commit re-create a deleted version number,
// which no other reader ever sees.
func TestGCLogConcurrentLoadStaleHint(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	l := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096, SnapshotEvery: 10})
	// Versions 1-36, snapshots 10, 20, 30.
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p", Solo: true}, batchesFor("p", 1, 35, 1)...)
	head := txntest.Load(t, l).Version
	if err := store.PutBytes(ctx, mem, txn.HintKey, []byte("20\n")); err != nil {
		t.Fatal(err)
	}
	// The reader's store runs gc (clock an hour ahead) right after the
	// reader has read the hinted snapshot.
	hooked := &gcHookStore{Store: mem, key: txn.SnapshotKey(20), hook: func() {
		rep, err := txn.GC(ctx, l, gcAt(txn.LogRetention+time.Minute))
		if err != nil {
			t.Error(err)
			return
		}
		t.Logf("gc during the load deleted %d log objects", len(rep.LogDeleted))
	}}
	// The reader lives in the same (moved) time as gc: what gc finds older
	// than LogRetention, the reader does too.
	reader := &txn.Log{Store: hooked, Config: l.Config, Now: func() time.Time { return time.Now().Add(txn.LogRetention + time.Minute) }}
	st, err := reader.Load(ctx)
	if err != nil {
		t.Logf("load during log gc: %v (an error is acceptable)", err)
		return
	}
	if st.Version >= head {
		return
	}
	t.Errorf("load during log gc returned version %d without an error; the head is version %d", st.Version, head)
	// What that costs: a commit on this state succeeds and is lost.
	v, err := reader.Commit(ctx, st, func(*txn.State) (*txn.Version, error) {
		return &txn.Version{Checkpoints: []int64{5}}, nil
	}, quietLogger())
	if err != nil {
		return
	}
	if fresh := txntest.Load(t, l); !slices.Contains(fresh.Checkpoints, 5) {
		t.Errorf("the commit of version %d on that state succeeded, but a fresh load (version %d) does not have it: the checkpoint is lost", v.Version, fresh.Version)
	}
}

// gcHookStore calls hook once, after key has been read and before the
// reader gets its bytes.
type gcHookStore struct {
	store.Store
	key  string
	once sync.Once
	hook func()
}

func (h *gcHookStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key != h.key {
		return h.Store.Get(ctx, key)
	}
	b, err := store.ReadAll(ctx, h.Store, key)
	if err != nil {
		return nil, err
	}
	h.once.Do(h.hook)
	return io.NopCloser(bytes.NewReader(b)), nil
}

// TestGCHeldByLiveConsumer: gc never reclaims at or above the step of a
// consumer whose heartbeat is fresh; it says who holds it, and --force
// (Force) reclaims anyway. Stale heartbeats and consumers that have read
// nothing hold nothing. Every live consumer below what the checkpoints
// allow is named, whatever the order of node ids (before, one listed
// after the slowest was left out).
func TestGCHeldByLiveConsumer(t *testing.T) {
	var storeBack atomic.Int64 // how far the store's clock is set back while a heartbeat is written
	s := store.NewMemClock(func() time.Time { return time.Now().Add(-time.Duration(storeBack.Load())) })
	l := newLog(t, s, txn.CreateOptions{Ranks: 1, RetainCheckpoints: 1})
	gcProduce(t, l, "p", 20)
	gcCheckpoints(t, l, 15) // allows reclaiming below 16
	// beat writes a heartbeat that the store stamps age ago; its own time
	// says now: liveness goes by the store's stamp.
	beat := func(node string, step *int64, age time.Duration) {
		t.Helper()
		b, _ := json.Marshal(txn.Heartbeat{NodeID: node, Step: step, Time: time.Now()})
		storeBack.Store(int64(age))
		defer storeBack.Store(0)
		if err := store.PutBytes(t.Context(), s, txn.HeartbeatKey(node), b); err != nil {
			t.Fatal(err)
		}
	}
	at := func(n int64) *int64 { return &n }
	beat("slow", at(5), 0)
	beat("fast", at(18), 0)
	beat("gone", at(1), time.Hour) // stale
	beat("new", nil, 0)
	beat("then", at(9), 0) // listed after slow: named all the same

	dry := gcAt(0)
	dry.DryRun = true
	held := []txn.ConsumerHold{{Node: "slow", Step: 5}, {Node: "then", Step: 9}}
	for _, o := range []txn.GCOptions{dry, gcAt(0)} {
		rep := gcRun(t, l, o)
		if rep.ReclaimedBelow != 5 || !slices.Equal(rep.HeldBy, held) ||
			rep.AllowedBelow == nil || *rep.AllowedBelow != 16 || rep.Forced {
			t.Fatalf("dry run %v: %+v; want reclaim below 5, held by slow at 5 and then at 9, allowed below 16", o.DryRun, rep)
		}
	}
	if st := txntest.Load(t, l); st.LiveFrom != 5 {
		t.Fatalf("live from %d, want 5: the consumer's step stays", st.LiveFrom)
	}
	forced := gcAt(0)
	forced.Force = true
	rep := gcRun(t, l, forced)
	if rep.ReclaimedBelow != 16 || !rep.Forced || !slices.Equal(rep.HeldBy, held) {
		t.Fatalf("forced: %+v", rep)
	}
}

// TestGCHeldWhenAHeartbeatCannotBeRead: a heartbeat the store lists but
// fails to return (a 503 on its GET) is an error for gc, which reclaims
// nothing, not a consumer gone: before, it was skipped and gc reclaimed
// below the checkpoint under a reader live a second ago (found by the
// simulation, seed 451). Once it reads, it holds at the reader.
func TestGCHeldWhenAHeartbeatCannotBeRead(t *testing.T) {
	s := &failingGets{Store: store.NewMem(), prefix: txn.ConsumerDir}
	l := newLog(t, s, txn.CreateOptions{Ranks: 1, RetainCheckpoints: 1})
	gcProduce(t, l, "p", 10)
	gcCheckpoints(t, l, 8) // allows reclaiming below 9
	step := int64(3)
	b, _ := json.Marshal(txn.Heartbeat{NodeID: "reader", Step: &step, Time: time.Now()})
	if err := store.PutBytes(t.Context(), s, txn.HeartbeatKey("reader"), b); err != nil {
		t.Fatal(err)
	}
	s.failing.Store(true)
	rep, err := txn.GC(t.Context(), l, gcAt(0))
	if !store.Transient(err) {
		t.Fatalf("gc with the heartbeat unreadable: %+v, %v; want a transient error", rep, err)
	}
	if st := txntest.Load(t, l); st.LiveFrom != 0 {
		t.Fatalf("live from %d: gc reclaimed under a reader whose heartbeat it could not read", st.LiveFrom)
	}
	s.failing.Store(false)
	if rep := gcRun(t, l, gcAt(0)); rep.ReclaimedBelow != 3 {
		t.Fatalf("gc once the heartbeat reads: %+v; want reclaimed below 3, the reader's step", rep)
	}
}

// failingGets fails every Get under prefix with a 503 while failing is set.
type failingGets struct {
	store.Store
	prefix  string
	failing atomic.Bool
}

func (s *failingGets) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if s.failing.Load() && strings.HasPrefix(key, s.prefix) {
		return nil, fmt.Errorf("get %s: SlowDown (HTTP 503): %w", key, store.ErrUnavailable)
	}
	return s.Store.Get(ctx, key)
}

// TestCheckpointSaysWhatItRecorded: with checkpoints [8 14 18 19] and steps
// live from 15, a checkpoint at 12 (reclaimed past) is refused with
// ErrReclaimed, one at 3 too, one at 14 or 19 is "already", and none of
// them writes a version. Before, --step 3 claimed "recorded" and --step 12
// recorded a checkpoint no job could restart from.
func TestCheckpointSaysWhatItRecorded(t *testing.T) {
	l := newLog(t, store.NewMem(), txn.CreateOptions{Ranks: 1, RetainCheckpoints: 3})
	gcProduce(t, l, "p", 22)
	gcCheckpoints(t, l, 8, 14, 18, 19)
	gcRun(t, l, gcAt(0))
	st := txntest.Load(t, l)
	if st.LiveFrom != 15 || fmt.Sprint(st.Checkpoints) != "[8 14 18 19]" {
		t.Fatalf("setup: live from %d, checkpoints %v", st.LiveFrom, st.Checkpoints)
	}
	for _, step := range []int64{3, 12} {
		_, err := txn.RecordCheckpoint(t.Context(), l, step, quietLogger())
		if !errors.Is(err, txn.ErrReclaimed) || !strings.Contains(err.Error(), "reclaimed every step below 15") {
			t.Errorf("step %d: %v, want ErrReclaimed naming step 15", step, err)
		}
	}
	for _, step := range []int64{14, 19} {
		res, err := txn.RecordCheckpoint(t.Context(), l, step, quietLogger())
		if err != nil || res.Outcome != txn.CheckpointAlready {
			t.Errorf("step %d: %+v %v, want CheckpointAlready", step, res, err)
		}
	}
	if v := txntest.Load(t, l).Version; v != st.Version {
		t.Fatalf("refused or repeated checkpoints wrote versions %d..%d", st.Version+1, v)
	}
	res, err := txn.RecordCheckpoint(t.Context(), l, 20, quietLogger())
	if err != nil || res.Outcome != txn.CheckpointRecorded || res.Version != st.Version+1 {
		t.Fatalf("step 20: %+v %v, want recorded as version %d", res, err, st.Version+1)
	}
}

// TestCheckpointOlderThanRecorded: a live step older than every recorded
// checkpoint writes nothing and says so.
func TestCheckpointOlderThanRecorded(t *testing.T) {
	l := newLog(t, store.NewMem(), txn.CreateOptions{Ranks: 1, RetainCheckpoints: 3})
	gcProduce(t, l, "p", 10)
	gcCheckpoints(t, l, 8)
	v0 := txntest.Load(t, l).Version
	res, err := txn.RecordCheckpoint(t.Context(), l, 3, quietLogger())
	if err != nil || res.Outcome != txn.CheckpointOlder || res.Version != v0 {
		t.Fatalf("step 3: %+v %v, want CheckpointOlder at version %d", res, err, v0)
	}
}

// TestGCAbortsStaleUploads: multipart uploads under data/ begun longer than
// the grace period ago (a writer killed mid-upload) are aborted, parts and
// all; --dry-run only lists them; younger uploads and uploads outside the
// stream's data/ are left alone. Before, gc never looked at uploads.
func TestGCAbortsStaleUploads(t *testing.T) {
	srv := s3test.Start(t)
	bucket := srv.NewBucket(t)
	s, err := store.Open(t.Context(), srv.URL(bucket, "stream"))
	if err != nil {
		t.Fatal(err)
	}
	l := newLog(t, s, txn.CreateOptions{Ranks: 1})
	c := srv.Client()
	begin := func(key string) string {
		mp, err := c.CreateMultipartUpload(t.Context(), &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.UploadPart(t.Context(), &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: mp.UploadId,
			PartNumber: aws.Int32(1), Body: bytes.NewReader(make([]byte, 1<<20))})
		if err != nil {
			t.Fatal(err)
		}
		return aws.ToString(mp.UploadId)
	}
	stale := begin("stream/data/p/1/7/x")
	other := begin("stream/elsewhere/x")
	uploads := func() map[string]bool {
		out, err := c.ListMultipartUploads(t.Context(), &s3.ListMultipartUploadsInput{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]bool{}
		for _, u := range out.Uploads {
			m[aws.ToString(u.UploadId)] = true
		}
		return m
	}

	if rep := gcRun(t, l, gcAt(0)); len(rep.UploadsAborted) != 0 {
		t.Fatalf("aborted an upload younger than the grace period: %+v", rep.UploadsAborted)
	}
	dry := gcAt(time.Hour)
	dry.DryRun = true
	rep := gcRun(t, l, dry)
	if len(rep.UploadsAborted) != 1 || rep.UploadsAborted[0].ID != stale || rep.UploadsAborted[0].Key != "data/p/1/7/x" {
		t.Fatalf("dry run lists %+v, want the stale upload of data/p/1/7/x", rep.UploadsAborted)
	}
	if ups := uploads(); !ups[stale] || !ups[other] {
		t.Fatalf("dry run changed the uploads: %v", ups)
	}
	rep = gcRun(t, l, gcAt(time.Hour))
	if len(rep.UploadsAborted) != 1 || rep.UploadsAborted[0].ID != stale {
		t.Fatalf("gc aborted %+v, want the stale upload", rep.UploadsAborted)
	}
	if ups := uploads(); ups[stale] || !ups[other] || len(ups) != 1 {
		t.Fatalf("uploads after gc: %v, want only %s (outside data/)", ups, other)
	}
	_, err = c.ListParts(t.Context(), &s3.ListPartsInput{Bucket: aws.String(bucket), Key: aws.String("stream/data/p/1/7/x"), UploadId: aws.String(stale)})
	var ae smithy.APIError
	if !errors.As(err, &ae) || ae.ErrorCode() != "NoSuchUpload" {
		t.Fatalf("ListParts of the aborted upload: %v, want NoSuchUpload", err)
	}
}

// failDeletes refuses every delete, as a store gone mid-gc or a signal
// does.
type failDeletes struct{ store.Store }

func (failDeletes) Delete(_ context.Context, keys ...string) error {
	return fmt.Errorf("delete of %d keys: %w", len(keys), store.ErrUnavailable)
}

// TestGCStoppedReportsWhatIsDone (issue 47 item 7): a gc whose deletes
// fail after its reclamation was committed returns, with the error, the
// report so far: the committed reclamation and how many deletes were cut
// short, so the command can say what a rerun does.
//
// In a synctest bubble: the deletes' retries (half a minute of backoff)
// run in virtual time.
func TestGCStoppedReportsWhatIsDone(t *testing.T) {
	synctest.Test(t, gcStoppedReportsWhatIsDone)
}

func gcStoppedReportsWhatIsDone(t *testing.T) {
	s := store.NewMem()
	l := newLog(t, s, txn.CreateOptions{Ranks: 2, ChunkSize: 4096, RetainCheckpoints: 1})
	gcProduce(t, l, "p", 10)
	gcCheckpoints(t, l, 5)
	fl := &txn.Log{Store: failDeletes{s}, Config: l.Config}
	o := gcAt(gcGrace + time.Minute)
	o.Grace = 0
	rep, err := txn.GC(t.Context(), fl, o)
	if err == nil || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("gc with failing deletes: %v", err)
	}
	if rep == nil || rep.ReclaimedSteps != 6 || rep.NotDeleted == 0 || rep.Version == 0 {
		t.Fatalf("report of the stopped gc: %+v; want 6 steps reclaimed and the deletes cut short counted", rep)
	}
	if st := txntest.Load(t, l); st.LiveFrom != 6 {
		t.Fatalf("live from %d after the stopped gc; want the reclamation committed (6)", st.LiveFrom)
	}
}

// TestGCSweepsProbeLeftovers (issue 43 item 14): create-if-absent probe
// keys whose own delete failed are swept by gc once older than the grace
// period and ten minutes (never a live probe's: --grace 0s does not touch
// a key a probe may still hold); --dry-run lists them.
func TestGCSweepsProbeLeftovers(t *testing.T) {
	s := store.NewMem()
	l := newLog(t, s, txn.CreateOptions{Ranks: 2, ChunkSize: 4096})
	leftover := store.ProbePrefix + "0123456789abcdef"
	if err := store.PutBytes(t.Context(), s, leftover, []byte("probe")); err != nil {
		t.Fatal(err)
	}
	young := gcAt(5 * time.Minute)
	young.Grace = 0
	if rep := gcRun(t, l, young); len(rep.Probes) > 0 {
		t.Fatalf("gc --grace 0s deleted a probe key 5 minutes old: %v", rep.Probes)
	}
	dry := gcAt(gcGrace + time.Minute)
	dry.DryRun = true
	if rep := gcRun(t, l, dry); !slices.Equal(rep.Probes, []string{leftover}) {
		t.Fatalf("dry run lists probe leftovers %v; want %s", rep.Probes, leftover)
	}
	if rep := gcRun(t, l, gcAt(gcGrace+time.Minute)); !slices.Equal(rep.Probes, []string{leftover}) {
		t.Fatalf("gc deleted probe leftovers %v; want %s", rep.Probes, leftover)
	}
	if _, err := s.Stat(t.Context(), leftover); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("the probe leftover is still there: %v", err)
	}
}
