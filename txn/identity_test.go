package txn_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// wipe deletes every object of the store: a stream deleted from its URL.
func wipe(t *testing.T, s store.Store) {
	t.Helper()
	var keys []string
	if err := store.Walk(t.Context(), s, "", "", func(o store.Info) error { keys = append(keys, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(t.Context(), keys...); err != nil {
		t.Fatal(err)
	}
}

// logStreams returns the stream id each version under _log/ carries.
func logStreams(t *testing.T, s store.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := store.Walk(t.Context(), s, txn.LogPrefix, "", func(o store.Info) error {
		if _, ok := txn.ParseVersionKey(o.Key); !ok {
			return nil
		}
		b, err := store.ReadAll(t.Context(), s, o.Key)
		if err != nil {
			return err
		}
		var v txn.Version
		if err := json.Unmarshal(b, &v); err != nil {
			return err
		}
		out[o.Key] = v.Stream
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestProducerStopsWhenStreamReplaced (issue 55 item 8): a producer whose
// stream is deleted and created again at its URL stops with
// ErrStreamReplaced (ErrStreamGone while nothing is there), its TGBs not
// committed, and writes nothing into the new stream's log: whether the
// new stream is behind the old producer's version (before: it went on
// creating versions 11, 12, ... in the new stream's log, which failed for
// good once the new stream reached them) or ahead of it.
func TestProducerStopsWhenStreamReplaced(t *testing.T) {
	for _, tc := range []struct {
		name    string
		reinit  bool
		newHead int  // TGBs the new stream commits before the old producer goes on
		quick   bool // deleted and created again within IdentityFresh of the old producer's last check
		want    error
	}{
		{"deleted", false, 0, false, txn.ErrStreamGone},
		{"replaced, new stream behind", true, 2, false, txn.ErrStreamReplaced},
		{"replaced, new stream ahead", true, 30, false, txn.ErrStreamReplaced},
		{"replaced at once, new stream behind", true, 2, true, txn.ErrStreamReplaced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			mem := store.NewMem()
			old := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
			p := txntest.Open(t, old, txn.ProducerOptions{ID: "p", Logger: quietLogger()})
			for seq := uint64(1); seq <= 10; seq++ {
				txnCommit(t, p, batchFor("p", seq, 1))
			}
			if !tc.quick {
				// An operator's delete and init take longer than this.
				time.Sleep(txn.IdentityFresh)
			}
			wipe(t, mem)
			var fresh *txn.Log
			if tc.reinit {
				fresh = newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
				txntest.Produce(t, fresh, txn.ProducerOptions{ID: "p", Logger: quietLogger()}, batchesFor("p", 1, uint64(tc.newHead), 1)...)
			}
			pd, err := p.Append(ctx, batchFor("p", 11, 1))
			if err == nil {
				_, err = pd.Wait(ctx)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("the old producer's next commit: %v, want %v", err, tc.want)
			}
			if err := p.Close(ctx); !errors.Is(err, tc.want) {
				t.Fatalf("close: %v, want %v", err, tc.want)
			}
			// Within IdentityFresh of its last check the old producer may
			// have created a version in the new stream: void there (it
			// takes its number, nothing else), and nothing later.
			foreign := 0
			for key, id := range logStreams(t, mem) {
				if fresh == nil || id != fresh.Config.StreamID {
					foreign++
					if !tc.quick || foreign > 1 {
						t.Errorf("%s carries stream %q: written into another stream's log", key, id)
					}
				}
			}
			if fresh == nil {
				return
			}
			// The new stream goes on past the old producer's versions.
			txntest.Produce(t, fresh, txn.ProducerOptions{ID: "p", Logger: quietLogger()}, batchesFor("p", uint64(tc.newHead)+1, uint64(tc.newHead)+15, 1)...)
			st := txntest.Load(t, fresh)
			if h, _ := st.Head(); h != int64(tc.newHead)+14 {
				t.Fatalf("new stream's head %d, want %d", h, tc.newHead+14)
			}
			if rep, err := txn.Verify(ctx, fresh, txn.VerifyOptions{}); err != nil || len(rep.Problems) > 0 {
				t.Fatalf("verify of the new stream: %v %v", rep, err)
			}
		})
	}
}

// TestLeftoverRecordVoid: a version a process of a deleted stream left
// in the new stream's log (it was created in the moment between its
// writer's identity check and its create) is void: readers take its
// number and change nothing, and the next commit takes the number after
// it. Nobody deletes it (a delete could race a committer that took the
// number). Readers that start from a snapshot hint past it never see it.
func TestLeftoverRecordVoid(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	l := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p", Logger: quietLogger()}, batchesFor("p", 1, 2, 1)...)
	st := txntest.Load(t, l)
	next := st.Version + 1
	leftover := []byte(`{"format":3,"version":` + jsonNum(next) + `,"writer":{"producer":"p","epoch":7},"time":"2026-12-07T00:00:00Z","txn":"dead","stream":"0123456789abcdef"}` + "\n")
	if err := store.CreateBytes(ctx, mem, txn.VersionKey(next), leftover); err != nil {
		t.Fatal(err)
	}
	if got := txntest.Load(t, l); got.Version != next || got.NextStep() != st.NextStep() {
		t.Fatalf("after the leftover: version %d, next step %d; want %d and %d (its number taken, nothing applied)", got.Version, got.NextStep(), next, st.NextStep())
	}
	if v, err := l.ReadVersion(ctx, next); err != nil || !v.Void() {
		t.Fatalf("reading the leftover: %+v, %v; want a void version", v, err)
	}
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p", Logger: quietLogger()}, batchesFor("p", 3, 3, 1)...)
	got := txntest.Load(t, l)
	if got.NextStep() != 3 || got.Version <= next+1 {
		t.Fatalf("next step %d at version %d; want 3, past version %d", got.NextStep(), got.Version, next+1)
	}
	for _, tgb := range got.Steps {
		checkTGBBytes(t, l, tgb)
	}
}

// TestReaderRefusesReplacedStream (issue 55 item 9): a reader holding a
// stream that was replaced never applies the new stream's versions; it
// gets ErrStreamReplaced and keeps what it had.
func TestReaderRefusesReplacedStream(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	old := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
	txntest.Produce(t, old, txn.ProducerOptions{ID: "p", Logger: quietLogger()}, batchesFor("p", 1, 3, 1)...)
	st := txntest.Load(t, old)
	wipe(t, mem)
	fresh := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
	txntest.Produce(t, fresh, txn.ProducerOptions{ID: "p", Logger: quietLogger()}, batchesFor("p", 1, 20, 1)...)
	was := st.Version
	if _, err := old.Refresh(ctx, st); !errors.Is(err, txn.ErrStreamReplaced) {
		t.Fatalf("refresh of the replaced stream: %v, want ErrStreamReplaced", err)
	}
	if st.Version != was {
		t.Fatalf("the reader applied the new stream's versions: %d, was %d", st.Version, was)
	}
	if err := old.CheckIdentity(ctx); !errors.Is(err, txn.ErrStreamReplaced) {
		t.Fatalf("identity: %v", err)
	}
	if err := fresh.CheckIdentity(ctx); err != nil {
		t.Fatalf("identity of the new stream: %v", err)
	}
}

func jsonNum(v uint64) string { b, _ := json.Marshal(v); return string(b) }

// TestLeftoverUploadNeverCommitted: the old producer's last upload lands
// in the new stream's prefix at a key the new stream's producer (same id,
// same epoch) reaches later. Nobody commits it into the new stream (before,
// a combining committer would have: it sits at a registered producer's
// next seq), and the new producer deletes it and uploads its own batch
// there (before: "holds an upload this producer did not make", for good).
func TestLeftoverUploadNeverCommitted(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	old := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
	po := txntest.Open(t, old, txn.ProducerOptions{ID: "p", Logger: quietLogger()})
	for seq := uint64(1); seq <= 4; seq++ {
		txnCommit(t, po, batchFor("p", seq, 1))
	}
	wipe(t, mem)
	fresh := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
	pn := txntest.Open(t, fresh, txn.ProducerOptions{ID: "p", Logger: quietLogger()})
	helper := txntest.Open(t, fresh, txn.ProducerOptions{ID: "q", Logger: quietLogger()})
	txnCommit(t, pn, batchFor("p", 1, 1))
	// The old producer's seq 5 upload: wrong bytes for the new stream.
	stale := batchFor("old", 5, 1)
	stale.Name, stale.Cursor = "b000005", "c000005"
	pd, err := po.Append(ctx, stale)
	if err == nil {
		_, err = pd.Wait(ctx)
	}
	if !errors.Is(err, txn.ErrStreamReplaced) {
		t.Fatalf("old producer: %v", err)
	}
	if _, err := mem.Stat(ctx, txn.ObjectKey("p", po.Epoch(), 5)); err != nil || po.Epoch() != pn.Epoch() {
		t.Fatalf("no leftover at the new producer's key (epochs %d, %d; %v): the test set up nothing", po.Epoch(), pn.Epoch(), err)
	}
	// The new stream's other producer commits while p's next seqs are
	// announced up to the leftover: it must never take the leftover.
	for seq := uint64(2); seq <= 8; seq++ {
		txnCommit(t, pn, batchFor("p", seq, 1))
		txnCommit(t, helper, batchFor("q", seq-1, 1))
	}
	for _, tgb := range txntest.Load(t, fresh).Steps {
		checkTGBBytes(t, fresh, tgb)
	}
}

// TestGCStopsWhenStreamReplaced: a gc holding a deleted stream (run's
// periodic gc outliving its stream) deletes nothing of the stream created
// at its URL since: not its pending deletes' keys, which the new stream's
// producer reuses, nor the new stream's objects as orphans.
func TestGCStopsWhenStreamReplaced(t *testing.T) {
	ctx := t.Context()
	w := &skewWorld{}
	mem := store.NewMemClock(w.clock(0))
	old := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096, RetainCheckpoints: 1})
	txntest.Produce(t, old, txn.ProducerOptions{ID: "p", Solo: true, Logger: quietLogger()}, batchesFor("p", 1, 6, 1)...)
	gcCheckpoints(t, old, 3)
	gcRun(t, old, txn.GCOptions{Grace: gcGrace, Now: w.clock(0), Logger: quietLogger()}) // reclaims below 4: pending deletes
	wipe(t, mem)
	fresh := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
	txntest.Produce(t, fresh, txn.ProducerOptions{ID: "p", Solo: true, Logger: quietLogger()}, batchesFor("p", 1, 6, 1)...)
	w.advance(time.Hour)
	if _, err := txn.GC(ctx, old, txn.GCOptions{Grace: gcGrace, Now: w.clock(0), Logger: quietLogger()}); !errors.Is(err, txn.ErrStreamReplaced) {
		t.Fatalf("gc of the replaced stream: %v, want ErrStreamReplaced", err)
	}
	st := txntest.Load(t, fresh)
	for _, tgb := range st.Steps {
		checkTGBBytes(t, fresh, tgb)
	}
	if rep, err := txn.Verify(ctx, fresh, txn.VerifyOptions{}); err != nil || len(rep.Problems) > 0 {
		t.Fatalf("verify of the new stream: %v %v", rep, err)
	}
}
