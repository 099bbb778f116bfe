package txn_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// backends returns a fresh store per call for each backend the log is
// tested on.
func backends(t *testing.T) map[string]func(t *testing.T) store.Store {
	return map[string]func(t *testing.T) store.Store{
		"mem": func(t *testing.T) store.Store { return store.NewMem() },
		"file": func(t *testing.T) store.Store {
			s, err := store.NewFile(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"s3": func(t *testing.T) store.Store {
			srv := s3test.Start(t)
			s, err := store.Open(t.Context(), srv.NewBucketURL(t))
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

func newLog(t *testing.T, s store.Store, o txn.CreateOptions) *txn.Log {
	t.Helper()
	l, err := txn.Create(t.Context(), s, o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// payload is the deterministic content of one file of one TGB, so a
// read-back can be checked without keeping what was written.
func payload(producer string, seq uint64, rank, file int) []byte {
	n := 100 + int(seq%7)*313 + rank*17 + file*5
	b := make([]byte, n)
	seed := fmt.Sprintf("%s/%d/%d/%d", producer, seq, rank, file)
	for i := range b {
		b[i] = seed[i%len(seed)] ^ byte(i)
	}
	return b
}

// batchesFor is batchFor of seq from, from+1, ..., to.
func batchesFor(producer string, from, to uint64, ranks int) []txn.Batch {
	return txntest.Batches(int(to-from+1), func(i int) txn.Batch { return batchFor(producer, from+uint64(i), ranks) })
}

func batchFor(producer string, seq uint64, ranks int) txn.Batch {
	b := txn.Batch{Name: fmt.Sprintf("b%06d", seq), Cursor: fmt.Sprintf("c%06d", seq)}
	for r := range ranks {
		b.Ranks = append(b.Ranks, []txn.FileSource{
			txn.BytesFile("x.bin", payload(producer, seq, r, 0)),
			txn.BytesFile("sub/y.bin", payload(producer, seq, r, 1)),
		})
	}
	b.Shared = []txn.FileSource{txn.BytesFile("meta.json", payload(producer, seq, -1, 0))}
	return b
}

// checkTGBBytes checks that tgb holds what batchFor wrote for its producer
// and seq: the batch and cursor names and every pack's bytes.
func checkTGBBytes(t *testing.T, l *txn.Log, tgb *txn.TGB) {
	t.Helper()
	if tgb.Batch != fmt.Sprintf("b%06d", tgb.Seq) || tgb.Cursor != fmt.Sprintf("c%06d", tgb.Seq) {
		t.Fatalf("step %d: batch %q cursor %q for seq %d", tgb.Step, tgb.Batch, tgb.Cursor, tgb.Seq)
	}
	ranks, shared, err := l.Packs(t.Context(), tgb)
	if err != nil {
		t.Fatalf("step %d: %v", tgb.Step, err)
	}
	for r, p := range ranks {
		checkPack(t, l, p, [][]byte{payload(tgb.Producer, tgb.Seq, r, 0), payload(tgb.Producer, tgb.Seq, r, 1)})
	}
	checkPack(t, l, shared, [][]byte{payload(tgb.Producer, tgb.Seq, -1, 0)})
}

// checkLog loads the stream from a clean (fault-free) store and checks the
// exactly-once, contiguity and order guarantees and every pack's bytes.
func checkLog(t *testing.T, s store.Store, want map[string]uint64) *txn.State {
	t.Helper()
	st := loadClean(t, s)
	l, err := txn.Open(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	seen := checkSteps(t, st)
	for _, tgb := range st.Steps {
		checkTGBBytes(t, l, tgb)
	}
	for p, n := range want {
		if seen[p] != n {
			t.Errorf("producer %s: %d TGBs committed, want %d", p, seen[p], n)
		}
		if ps := st.Producers[p]; ps == nil || ps.Seq != n || ps.Cursor != fmt.Sprintf("c%06d", n) {
			t.Errorf("producer %s state %+v, want seq %d", p, ps, n)
		}
	}
	return st
}

// loadClean loads the newest state through a fresh Open of s.
func loadClean(t *testing.T, s store.Store) *txn.State {
	t.Helper()
	l, err := txn.Open(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	st, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// checkSteps checks that the live steps are contiguous and that each
// producer's TGBs follow each other by seq (none lost, duplicated or
// reordered), and returns each producer's last seq.
func checkSteps(t *testing.T, st *txn.State) map[string]uint64 {
	t.Helper()
	seen := map[string]uint64{}
	for i, tgb := range st.Steps {
		if tgb.Step != st.LiveFrom+int64(i) {
			t.Fatalf("step %d at index %d", tgb.Step, i)
		}
		if tgb.Seq != seen[tgb.Producer]+1 {
			t.Fatalf("step %d: producer %s seq %d after seq %d: lost, duplicated or reordered", tgb.Step, tgb.Producer, tgb.Seq, seen[tgb.Producer])
		}
		seen[tgb.Producer] = tgb.Seq
	}
	return seen
}

func checkPack(t *testing.T, l *txn.Log, p *txn.Pack, files [][]byte) {
	t.Helper()
	data, err := l.Store.GetRange(t.Context(), p.Key, p.Off, p.Size)
	if err != nil {
		t.Fatalf("pack %s: %v", p.Key, err)
	}
	if err := txn.VerifyPack(p, data, l.Config.ChunkSize); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, bytes.Join(files, nil)) {
		t.Fatalf("pack %s: bytes differ from what was produced", p.Key)
	}
}

// TestConcurrentProducersExactlyOnce: 8 producers x 300 TGBs through a
// store that fails 5% of all calls and loses 10% of create and put
// responses after applying them.
func TestConcurrentProducersExactlyOnce(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			if name == "s3" {
				longtest.Skip(t, "8 producers x 150 TGBs through faults on versitygw; file:// stays")
			}
			const producers, perProducer = 8, 150
			clean := open(t)
			newLog(t, clean, txn.CreateOptions{Ranks: 2, FirstStep: 1000, ChunkSize: 4096, SnapshotEvery: 50})
			faulty := store.NewFaulty(clean, 7)
			faulty.Set(store.Fault{ErrRate: 0.05})
			faulty.Set(store.Fault{ErrRate: 0.05, LostRate: 0.1}, store.OpCreate, store.OpPut)
			ctx := t.Context()
			l, err := txn.Open(ctx, faulty)
			if err != nil {
				// Open has no retry of its own; the test retries it like a caller would.
				for err != nil {
					l, err = txn.Open(ctx, faulty)
				}
			}
			var wg sync.WaitGroup
			errs := make(chan error, producers)
			want := map[string]uint64{}
			for i := range producers {
				id := fmt.Sprintf("prod-%d", i)
				want[id] = perProducer
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs <- runProducer(ctx, l, id, perProducer)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			// Data and versions are creates; puts are only snapshots and hints.
			if faulty.Injected(store.OpCreate) == 0 || faulty.Injected(store.OpGetRange)+faulty.Injected(store.OpGet) == 0 {
				t.Fatalf("no faults were injected (create %d, get %d, get range %d)", faulty.Injected(store.OpCreate), faulty.Injected(store.OpGet), faulty.Injected(store.OpGetRange))
			}
			st := checkLog(t, clean, want)
			if head, _ := st.Head(); head != 1000+producers*perProducer-1 {
				t.Fatalf("head %d", head)
			}
			t.Logf("%d versions for %d TGBs; faults injected: create %d put %d get %d", st.Version, producers*perProducer,
				faulty.Injected(store.OpCreate), faulty.Injected(store.OpPut), faulty.Injected(store.OpGet))
		})
	}
}

func runProducer(ctx context.Context, l *txn.Log, id string, n int) error {
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: id, Logger: quietLogger()})
	if err != nil {
		return err
	}
	var last *txn.Pending
	for seq := uint64(1); seq <= uint64(n); seq++ {
		pd, err := p.Append(ctx, batchFor(id, seq, l.Config.Ranks))
		if err != nil {
			return fmt.Errorf("%s append %d: %w", id, seq, err)
		}
		if pd.Seq != seq {
			return fmt.Errorf("%s: append %d got seq %d", id, seq, pd.Seq)
		}
		last = pd
	}
	if _, err := last.Wait(ctx); err != nil {
		return err
	}
	return p.Close(ctx)
}

// TestZombieFenced: an old incarnation keeps appending while a new one
// registers; after the new register no version by the old epoch exists.
func TestZombieFenced(t *testing.T) {
	for name, open := range backends(t) {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			s := open(t)
			l := newLog(t, s, txn.CreateOptions{Ranks: 1})
			old, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "p", Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			stop := make(chan struct{})
			zombieErr := make(chan error, 1)
			go func() {
				for seq := uint64(1); ; seq++ {
					pd, err := old.Append(ctx, batchFor("p", seq, 1))
					if err == nil {
						_, err = pd.Wait(ctx)
					}
					if err != nil {
						zombieErr <- err
						return
					}
					select {
					case <-stop:
						zombieErr <- nil
						return
					default:
					}
				}
			}()
			// Let the old one commit a few, then take over.
			waitForSteps(t, l, 5)
			fresh, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "p", Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			err = <-zombieErr
			close(stop)
			if !errors.Is(err, txn.ErrFenced) {
				t.Fatalf("old incarnation after takeover: %v, want ErrFenced", err)
			}
			if _, err := old.Append(ctx, batchFor("p", 999, 1)); !errors.Is(err, txn.ErrFenced) {
				t.Fatalf("append by a fenced producer: %v", err)
			}
			// The new incarnation resumes exactly after the old one's last commit.
			r := fresh.Resume()
			if r.Epoch != 2 || r.Cursor != fmt.Sprintf("c%06d", r.Seq) {
				t.Fatalf("resume %+v", r)
			}
			txntest.Commit(t, fresh, batchFor("p", r.Seq+1, 1))
			if err := fresh.Close(ctx); err != nil {
				t.Fatal(err)
			}
			// Scan the log: after epoch 2's register, only epoch 2 writes.
			registered := false
			for v := uint64(1); ; v++ {
				ver, err := l.ReadVersion(ctx, v)
				if errors.Is(err, store.ErrNotFound) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if ver.Register != nil && ver.Writer.Epoch == 2 {
					registered = true
				}
				if registered && ver.Writer.Epoch == 1 {
					t.Fatalf("version %d written by the fenced epoch 1", v)
				}
			}
			checkLog(t, s, map[string]uint64{"p": r.Seq + 1})
		})
	}
}

func waitForSteps(t *testing.T, l *txn.Log, n int) {
	t.Helper()
	for {
		st, err := l.Load(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(st.Steps) >= n {
			return
		}
	}
}

// TestLostCommitResponse: every create's response is lost after it is
// applied; each TGB still commits exactly once.
func TestLostCommitResponse(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	newLog(t, mem, txn.CreateOptions{Ranks: 1})
	f := store.NewFaulty(mem, 3)
	f.Set(store.Fault{LostRate: 1}, store.OpCreate)
	l, err := txn.Open(ctx, f)
	if err != nil {
		t.Fatal(err)
	}
	if err := runProducer(ctx, l, "p", 20); err != nil {
		t.Fatal(err)
	}
	st := checkLog(t, mem, map[string]uint64{"p": 20})
	if st.Version != 21 { // register + 20 commits at most; grouping may make fewer
		t.Logf("version %d", st.Version)
	}
}

// TestCorruptRecords: foreign or damaged objects in _log/ give a clear
// error naming the object, no panic, and nothing past them is applied.
func TestCorruptRecords(t *testing.T) {
	// valid returns a correct next version built by a real commit on a
	// scratch copy, so each case only breaks one thing.
	cases := []struct {
		name     string
		mut      func(v map[string]any)
		raw      string
		want     string
		keepKeys bool // else pack keys follow the mutated TGB, so only one thing is broken
	}{
		{name: "garbage", raw: "{not json", want: "not a version record"},
		{name: "trailing", raw: `{"format":2,"version":3} {}`, want: "trailing data"},
		{name: "unknown format", mut: func(v map[string]any) { v["format"] = 99 }, want: "format version 99"},
		{name: "wrong number", mut: func(v map[string]any) { v["version"] = 7 }, want: "says version 7"},
		{name: "step gap", mut: func(v map[string]any) { tgb(v)["step"] = 5 }, want: "gap or duplicate"},
		{name: "duplicated step", mut: func(v map[string]any) { tgb(v)["step"] = 0 }, want: "gap or duplicate"},
		{name: "seq skip", mut: func(v map[string]any) { tgb(v)["seq"] = 9 }, want: "does not follow seq"},
		{name: "fenced epoch", mut: func(v map[string]any) { tgb(v)["epoch"] = 7 }, want: "not the producer's registered epoch"},
		{name: "no self-description", mut: func(v map[string]any) { delete(object(v), "footer") }, want: "in a stream of writer version 3"},
		{name: "no object", mut: func(v map[string]any) { delete(tgb(v), "object") }, want: "no data object"},
		{name: "table past the object", mut: func(v map[string]any) { object(v)["table"] = object(v)["size"] }, want: "out of order or out of bounds"},
		{name: "huge table", mut: func(v map[string]any) { object(v)["size"] = 1 << 40 }, want: "out of bounds"},
		{name: "foreign writer", mut: func(v map[string]any) {
			v["writer"] = map[string]any{"producer": "ghost", "epoch": 1}
			tgb(v)["producer"] = "ghost"
		}, want: "not the producer's registered epoch"},
		{name: "foreign object key", keepKeys: true, mut: func(v map[string]any) {
			object(v)["key"] = txn.ObjectKey("p", 1, 1) // step 0's data
		}, want: "object key"},
		{name: "seq rewind", mut: func(v map[string]any) {
			delete(v, "tgbs")
			v["producer"] = map[string]any{"seq": 0}
		}, want: "no producer field"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := t.Context()
			s := store.NewMem()
			l := newLog(t, s, txn.CreateOptions{Ranks: 1})
			// Version 1: register; version 2: step 0.
			if err := runProducer(ctx, l, "p", 1); err != nil {
				t.Fatal(err)
			}
			// Build version 3 as the next commit would, from version 2's shape.
			v2, err := store.ReadAll(ctx, s, txn.VersionKey(2))
			if err != nil {
				t.Fatal(err)
			}
			body := []byte(c.raw)
			if c.raw == "" {
				var m map[string]any
				if err := jsonUnmarshal(v2, &m); err != nil {
					t.Fatal(err)
				}
				m["version"] = 3
				tgb(m)["step"] = 1
				tgb(m)["seq"] = 2
				c.mut(m)
				if !c.keepKeys {
					rekey(m)
				}
				body = jsonMarshal(t, m)
			}
			if err := store.PutBytes(ctx, s, txn.VersionKey(3), body); err != nil {
				t.Fatal(err)
			}
			// A valid version 4 after it must not be applied either.
			_ = store.PutBytes(ctx, s, txn.VersionKey(4), v2)
			st, err := l.Load(ctx)
			if err == nil {
				t.Fatalf("loaded a log with a bad version 3 (head version %d)", st.Version)
			}
			if !errors.Is(err, txn.ErrCorrupt) || !strings.Contains(err.Error(), txn.VersionKey(3)) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %q: want ErrCorrupt naming %s and saying %q", err, txn.VersionKey(3), c.want)
			}
			// Refresh from a good state stops before the bad version.
			good := txn.NewState(l.Config)
			n, err := l.Refresh(ctx, good)
			if err == nil || n != 2 || good.Version != 2 {
				t.Fatalf("refresh applied %d versions (state %d), err %v; want exactly 2 and an error", n, good.Version, err)
			}
		})
	}
}

func tgb(v map[string]any) map[string]any    { return v["tgbs"].([]any)[0].(map[string]any) }
func object(v map[string]any) map[string]any { return tgb(v)["object"].(map[string]any) }

// TestSnapshotsAndHint: snapshots bound what Load reads, and a stale,
// garbled or dangling hint changes nothing but the cost.
func TestSnapshotsAndHint(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	l := newLog(t, mem, txn.CreateOptions{Ranks: 1, SnapshotEvery: 10})
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p", Solo: true}, batchesFor("p", 1, 34, 1)...)
	// 35 versions: register + 34 single-TGB commits; snapshots at 10, 20, 30.
	for _, v := range []uint64{10, 20, 30} {
		if _, err := mem.Stat(ctx, txn.SnapshotKey(v)); err != nil {
			t.Fatalf("snapshot %d: %v", v, err)
		}
	}
	counting := &countingStore{Store: mem}
	cl := &txn.Log{Store: counting, Config: l.Config}
	ref := checkLog(t, mem, map[string]uint64{"p": 34})
	st, err := cl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 31..35 and absent ones: read-ahead doubles (1, 2, 4), so 7 reads, none
	// before the snapshot.
	if st.Version != 35 || counting.versionReads() > 7 || counting.minVersionRead() != 31 {
		t.Fatalf("load read %d versions (from %d) to reach %d; want at most 7 reads from snapshot 30", counting.versionReads(), counting.minVersionRead(), st.Version)
	}
	if !bytes.Equal(jsonMarshal(t, st.Steps), jsonMarshal(t, ref.Steps)) {
		t.Fatal("state from snapshot differs from state from versions")
	}
	for name, hint := range map[string]string{"stale": "10", "garbled": "x!", "dangling": "90"} {
		if err := store.PutBytes(ctx, mem, txn.HintKey, []byte(hint)); err != nil {
			t.Fatal(err)
		}
		st, err := l.Load(ctx)
		if err != nil || st.Version != 35 || len(st.Steps) != 34 {
			t.Fatalf("%s hint: version %v err %v", name, st, err)
		}
	}
}

type countingStore struct {
	store.Store
	mu    sync.Mutex
	reads int
	min   uint64
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if v, ok := txn.ParseVersionKey(key); ok {
		c.mu.Lock()
		c.reads++
		if c.min == 0 || v < c.min {
			c.min = v
		}
		c.mu.Unlock()
	}
	return c.Store.Get(ctx, key)
}

func (c *countingStore) minVersionRead() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.min
}

func (c *countingStore) versionReads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

func TestCheckpoints(t *testing.T) {
	ctx := t.Context()
	s := store.NewMem()
	l := newLog(t, s, txn.CreateOptions{Ranks: 1, FirstStep: 10})
	if _, err := txn.RecordCheckpoint(ctx, l, 10, quietLogger()); !errors.Is(err, txn.ErrNotCommitted) {
		t.Fatalf("checkpoint on an empty stream: %v", err)
	}
	if err := runProducer(ctx, l, "p", 5); err != nil {
		t.Fatal(err)
	}
	if _, err := txn.RecordCheckpoint(ctx, l, 15, quietLogger()); !errors.Is(err, txn.ErrNotCommitted) {
		t.Fatalf("checkpoint past the head: %v", err)
	}
	st1, err := txn.RecordCheckpoint(ctx, l, 12, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	st2, err := txn.RecordCheckpoint(ctx, l, 12, quietLogger())
	if err != nil || st2.Version != st1.Version {
		t.Fatalf("duplicate checkpoint committed a version (%d -> %d) or failed: %v", st1.Version, st2.Version, err)
	}
	if fmt.Sprint(st2.Checkpoints) != "[12]" {
		t.Fatalf("checkpoints %v", st2.Checkpoints)
	}
}

func TestCreateRefusesExistingStream(t *testing.T) {
	s := store.NewMem()
	newLog(t, s, txn.CreateOptions{Ranks: 1})
	if _, err := txn.Create(t.Context(), s, txn.CreateOptions{Ranks: 1}); !errors.Is(err, txn.ErrStreamExists) {
		t.Fatalf("second create: %v", err)
	}
	if _, err := txn.Open(t.Context(), store.NewMem()); !errors.Is(err, txn.ErrNoStream) {
		t.Fatalf("open of an empty store: %v", err)
	}
	for _, o := range []txn.CreateOptions{{Ranks: 0}, {Ranks: 1, FirstStep: -1}, {Ranks: 1, ChunkSize: 10}} {
		if _, err := txn.Create(t.Context(), store.NewMem(), o); err == nil {
			t.Fatalf("create accepted %+v", o)
		}
	}
}

// TestSourceErrors: a file that is shorter or longer than declared fails
// Append with ErrSource, queues nothing, and the producer goes on.
func TestSourceErrors(t *testing.T) {
	ctx := t.Context()
	l := newLog(t, store.NewMem(), txn.CreateOptions{Ranks: 1})
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "p", Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	short := txn.BytesFile("a", []byte("abc"))
	short.Size = 10
	long := txn.BytesFile("a", []byte("abcdef"))
	long.Size = 2
	for _, f := range []txn.FileSource{short, long, txn.BytesFile("../x", nil)} {
		if _, err := p.Append(ctx, txn.Batch{Ranks: [][]txn.FileSource{{f}}}); !errors.Is(err, txn.ErrSource) {
			t.Fatalf("append of a bad file: %v", err)
		}
	}
	pd, err := p.Append(ctx, txn.Batch{Ranks: [][]txn.FileSource{{txn.BytesFile("ok", []byte{1})}}})
	if err != nil {
		t.Fatal(err)
	}
	if step, err := pd.Wait(ctx); err != nil || step != 0 || pd.Seq != 1 {
		t.Fatalf("step %d seq %d err %v", step, pd.Seq, err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

func jsonMarshal(t *testing.T, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rekey sets every object key of the TGBs in a version map to what the TGB's
// producer, epoch and seq name.
func rekey(v map[string]any) {
	tgbs, _ := v["tgbs"].([]any)
	for _, x := range tgbs {
		t := x.(map[string]any)
		prod, _ := t["producer"].(string)
		epoch := uint64(toFloat(t["epoch"]))
		seq := uint64(toFloat(t["seq"]))
		if o, ok := t["object"].(map[string]any); ok {
			o["key"] = txn.ObjectKey(prod, epoch, seq)
		}
	}
}

func toFloat(x any) float64 {
	switch n := x.(type) {
	case float64:
		return n
	case int:
		return float64(n)
	}
	return 0
}
