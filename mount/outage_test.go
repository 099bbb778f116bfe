package mount

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/cache"
	"github.com/lakestream/lakestream/fs"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// restartingStore injects faults into reads: while down, every GetRange
// fails as a store server that was killed does (connection refused:
// store.ErrUnreachable) until it is restarted; while corrupt, GetRange
// returns its bytes with one flipped.
type restartingStore struct {
	store.Store
	down    atomic.Bool
	corrupt atomic.Bool
	failed  atomic.Int64
}

func (s *restartingStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if s.down.Load() {
		s.failed.Add(1)
		return nil, fmt.Errorf("s3 get range %s: dial tcp 127.0.0.1:7070: connect: connection refused: %w", key, store.ErrUnreachable)
	}
	b, err := s.Store.GetRange(ctx, key, off, n)
	if err == nil && s.corrupt.Load() && len(b) > 0 {
		b = bytes.Clone(b)
		b[len(b)-1] ^= 0x20
	}
	return b, err
}

// TestPackLoaderRidesOutRestart: the pack loader's index reads through a
// store that is down (every read refused) and comes back: the load waits
// and returns the right pack, the index source is degraded during the
// outage and recovered after; a permanent error (the object deleted, its
// bytes corrupt) fails at once with its class, with a window of a minute;
// a caller whose context ends during an outage returns at once.
func TestPackLoaderRidesOutRestart(t *testing.T) {
	ctx := t.Context()
	rs := &restartingStore{Store: store.NewMem()}
	l, err := txn.Create(ctx, rs, txn.CreateOptions{Ranks: 4})
	if err != nil {
		t.Fatal(err)
	}
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p"}, txntest.Batches(40, func(i int) txn.Batch {
		b := txn.Batch{}
		for r := range 4 {
			b.Ranks = append(b.Ranks, []txn.FileSource{txn.BytesFile(fmt.Sprintf("f-%d-%d", i, r), bytes.Repeat([]byte{byte(r)}, 10+i))})
		}
		return b
	})...)
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src := cache.NewSource("index", slog.New(slog.DiscardHandler))
	pl := newPackLoader(indexLog(l, cache.Retry{Window: time.Minute, Source: src}), st.Step, rankSpan{})

	rs.down.Store(true)
	go func() {
		for rs.failed.Load() < 5 {
			time.Sleep(time.Millisecond)
		}
		if _, _, ok := src.Degraded(); !ok {
			t.Error("the index source is not degraded while its reads fail")
		}
		time.Sleep(time.Second) // down a second or more, as a restarted server
		rs.down.Store(false)
	}()
	start := time.Now()
	pk, err := pl.Pack(ctx, st.Steps[0], 2)
	if err != nil || len(pk.Files) != 1 || pk.Files[0].Name != "f-0-2" || pk.Files[0].Size != 10 {
		t.Fatalf("a pack loaded across a store restart: %+v, %v", pk, err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("the load returned after %s, before the store was back", d)
	}
	if _, _, ok := src.Degraded(); ok {
		t.Error("the index source is still degraded after a load succeeded")
	}

	for _, c := range []struct {
		name  string
		step  int
		rank  int
		want  error
		fault func()
	}{
		{"object deleted", 20, 1, store.ErrNotFound, func() {
			if err := rs.Store.Delete(ctx, st.Steps[20].Object.Key); err != nil {
				t.Fatal(err)
			}
		}},
		// Step 38: past the read-ahead of rank 1 from step 20 (21..36),
		// which would have its small index, sections and all, in memory.
		{"corrupt bytes", 38, 3, txn.ErrCorrupt, func() { rs.corrupt.Store(true) }},
	} {
		c.fault()
		start := time.Now()
		_, err := pl.Pack(ctx, st.Steps[c.step], c.rank)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: failed after %s; want at once", c.name, d)
		}
	}
	rs.corrupt.Store(false)
	if _, _, ok := src.Degraded(); ok {
		t.Error("permanent errors made the index source degraded")
	}

	// A reader that gives up during an outage returns at once.
	rs.down.Store(true)
	defer rs.down.Store(false)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	// No read-ahead reached step 18: its index needs the store.
	if _, err := pl.Pack(cctx, st.Steps[18], 0); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a load whose caller gave up: %v, want its context's error", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a caller that gave up after 300ms returned after %s", d)
	}
}

// TestDegradedReport: /health's reason names each failing source with how
// long and why, and says nothing once every source answered again.
func TestDegradedReport(t *testing.T) {
	src := newSources(slog.New(slog.DiscardHandler))
	if d := src.degraded(); d != "" {
		t.Fatalf("fresh sources degraded: %q", d)
	}
	for range 3 { // a source is degraded after 3 failures in a row (cache.Source)
		src.block.Failed(store.ErrUnreachable)
		src.log.Failed(errors.New("refreshing the manifest: 503 Slow Down"))
	}
	d := src.degraded()
	for _, want := range []string{"block for", "store unreachable", "log for", "503 Slow Down"} {
		if !strings.Contains(d, want) {
			t.Errorf("degraded %q does not say %q", d, want)
		}
	}
	if strings.Contains(d, "index") || strings.Contains(d, "heartbeat") {
		t.Errorf("degraded %q names a source that did not fail", d)
	}
	src.block.Answered()
	src.log.Answered()
	if d := src.degraded(); d != "" {
		t.Errorf("degraded after every source answered: %q", d)
	}
}

// TestTailBacksOffWhileFailing: a reader waits near the head and the
// version after it is overdue on a known cadence, so the next poll is due
// at once; after failed polls the tailer waits failDelay (half of
// PollInterval, doubling, at most backoffFactor x PollInterval) instead of
// polling a down store back to back, and polls on the cadence again after
// a success.
func TestTailBacksOffWhileFailing(t *testing.T) {
	st := txn.NewState(txn.StreamConfig{Ranks: 1, ChunkSize: txn.MinChunkSize})
	m := &mounted{opts: Options{PollInterval: 100 * time.Millisecond, IdlePollInterval: time.Minute}, view: fs.NewView(fs.NewSnapshot(st))}
	now := time.Now()
	m.highest.Store(0)
	m.lastRead.Store(now.UnixNano())
	f := &follower{st: st, now: time.Now}
	f.cad = cadence{last: now.Add(-time.Second), interval: 50 * time.Millisecond, samples: knownAfter}
	if at, _ := m.schedule(f, now, 0); at.After(now) {
		t.Fatalf("an overdue version on a known cadence is polled %s later; want at once", at.Sub(now))
	}
	for fails, want := range map[int]time.Duration{1: 100 * time.Millisecond, 2: 200 * time.Millisecond, 3: 400 * time.Millisecond, 9: 400 * time.Millisecond} {
		for range 20 {
			at, notBefore := m.schedule(f, now, fails)
			if d := at.Sub(now); d < want/2 || d > want || !at.Equal(notBefore) {
				t.Fatalf("after %d failed polls the next is %s later (not before %s); want %s to %s", fails, d, notBefore.Sub(now), want/2, want)
			}
		}
	}
}
