package cache

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/txn"
)

// gateStore holds every GetRange until open is closed (or the call's
// context ends).
type gateStore struct {
	*countingStore
	open  chan struct{}
	held  atomic.Int64 // calls waiting at the gate
	calls atomic.Int64 // calls made, those that gave up at the gate too
}

func (s *gateStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	s.calls.Add(1)
	s.held.Add(1)
	defer s.held.Add(-1)
	select {
	case <-s.open:
	case <-ctx.Done():
		return nil, fmt.Errorf("get range %s: %w", key, ctx.Err())
	}
	return s.countingStore.GetRange(ctx, key, off, n)
}

// TestFillOutlivesDroppedJob: a prefetch job is dropped while an open
// waits for a file the job is filling (issue 43 item 2): the fill goes on
// for the open, which gets the exact bytes from that one GET, never a
// second fetch.
func TestFillOutlivesDroppedJob(t *testing.T) {
	backings(t, 64<<20, func(t *testing.T, b *Backing) {
		s := &gateStore{countingStore: newCounting(), open: make(chan struct{})}
		c := newTestCache(t, s, 1024*testChunk)
		files := c.UseFiles(FilesOptions{Budget: 512 * testChunk, MinSize: testChunk, Backing: b})
		pk, parts := putFiles(t, s.countingStore, "data/p/1/0/tgb.pack", 4*testChunk)
		st := &steps{packs: map[int64]*txn.Pack{0: pk}}
		pctx, stop := context.WithCancel(context.Background())
		defer stop()
		p := c.NewPrefetcher(pctx, PrefetchOptions{Depth: 1, Committed: st.committed, Pack: st.pack})
		p.Touch(0, 0)
		waitUntil(t, func() bool { return s.held.Load() == 1 }) // the job's GET is in flight

		type result struct {
			h   *Handle
			err error
		}
		res := make(chan result, 1)
		go func() {
			h, err := files.Open(context.Background(), pk, &pk.Files[0])
			res <- result{h, err}
		}()
		k := fileKey{pk.Key, pk.Off + pk.Files[0].Off}
		waitUntil(t, func() bool {
			files.mu.Lock()
			defer files.mu.Unlock()
			mf := files.files[k]
			return mf != nil && mf.waiters == 1
		})
		stop() // drops every job: the one filling the file the open waits for
		close(s.open)
		r := <-res
		if r.err != nil {
			t.Fatalf("an open whose prefetch job was dropped under it: %v", r.err)
		}
		defer r.h.Release()
		if !bytes.Equal(readHandle(t, r.h), parts[0]) {
			t.Fatal("wrong bytes")
		}
		if g := s.calls.Load(); g != 1 {
			t.Errorf("%d GETs for one file whose job was dropped while an open waited; want the job's one", g)
		}
	})
}

// TestDroppedJobCancelsUnwantedFill: a job dropped while it fills files
// nobody waits for cancels their GET and gives their room back.
func TestDroppedJobCancelsUnwantedFill(t *testing.T) {
	s := &gateStore{countingStore: newCounting(), open: make(chan struct{})}
	c := newTestCache(t, s, 1024*testChunk)
	files := c.UseFiles(FilesOptions{Budget: 512 * testChunk, MinSize: testChunk})
	pk, _ := putFiles(t, s.countingStore, "data/p/1/0/tgb.pack", 4*testChunk, 4*testChunk)
	st := &steps{packs: map[int64]*txn.Pack{0: pk}}
	pctx, stop := context.WithCancel(context.Background())
	defer stop()
	p := c.NewPrefetcher(pctx, PrefetchOptions{Depth: 1, Committed: st.committed, Pack: st.pack})
	p.Touch(0, 0)
	waitUntil(t, func() bool { return s.held.Load() == 1 })
	stop()
	waitUntil(t, func() bool { return s.held.Load() == 0 && files.Stats().Bytes == 0 })
}

// TestFillsInFlight: the prefetcher keeps one memory-file fill in flight
// per rank being read, plus one (a GET is under way when another ends),
// and never fewer than three (one reader outruns two): three for one or
// two ranks, five for four, however many files the window holds (fills
// beyond those share the link and make every file later).
func TestFillsInFlight(t *testing.T) {
	s := &gateStore{countingStore: newCounting(), open: make(chan struct{})}
	defer close(s.open)
	// More prefetch GETs allowed than the fills may take.
	c, err := New(Options{Store: s, ChunkSize: testChunk, Size: 1024 * testChunk, Fetchers: 16, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.UseFiles(FilesOptions{Budget: 512 * testChunk, MinSize: testChunk})
	const nsteps, ranks = 8, 4
	st := &steps{}
	for n := range int64(nsteps) {
		for r := range ranks {
			pk, _ := putFiles(t, s.countingStore, fmt.Sprintf("data/p/%d/%d/tgb.pack", n, r), 2*testChunk)
			st.add(n, r, pk)
		}
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: nsteps - 1, Committed: st.committed, Pack: st.pack})
	inFlight := func(want int64) {
		t.Helper()
		waitUntil(t, func() bool { return s.held.Load() >= want })
		// The scheduler issues what it may as soon as it is kicked: a
		// fill past the bound would be at the gate by now.
		time.Sleep(50 * time.Millisecond)
		if got := s.held.Load(); got != want {
			t.Fatalf("%d fills in flight, want %d", got, want)
		}
	}
	p.Touch(0, 0)
	inFlight(minFills)
	p.Touch(0, 1)
	inFlight(minFills)
	for r := 2; r < ranks; r++ {
		p.Touch(0, r)
	}
	inFlight(ranks + 1)
}
