package txn_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// noLogCreates is a store on which, once armed, creates under _log/ fail
// as if the store were down, while data uploads work: a producer on it
// announces TGBs but can never commit a version itself.
type noLogCreates struct {
	store.Store
	armed *atomic.Bool
}

func (s noLogCreates) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	if s.armed.Load() && strings.HasPrefix(key, txn.LogPrefix) {
		return fmt.Errorf("create %s: %w", key, store.ErrUnreachable)
	}
	return s.Store.Create(ctx, key, r, size)
}

func (s noLogCreates) GetTail(ctx context.Context, key string, n int64) ([]byte, int64, error) {
	return store.GetTail(ctx, s.Store, key, n)
}

// TestCombinedByAnotherOnce: producer A can announce but never create a
// version; B, on a store that loses the response of every create (its
// versions' and its uploads'), commits A's TGBs with its own. Each TGB is
// committed exactly once, in each producer's order, A learns from the log
// which step each of its TGBs became, and B's own uploads whose create
// response was lost are recognised as its own, not uploaded twice.
func TestCombinedByAnotherOnce(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := open(t)
			newLog(t, s, txn.CreateOptions{Ranks: 2, ChunkSize: 4096, SnapshotEvery: 8})
			armed := &atomic.Bool{}
			la, err := txn.Open(ctx, noLogCreates{s, armed})
			if err != nil {
				t.Fatal(err)
			}
			lossy := store.NewFaulty(s, 11)
			lossy.Set(store.Fault{LostRate: 1}, store.OpCreate)
			lb, err := txn.Open(ctx, lossy)
			if err != nil {
				t.Fatal(err)
			}
			a, err := txn.OpenProducer(ctx, la, txn.ProducerOptions{ID: "a", Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			armed.Store(true) // from now on a can only announce
			const n = 12
			var wg sync.WaitGroup
			aSteps := make([]int64, n)
			wg.Go(func() {
				for i := range n {
					pd, err := a.Append(ctx, batchFor("a", uint64(i+1), 2))
					if err == nil {
						aSteps[i], err = pd.Wait(ctx)
					}
					if err != nil {
						t.Error(err)
						return
					}
				}
			})
			var byB atomic.Int64
			wg.Go(func() {
				b, err := txn.OpenProducer(ctx, lb, txn.ProducerOptions{ID: "b", Logger: quietLogger(), Observe: func(cs txn.CommitStats) {
					for _, ref := range cs.Included {
						if ref.Producer == "a" {
							byB.Add(1)
						}
					}
				}})
				if err != nil {
					t.Error(err)
					return
				}
				// b commits until it has reported every one of a's TGBs. Not
				// until the log holds them: every create's response is lost,
				// so the log can show a version b created while b still
				// reads it back, and Close would cancel that read.
				deadline := time.Now().Add(60 * time.Second)
				for seq := uint64(1); byB.Load() < n && time.Now().Before(deadline); seq++ {
					txnCommit(t, b, batchFor("b", seq, 2))
				}
				if err := b.Close(ctx); err != nil {
					t.Error(err)
				}
			})
			wg.Wait()
			if t.Failed() {
				return
			}
			if lossy.Injected(store.OpCreate) == 0 {
				t.Fatal("no create response was lost")
			}
			st := checkLogPrefix(t, s, map[string]uint64{"a": n})
			if got := byB.Load(); got != n {
				t.Errorf("b reported %d of a's TGBs in versions it created, want %d", got, n)
			}
			// a learned from the log where each of its TGBs went.
			for i, step := range aSteps {
				if tgb, ok := st.Step(step); !ok || tgb.Producer != "a" || tgb.Seq != uint64(i+1) {
					t.Errorf("a's seq %d: Wait said step %d, which holds %+v", i+1, step, tgb)
				}
			}
			if err := a.Close(ctx); err != nil {
				t.Errorf("closing a, whose TGBs b committed: %v", err)
			}
			// B uploaded each of its batches once: one object per seq.
			objs, _, err := s.List(ctx, "data/b/", "", 0)
			if err != nil {
				t.Fatal(err)
			}
			if bs := st.Producers["b"].Seq; uint64(len(objs)) != bs {
				t.Errorf("b committed %d TGBs and left %d objects", bs, len(objs))
			}
		})
	}
}

// txnCommit appends b and waits for its commit.
func txnCommit(t *testing.T, p *txn.Producer, b txn.Batch) {
	t.Helper()
	pd, err := p.Append(t.Context(), b)
	if err == nil {
		_, err = pd.Wait(t.Context())
	}
	if err != nil {
		t.Fatal(err)
	}
}

// checkLogPrefix is checkLog without the bytes, and for want's producers
// only (others may have committed any number).
func checkLogPrefix(t *testing.T, s store.Store, want map[string]uint64) *txn.State {
	t.Helper()
	st := loadClean(t, s)
	seen := checkSteps(t, st)
	for p, n := range want {
		if seen[p] != n {
			t.Errorf("producer %s: %d TGBs committed, want %d", p, seen[p], n)
		}
	}
	return st
}

// TestFencedAnnouncementNeverIncluded: a's first incarnation announces
// seqs 1-3 and a newer incarnation registers; a committer includes none
// of the fenced objects, whatever it probes, and does include what the
// new incarnation announces at the same seqs.
func TestFencedAnnouncementNeverIncluded(t *testing.T) {
	ctx := t.Context()
	s := store.NewMem()
	l := newLog(t, s, txn.CreateOptions{Ranks: 2, ChunkSize: 4096})
	e1, err := txn.RegisterForTest(ctx, l, "a")
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 3; seq++ {
		if err := txn.Announce(ctx, l, "a", e1, seq, batchFor("a", seq, 2)); err != nil {
			t.Fatal(err)
		}
	}
	e2, err := txn.RegisterForTest(ctx, l, "a")
	if err != nil {
		t.Fatal(err)
	}
	// The zombie goes on announcing after it was fenced.
	if err := txn.Announce(ctx, l, "a", e1, 4, batchFor("a", 4, 2)); err != nil {
		t.Fatal(err)
	}
	b, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "b", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 5; seq++ {
		txnCommit(t, b, batchFor("b", seq, 2))
	}
	st := loadClean(t, s)
	if st.Producers["a"].Seq != 0 {
		t.Fatalf("a's seq is %d: a fenced incarnation's announcement was committed", st.Producers["a"].Seq)
	}
	// The live incarnation's announcement at seq 1 is taken.
	if err := txn.Announce(ctx, l, "a", e2, 1, batchFor("a", 1, 2)); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(6); seq <= 8; seq++ {
		txnCommit(t, b, batchFor("b", seq, 2))
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	st = checkLogPrefix(t, s, map[string]uint64{"a": 1, "b": 8})
	for _, tgb := range st.Steps {
		if tgb.Producer == "a" && tgb.Epoch != e2 {
			t.Fatalf("step %d: a's TGB of fenced epoch %d", tgb.Step, tgb.Epoch)
		}
	}
}

// TestGapHoldsLaterSeqs: a's seqs 2 and 3 are announced but 1 is not (its
// upload failed); committers include none of them until 1 appears, then
// all three in order.
func TestGapHoldsLaterSeqs(t *testing.T) {
	ctx := t.Context()
	s := store.NewMem()
	l := newLog(t, s, txn.CreateOptions{Ranks: 2, ChunkSize: 4096})
	e, err := txn.RegisterForTest(ctx, l, "a")
	if err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{2, 3} {
		if err := txn.Announce(ctx, l, "a", e, seq, batchFor("a", seq, 2)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "b", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	for seq := uint64(1); seq <= 4; seq++ {
		txnCommit(t, b, batchFor("b", seq, 2))
	}
	if st := loadClean(t, s); st.Producers["a"].Seq != 0 {
		t.Fatalf("a's seq %d: a TGB after the gap was committed", st.Producers["a"].Seq)
	}
	if err := txn.Announce(ctx, l, "a", e, 1, batchFor("a", 1, 2)); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(5); seq <= 8; seq++ {
		txnCommit(t, b, batchFor("b", seq, 2))
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkLogPrefix(t, s, map[string]uint64{"a": 3, "b": 8})
}

// TestLeaderLetsOthersWrite: while producers keep a leader busy, other
// writers (a checkpoint, a new producer's register) still get versions
// in: a leader that created versions back to back would keep them one
// version behind for good.
func TestLeaderLetsOthersWrite(t *testing.T) {
	for _, busy := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d busy", busy), func(t *testing.T) { leaderLetsOthersWrite(t, busy) })
	}
}

func leaderLetsOthersWrite(t *testing.T, busy int) {
	ctx := t.Context()
	mem := store.NewMem()
	base := newLog(t, mem, txn.CreateOptions{Ranks: 1, ChunkSize: 4096, SnapshotEvery: 50})
	slow := store.NewFaulty(mem, 5)
	slow.Set(store.Fault{Latency: 2 * time.Millisecond})
	l := &txn.Log{Store: slow, Config: base.Config}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range busy {
		wg.Go(func() {
			id := fmt.Sprintf("busy-%d", i)
			p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: id, Logger: quietLogger()})
			if err != nil {
				t.Error(err)
				return
			}
			defer p.Close(context.WithoutCancel(ctx))
			for seq := uint64(1); ; seq++ {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := p.Append(ctx, batchFor(id, seq, 1)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	waitForSteps(t, base, 20)
	done := make(chan error, 2)
	go func() {
		_, err := txn.RecordCheckpoint(ctx, l, 5, quietLogger())
		done <- err
	}()
	go func() {
		p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "late", Logger: quietLogger()})
		if err == nil {
			err = p.Close(ctx)
		}
		done <- err
	}()
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(20 * time.Second):
			t.Error("a checkpoint or a register did not get a version in within 20 s while producers kept committing")
		}
	}
	close(stop)
	wg.Wait()
}

// TestNewerStreamRefused: a stream made by a newer build is refused with
// one line naming both versions and the fix; one that only a newer writer
// may write is still read.
func TestNewerStreamRefused(t *testing.T) {
	ctx := t.Context()
	for _, c := range []struct {
		name, config, openErr, writeErr string
	}{
		{"reader", `{"format":4,"reader_version":4,"writer_version":4,"stream_id":"x","ranks":1,"first_step":0,"chunk_size":4096,"snapshot_every":10,"retain_checkpoints":1}`,
			"_stream.json: stream format is newer than this build: the stream needs reader version 4, this build reads up to 3; upgrade lakestream", ""},
		{"writer", `{"format":4,"reader_version":3,"writer_version":4,"stream_id":"x","ranks":1,"first_step":0,"chunk_size":4096,"snapshot_every":10,"retain_checkpoints":1}`,
			"", "stream format is newer than this build: the stream needs writer version 4, this build writes up to 3; upgrade lakestream to write to it (reading it works)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := store.NewMem()
			if err := store.PutBytes(ctx, s, txn.StreamKey, []byte(c.config+"\n")); err != nil {
				t.Fatal(err)
			}
			l, err := txn.Open(ctx, s)
			if c.openErr != "" {
				if !errors.Is(err, txn.ErrNewerFormat) || errors.Is(err, txn.ErrCorrupt) || err.Error() != c.openErr {
					t.Fatalf("open: %v\nwant: %s", err, c.openErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Load(ctx); err != nil {
				t.Fatalf("a stream this build may read: %v", err)
			}
			_, err = txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "p", Logger: quietLogger()})
			if !errors.Is(err, txn.ErrNewerFormat) || err.Error() != c.writeErr {
				t.Fatalf("producer: %v\nwant: %s", err, c.writeErr)
			}
			st, err := l.Load(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Commit(ctx, st, func(*txn.State) (*txn.Version, error) {
				return &txn.Version{Config: &txn.ConfigChange{RetainCheckpoints: 3}}, nil
			}, quietLogger()); !errors.Is(err, txn.ErrNewerFormat) {
				t.Fatalf("an administrative write to a stream this build may not write: %v", err)
			}
		})
	}
}
