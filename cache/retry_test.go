package cache

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

	"github.com/lakestream/lakestream/store"
)

// outageStore fails every GetRange with a transient error (as a store
// that refuses connections: store.ErrUnreachable) until it is healed, as
// a store server that is down and then restarted.
type outageStore struct {
	*countingStore
	down   atomic.Bool
	failed atomic.Int64
	onFail atomic.Pointer[func()] // called by each failing call, if set
}

func (s *outageStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if s.down.Load() {
		s.failed.Add(1)
		if f := s.onFail.Load(); f != nil {
			(*f)()
		}
		return nil, fmt.Errorf("get range %s: dial tcp 127.0.0.1:1: connect: connection refused: %w", key, store.ErrUnreachable)
	}
	return s.countingStore.GetRange(ctx, key, off, n)
}

// healAfter heals s once it has failed n calls.
func (s *outageStore) healAfter(t testing.TB, n int64) {
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for s.failed.Load() < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		s.down.Store(false)
	}()
}

func newRetryCache(t testing.TB, s store.Store, window time.Duration, src *Source) *Cache {
	t.Helper()
	c, err := New(Options{Store: s, ChunkSize: testChunk, Size: 256 * testChunk, Fetchers: 4,
		Logger: slog.New(slog.DiscardHandler), Retry: Retry{Window: window, Source: src}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestRetryRidesOutOutage: block reads and memory-file fills started while
// the store is down wait for it and return the exact bytes once it is
// back; the source is degraded during the outage and recovered after it.
func TestRetryRidesOutOutage(t *testing.T) {
	s := &outageStore{countingStore: newCounting()}
	src := NewSource("block", slog.New(slog.DiscardHandler))
	c := newRetryCache(t, s, time.Minute, src)
	p, data := putPack(t, s, "data/p/1/1/rank-0.pack", 3*testChunk+100, 1)
	files := c.UseFiles(FilesOptions{Budget: 1 << 20, MinSize: 1})
	fp, parts := putFiles(t, s.countingStore, "data/p/1/2/rank-0.pack", 3000, 5000)

	s.down.Store(true)
	s.healAfter(t, 6)
	buf := make([]byte, p.Size)
	n, err := c.ReadAt(t.Context(), p, buf, 0)
	if err != nil || !bytes.Equal(buf[:n], data) {
		t.Fatalf("a read across an outage: %d bytes, %v (or wrong bytes)", n, err)
	}
	if _, _, down := src.Degraded(); down {
		t.Error("the source is still degraded after a successful read")
	}

	// Each failing call looks at the source: a retry comes after the
	// previous failure was reported, so it must see the source degraded.
	// (A goroutine polling for it could miss the window on a busy machine.)
	var sawDegraded atomic.Bool
	look := func() {
		if _, _, ok := src.Degraded(); ok {
			sawDegraded.Store(true)
		}
	}
	s.onFail.Store(&look)
	s.down.Store(true)
	s.healAfter(t, s.failed.Load()+4)
	h, err := files.Open(t.Context(), fp, &fp.Files[1])
	if err != nil {
		t.Fatalf("an open across an outage: %v", err)
	}
	defer h.Release()
	if got := readHandle(t, h); !bytes.Equal(got, parts[1]) {
		t.Fatal("the memory file filled across an outage holds wrong bytes")
	}
	if !sawDegraded.Load() {
		t.Error("the source was never degraded while the store was down")
	}
	// Other fills of the step may still be finishing their last attempt:
	// the source recovers once one of them is answered.
	waitUntil(t, func() bool { _, _, down := src.Degraded(); return !down })
}

// TestRetryPermanentFailsAtOnce: with a window of a minute, a missing
// object fails at once (ErrNotFound), a corrupt block after the one
// refetch (ErrChecksum), a corrupt memory file after the one refill; none
// waits, and none counts as the store failing.
func TestRetryPermanentFailsAtOnce(t *testing.T) {
	s := newCounting()
	src := NewSource("block", slog.New(slog.DiscardHandler))
	c := newRetryCache(t, s, time.Minute, src)
	files := c.UseFiles(FilesOptions{Budget: 1 << 20, MinSize: 1})
	p, _ := putPack(t, s, "data/p/1/1/rank-0.pack", 2*testChunk, 1)
	fp, _ := putFiles(t, s, "data/p/1/2/rank-0.pack", 3000)
	gone := *p
	gone.Key = "data/p/1/9/rank-0.pack"
	s.corrupt[p.Key] = -1
	s.corrupt[fp.Key] = -1
	cases := []struct {
		name string
		want error
		read func() error
	}{
		{"missing block", store.ErrNotFound, func() error {
			_, err := c.ReadAt(t.Context(), &gone, make([]byte, 10), 0)
			return err
		}},
		{"corrupt block", ErrChecksum, func() error {
			_, err := c.ReadAt(t.Context(), p, make([]byte, 10), 0)
			return err
		}},
		{"corrupt memory file", ErrChecksum, func() error {
			_, err := files.Open(t.Context(), fp, &fp.Files[0])
			return err
		}},
	}
	for _, tc := range cases {
		start := time.Now()
		err := tc.read()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s: failed after %s; want at once", tc.name, d)
		}
	}
	if _, _, down := src.Degraded(); down {
		t.Error("permanent errors made the source degraded")
	}
}

// TestRetryCancelStopsWait: a reader whose context ends while the store is
// down returns at once with the context's error, and its block fetch
// (nobody else waits for it) stops retrying; an open of a memory file
// returns at once too; Retry.Do itself stops in its backoff.
func TestRetryCancelStopsWait(t *testing.T) {
	type setup struct {
		s     *outageStore // down during the read, if set
		stops bool         // its fetch stops with its reader
		read  func(context.Context) error
	}
	reads := map[string]func() setup{
		"block read": func() setup {
			s := &outageStore{countingStore: newCounting()}
			c := newRetryCache(t, s, time.Hour, nil)
			p, _ := putPack(t, s, "data/p/1/1/rank-0.pack", testChunk, 1)
			return setup{s, true, func(ctx context.Context) error {
				_, err := c.ReadAt(ctx, p, make([]byte, 10), 0)
				return err
			}}
		},
		"memory-file open": func() setup {
			s := &outageStore{countingStore: newCounting()}
			c := newRetryCache(t, s, time.Hour, nil)
			files := c.UseFiles(FilesOptions{Budget: 1 << 20, MinSize: 1})
			fp, _ := putFiles(t, s.countingStore, "data/p/1/2/rank-0.pack", 3000)
			// The fill outlives the open: it is kept for the next one.
			return setup{s, false, func(ctx context.Context) error {
				_, err := files.Open(ctx, fp, &fp.Files[0])
				return err
			}}
		},
		"Retry.Do": func() setup {
			return setup{nil, false, func(ctx context.Context) error {
				return Retry{Window: time.Hour}.Do(ctx, func(context.Context) error { return store.ErrUnreachable })
			}}
		},
	}
	for name, mk := range reads {
		su := mk()
		if su.s != nil {
			su.s.down.Store(true)
		}
		ctx, cancel := context.WithCancel(t.Context())
		errc := make(chan error, 1)
		go func() { errc <- su.read(ctx) }()
		time.Sleep(300 * time.Millisecond) // in the backoff, a few attempts in
		cancel()
		select {
		case err := <-errc:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s cancelled during an outage: %v, want context.Canceled", name, err)
			}
		case <-time.After(time.Second):
			t.Fatalf("%s: still waiting 1s after its context was cancelled", name)
		}
		if !su.stops {
			continue
		}
		time.Sleep(10 * time.Millisecond) // an attempt in flight ends
		before := su.s.failed.Load()
		time.Sleep(retryWait.Max + 500*time.Millisecond)
		if n := su.s.failed.Load() - before; n > 0 {
			t.Errorf("%s: %d GETs after its reader left; the fetch still retries", name, n)
		}
	}
}

// TestRetryWindow: a store down for longer than the window fails a read
// with its error once the window is over; a read that starts after the
// source has been failing a whole window makes one attempt and fails.
func TestRetryWindow(t *testing.T) {
	s := &outageStore{countingStore: newCounting()}
	src := NewSource("block", slog.New(slog.DiscardHandler))
	c := newRetryCache(t, s, 500*time.Millisecond, src)
	p, _ := putPack(t, s, "data/p/1/1/rank-0.pack", 2*testChunk, 1)
	s.down.Store(true)
	start := time.Now()
	_, err := c.ReadAt(t.Context(), p, make([]byte, 10), 0)
	if d := time.Since(start); !errors.Is(err, store.ErrUnreachable) || d < 400*time.Millisecond || d > 2*time.Second {
		t.Fatalf("a read with the store down: %v after %s; want store.ErrUnreachable after the 500ms window", err, d)
	}
	before := s.failed.Load()
	start = time.Now()
	_, err = c.ReadAt(t.Context(), p, make([]byte, 10), testChunk)
	if d := time.Since(start); !errors.Is(err, store.ErrUnreachable) || d > 100*time.Millisecond || s.failed.Load()-before != 1 {
		t.Errorf("a read after a window of failures: %v after %s, %d GETs; want one failed GET at once", err, d, s.failed.Load()-before)
	}
}

// TestSourceHysteresis (issue 43 item 15): intermittent errors (every
// tenth call fails, as under a few percent of 503 SlowDown) never make a
// source degraded nor log a line; failures in a row do, with one line,
// and the first answer after them ends it with one more.
func TestSourceHysteresis(t *testing.T) {
	var logs bytes.Buffer
	src := NewSource("block", slog.New(slog.NewTextHandler(&logs, nil)))
	for i := range 200 {
		if i%10 == 9 {
			src.Failed(errors.New("SlowDown (HTTP 503)"))
		} else {
			src.Answered()
		}
		if _, _, down := src.Degraded(); down {
			t.Fatalf("degraded after call %d of intermittent errors", i)
		}
	}
	if logs.Len() != 0 {
		t.Fatalf("intermittent errors logged:\n%s", logs.String())
	}
	src.Answered()
	for range 3 {
		src.Failed(errors.New("connection refused"))
	}
	if _, cause, down := src.Degraded(); !down || cause.Error() != "connection refused" {
		t.Fatalf("after %d failures in a row: degraded %v, cause %v", 3, down, cause)
	}
	src.Failed(errors.New("connection refused"))
	src.Answered()
	if _, _, down := src.Degraded(); down {
		t.Fatal("still degraded after an answer")
	}
	if n := strings.Count(logs.String(), "\n"); n != 2 {
		t.Fatalf("%d log lines for one outage; want 2:\n%s", n, logs.String())
	}
}
