package cache

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

const testChunk = 4096

// countingStore counts GetRange calls per key and can corrupt or delay
// them.
type countingStore struct {
	store.Store
	gets    atomic.Int64
	delay   time.Duration
	mu      sync.Mutex
	corrupt map[string]int // key -> how many more GETs to corrupt (-1: all)
	perKey  map[string]int // block -> GETs that covered it
}

func newCounting() *countingStore {
	return &countingStore{Store: store.NewMem(), corrupt: map[string]int{}, perKey: map[string]int{}}
}

func (s *countingStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	s.gets.Add(1)
	s.mu.Lock()
	for b := off / testChunk; b <= (off+n-1)/testChunk; b++ {
		s.perKey[fmt.Sprintf("%s#%d", key, b)]++ // blocks covered
	}
	bad := s.corrupt[key]
	if bad > 0 {
		s.corrupt[key] = bad - 1
	}
	s.mu.Unlock()
	if s.delay > 0 {
		select {
		case <-time.After(s.delay):
		case <-ctx.Done():
			return nil, fmt.Errorf("get range %s: %w", key, ctx.Err())
		}
	}
	b, err := s.Store.GetRange(ctx, key, off, n)
	if err == nil && bad != 0 {
		b = bytes.Clone(b)
		b[len(b)/2] ^= 0x40
	}
	return b, err
}

func (s *countingStore) maxPerBlock() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := 0
	for _, n := range s.perKey {
		m = max(m, n)
	}
	return m
}

// putPack stores size random bytes as a pack and returns its description.
func putPack(t testing.TB, s store.Store, key string, size int, seed uint64) (*txn.Pack, []byte) {
	t.Helper()
	data := make([]byte, size)
	rng := rand.New(rand.NewPCG(seed, 2))
	for i := 0; i < len(data); i += 8 {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], rng.Uint64())
		copy(data[i:], w[:])
	}
	if err := store.PutBytes(context.Background(), s, key, data); err != nil {
		t.Fatal(err)
	}
	p := &txn.Pack{Key: key, Size: int64(size), Files: []txn.File{{Name: "f", Size: int64(size), CRC: txn.CRC32C(data)}}, Chunks: []uint32{}}
	for off := 0; off < size; off += testChunk {
		p.Chunks = append(p.Chunks, txn.CRC32C(data[off:min(off+testChunk, size)]))
	}
	return p, data
}

func newTestCache(t testing.TB, s store.Store, size int64) *Cache {
	t.Helper()
	c, err := New(Options{Store: s, ChunkSize: testChunk, Size: size, Fetchers: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// TestReadAt reads random ranges, across block boundaries and past the
// end, and compares with the pack's bytes.
func TestReadAt(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 64*testChunk)
	p, data := putPack(t, s, "data/p/1/1/rank-0.pack", 10*testChunk+123, 1)
	rng := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		off := rng.Int64N(p.Size + 10)
		buf := make([]byte, rng.IntN(3*testChunk)+1)
		n, err := c.ReadAt(context.Background(), p, buf, off)
		if err != nil {
			t.Fatal(err)
		}
		want := data[min(off, p.Size):min(off+int64(len(buf)), p.Size)]
		if !bytes.Equal(buf[:n], want) {
			t.Fatalf("ReadAt(%d, %d) = %d bytes that differ from the pack", off, len(buf), n)
		}
	}
}

// TestOneGetPerBlock has many readers want the same blocks at once: each
// block is fetched once.
func TestOneGetPerBlock(t *testing.T) {
	s := newCounting()
	s.delay = 20 * time.Millisecond
	c := newTestCache(t, s, 64*testChunk)
	p, data := putPack(t, s, "data/p/1/1/rank-0.pack", 4*testChunk, 1)
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			buf := make([]byte, testChunk)
			off := int64(i%4) * testChunk
			n, err := c.ReadAt(context.Background(), p, buf, off)
			if err != nil || !bytes.Equal(buf[:n], data[off:off+testChunk]) {
				t.Errorf("reader %d: %v or wrong bytes", i, err)
			}
		})
	}
	wg.Wait()
	if got := s.gets.Load(); got != 4 {
		t.Errorf("%d GETs for 4 blocks read by 32 readers, want 4", got)
	}
	st := c.Stats()
	if st.Misses != 4 || st.Hits != 28 {
		t.Errorf("stats %+v: want 4 misses, 28 hits", st)
	}
}

// TestBoundaryBlocksFetchedOnce reads two files that share a block, one
// after the other, with the cache full of other blocks: the shared block
// is fetched once (staging keeps it until both parts are read).
func TestBoundaryBlocksFetchedOnce(t *testing.T) {
	s := newCounting()
	size := int64(MinBlocks * testChunk)
	c := newTestCache(t, s, size)
	// Many packs read in 1000-byte pieces (never block-aligned), like files
	// packed back to back.
	for k := range 8 {
		p, data := putPack(t, s, fmt.Sprintf("data/p/1/%d/rank-0.pack", k), 20*testChunk+77, uint64(k))
		for off := int64(0); off < p.Size; off += 1000 {
			buf := make([]byte, 1000)
			n, err := c.ReadAt(context.Background(), p, buf, off)
			if err != nil || !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
				t.Fatalf("pack %d at %d: %v or wrong bytes", k, off, err)
			}
		}
	}
	if m := s.maxPerBlock(); m != 1 {
		t.Errorf("a block was fetched %d times, want once", m)
	}
	st := c.Stats()
	if st.BytesFetched != st.BytesServed {
		t.Errorf("fetched %d bytes to serve %d", st.BytesFetched, st.BytesServed)
	}
}

// TestVerification: a block corrupted once is refetched and served
// correctly; one corrupted every time is ErrChecksum after exactly two
// GETs, and no byte of it is returned.
func TestVerification(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 64*testChunk)
	p, data := putPack(t, s, "data/p/1/1/rank-0.pack", 3*testChunk, 1)

	s.corrupt[p.Key] = 1
	buf := make([]byte, testChunk)
	n, err := c.ReadAt(context.Background(), p, buf, 0)
	if err != nil || !bytes.Equal(buf[:n], data[:testChunk]) {
		t.Fatalf("after one corrupted GET: %v or wrong bytes", err)
	}
	if g, v := s.gets.Load(), c.Stats().VerifyFailures; g != 2 || v != 1 {
		t.Errorf("%d GETs and %d verification failures, want 2 and 1", g, v)
	}

	s.corrupt[p.Key] = -1
	buf = bytes.Repeat([]byte{0xEE}, testChunk)
	before := s.gets.Load()
	n, err = c.ReadAt(context.Background(), p, buf, testChunk)
	if !errors.Is(err, ErrChecksum) || n != 0 {
		t.Fatalf("always corrupted: n=%d err=%v, want 0, ErrChecksum", n, err)
	}
	if !bytes.Equal(buf, bytes.Repeat([]byte{0xEE}, testChunk)) {
		t.Fatal("bytes of a corrupted block were written to the reader's buffer")
	}
	if g := s.gets.Load() - before; g != 2 {
		t.Errorf("%d GETs for a corrupted block, want 2 (one refetch)", g)
	}
	if v := c.Stats().VerifyFailures; v != 3 {
		t.Errorf("%d verification failures, want 3", v)
	}
	// Failures are not cached: the store healed, the next read succeeds.
	s.corrupt[p.Key] = 0
	if n, err = c.ReadAt(context.Background(), p, buf, testChunk); err != nil || !bytes.Equal(buf[:n], data[testChunk:2*testChunk]) {
		t.Fatalf("after the store healed: %v", err)
	}
}

// TestCancelledReaderCancelsFetch: a fetch nobody waits for any more is
// cancelled; one another reader waits for goes on.
func TestCancelledReaderCancelsFetch(t *testing.T) {
	s := newCounting()
	s.delay = time.Hour
	c := newTestCache(t, s, 64*testChunk)
	p, _ := putPack(t, s, "data/p/1/1/rank-0.pack", testChunk, 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error)
	go func() {
		_, err := c.ReadAt(ctx, p, make([]byte, 10), 0)
		errc <- err
	}()
	waitUntil(t, func() bool { return s.gets.Load() == 1 })
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled read: %v", err)
	}
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.calls) == 0
	})
}

func waitUntil(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached in 5s")
		}
		time.Sleep(time.Millisecond)
	}
}

// steps is a fake stream: step n has one pack.
type steps struct {
	mu    sync.Mutex
	packs map[int64]*txn.Pack
	data  map[int64][]byte
	extra map[int64]map[int]*txn.Pack // ranks other than 0, if any
}

// add makes pk rank r's pack of step n.
func (st *steps) add(n int64, r int, pk *txn.Pack) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if r == 0 {
		if st.packs == nil {
			st.packs = map[int64]*txn.Pack{}
		}
		st.packs[n] = pk
		return
	}
	if st.extra == nil {
		st.extra = map[int64]map[int]*txn.Pack{}
	}
	if st.extra[n] == nil {
		st.extra[n] = map[int]*txn.Pack{}
	}
	st.extra[n][r] = pk
}

func (st *steps) committed(n int64) bool {
	_, ok := st.get(n)
	return ok
}

func (st *steps) pack(_ context.Context, n int64, rank int) (*txn.Pack, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if rank != 0 {
		return st.extra[n][rank], nil
	}
	return st.packs[n], nil
}

func (st *steps) get(n int64) ([]*txn.Pack, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	p, ok := st.packs[n]
	if !ok {
		return nil, false
	}
	return []*txn.Pack{p}, true
}

func makeSteps(t testing.TB, s store.Store, n int, size int) *steps {
	st := &steps{packs: map[int64]*txn.Pack{}, data: map[int64][]byte{}}
	for i := range n {
		st.packs[int64(i)], st.data[int64(i)] = putPack(t, s, fmt.Sprintf("data/p/1/%d/rank-0.pack", i), size, uint64(i))
	}
	return st
}

// TestPrefetch: touching step n fetches steps n..n+P; reading them is
// then all hits, each byte fetched once.
func TestPrefetch(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 256*testChunk)
	st := makeSteps(t, s, 10, 8*testChunk)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 2, Committed: st.committed, Pack: st.pack})
	p.Touch(0, 0)
	// Steps 0, 1, 2: 8 blocks each, one GET per step (runs of 8 blocks).
	waitUntil(t, func() bool { return c.Stats().BytesFetched == 24*testChunk })
	time.Sleep(20 * time.Millisecond)
	if f, g := c.Stats().BytesFetched, s.gets.Load(); f != 24*testChunk || g != 3 {
		t.Fatalf("%d bytes in %d GETs after touching step 0 with depth 2, want %d in 3", f, g, 24*testChunk)
	}
	if d := p.Depth(); d != 2 {
		t.Errorf("depth %d, want 2", d)
	}
	for n := int64(0); n < 10; n++ {
		p.Touch(n, 0)
		// Let the prefetch of n..n+2 land first: the test is about hits,
		// not about a read racing its own prefetch on a loaded machine.
		want := int64(min(n+3, 10)) * 8 * testChunk
		waitUntil(t, func() bool { return c.Stats().BytesFetched >= want })
		pk, _ := st.get(n)
		buf := make([]byte, pk[0].Size)
		if _, err := c.ReadAt(ctx, pk[0], buf, 0); err != nil || !bytes.Equal(buf, st.data[n]) {
			t.Fatalf("step %d: %v or wrong bytes", n, err)
		}
	}
	stats := c.Stats()
	if stats.BytesFetched != stats.BytesServed || s.maxPerBlock() != 1 {
		t.Errorf("fetched %d bytes to serve %d; a block fetched %d times", stats.BytesFetched, stats.BytesServed, s.maxPerBlock())
	}
	if stats.Hits < 60 {
		t.Errorf("only %d of 80 block reads were hits with prefetching", stats.Hits)
	}
	waitUntil(t, func() bool { return c.Stats().PrefetchBytes == 0 })
}

// TestPrefetchMemoryCap: prefetching never holds more than half the cache
// size, and a window that moves on frees what was not read.
func TestPrefetchMemoryCap(t *testing.T) {
	s := newCounting()
	size := int64(64 * testChunk)
	c := newTestCache(t, s, size)
	st := makeSteps(t, s, 40, 16*testChunk)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 8, Committed: st.committed, Pack: st.pack})
	p.Touch(0, 0)
	waitUntil(t, func() bool { return c.Stats().PrefetchBytes == size/2 })
	time.Sleep(50 * time.Millisecond)
	if b := c.Stats().PrefetchBytes; b > size/2 {
		t.Fatalf("prefetch holds %d bytes, cap %d", b, size/2)
	}
	// Jump far ahead: everything held for steps 0..8 is freed, the new
	// window is prefetched.
	p.Touch(30, 0)
	waitUntil(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		for k := range c.calls {
			var step int
			fmt.Sscanf(k.pack, "data/p/1/%d/", &step)
			if step < 30-8-2 {
				return false
			}
		}
		return true
	})
	if b := c.Stats().PrefetchBytes; b > size/2 {
		t.Fatalf("prefetch holds %d bytes, cap %d", b, size/2)
	}
	cancel()
	waitUntil(t, func() bool { return c.Stats().PrefetchBytes == 0 })
}

// TestStressBufferReuse: many readers and a prefetcher over a cache far
// smaller than the data, so blocks are evicted and their buffers reused
// all the time: every byte read is still the pack's.
func TestStressBufferReuse(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, MinBlocks*testChunk)
	st := makeSteps(t, s, 30, 7*testChunk+500)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 2, Committed: st.committed, Pack: st.pack})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			buf := make([]byte, 3*testChunk)
			for range 400 {
				n := rng.Int64N(30)
				p.Touch(n, 0)
				pk, _ := st.get(n)
				off := rng.Int64N(pk[0].Size)
				b := buf[:1+rng.IntN(len(buf))]
				k, err := c.ReadAt(ctx, pk[0], b, off)
				if err != nil {
					t.Error(err)
					return
				}
				if !bytes.Equal(b[:k], st.data[n][off:off+int64(k)]) {
					t.Errorf("step %d at %d: wrong bytes", n, off)
					return
				}
			}
		})
	}
	wg.Wait()
	t.Logf("%+v, %d GETs", c.Stats(), s.gets.Load())
}

// TestPrefetchRunVerification: a corrupted block inside a multi-block
// prefetch GET is refetched alone, once; its neighbours are served from
// the run; a block corrupted for good is ErrChecksum.
func TestPrefetchRunVerification(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 256*testChunk)
	st := makeSteps(t, s, 1, 8*testChunk)
	pk, _ := st.get(0)
	s.corrupt[pk[0].Key] = 1 // the run's GET: block 4 (the middle byte) is corrupted
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 1, Committed: st.committed, Pack: st.pack})
	p.Touch(0, 0)
	waitUntil(t, func() bool { return s.gets.Load() == 2 })
	buf := make([]byte, pk[0].Size)
	if _, err := c.ReadAt(ctx, pk[0], buf, 0); err != nil || !bytes.Equal(buf, st.data[0]) {
		t.Fatalf("%v or wrong bytes", err)
	}
	if g, v := s.gets.Load(), c.Stats().VerifyFailures; g != 2 || v != 1 {
		t.Errorf("%d GETs, %d verification failures; want 2 (the run, one refetch) and 1", g, v)
	}
}

// TestPrefetchFollowsOpenedRanks: the prefetcher fetches only the ranks a
// reader opened: with two ranks per step and only rank 1 opened, nothing
// of rank 0 is fetched; once rank 0 is opened too, later steps carry both.
func TestPrefetchFollowsOpenedRanks(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 256*testChunk)
	st := makeSteps(t, s, 6, 4*testChunk) // rank 0
	st.extra = map[int64]map[int]*txn.Pack{}
	for i := range int64(6) {
		pk, _ := putPack(t, s, fmt.Sprintf("data/p/1/%d/rank-1.pack", i), 2*testChunk, uint64(100+i))
		st.extra[i] = map[int]*txn.Pack{1: pk}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 2, Committed: st.committed, Pack: st.pack})
	p.Touch(0, 1)
	// Steps 0-2 of rank 1: 2 blocks each.
	waitUntil(t, func() bool { return c.Stats().BytesFetched == 6*testChunk })
	time.Sleep(50 * time.Millisecond)
	if f := c.Stats().BytesFetched; f != 6*testChunk {
		t.Fatalf("%d bytes fetched after opening rank 1 of step 0, want rank 1's %d of steps 0-2 only", f, 6*testChunk)
	}
	// Rank 0 opened at step 1: steps 1-3 now carry rank 0 as well, rank 1
	// goes on to step 3.
	p.Touch(1, 0)
	want := int64(6*testChunk + 3*4*testChunk + 2*testChunk)
	waitUntil(t, func() bool { return c.Stats().BytesFetched == want })
	time.Sleep(50 * time.Millisecond)
	if f := c.Stats().BytesFetched; f != want {
		t.Fatalf("%d bytes fetched after opening rank 0 of step 1, want %d", f, want)
	}
}

// breakingStore streams ranges (store.RangeStreamer) and breaks the first
// stream off after `after` bytes with a transient error.
type breakingStore struct {
	*countingStore
	after int64
	once  atomic.Bool
}

func (s *breakingStore) GetRangeStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	b, err := s.GetRange(ctx, key, off, n)
	if err != nil {
		return nil, err
	}
	if s.once.CompareAndSwap(false, true) {
		return io.NopCloser(io.MultiReader(bytes.NewReader(b[:s.after]), errReader{})), nil
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("connection reset by peer") }

// TestPrefetchRunBrokenStream: a run's GET that breaks off mid-block
// keeps the blocks it delivered whole and fetches the rest one block per
// GET; the reader gets the right bytes and nothing is fetched twice
// except the block that broke.
func TestPrefetchRunBrokenStream(t *testing.T) {
	s := &breakingStore{countingStore: newCounting(), after: 2*testChunk + 100}
	c := newTestCache(t, s, 256*testChunk)
	st := makeSteps(t, s, 1, 8*testChunk)
	pk, _ := st.get(0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 1, Committed: st.committed, Pack: st.pack})
	p.Touch(0, 0)
	// The run, then blocks 2..7 alone.
	waitUntil(t, func() bool { return s.gets.Load() == 7 })
	buf := make([]byte, pk[0].Size)
	if _, err := c.ReadAt(ctx, pk[0], buf, 0); err != nil || !bytes.Equal(buf, st.data[0]) {
		t.Fatalf("%v or wrong bytes", err)
	}
	if g, f := s.gets.Load(), c.Stats().BytesFetched; g != 7 || f != 8*testChunk+100 {
		t.Errorf("%d GETs, %d bytes fetched; want 7 and %d", g, f, 8*testChunk+100)
	}
}

// TestPrefetchRanksAtTheirOwnPace: two ranks read in order, one far
// ahead of the other (more than 2P+2 steps); every block of both is
// fetched once: the slow rank's opens neither move the position back nor
// drop the fast rank's prefetched steps.
func TestPrefetchRanksAtTheirOwnPace(t *testing.T) {
	const n, depth = 20, 2
	s := newCounting()
	c := newTestCache(t, s, 512*testChunk)
	st := makeSteps(t, s, n, 2*testChunk) // rank 0
	st.extra = map[int64]map[int]*txn.Pack{}
	data1 := map[int64][]byte{}
	for i := range int64(n) {
		pk, b := putPack(t, s, fmt.Sprintf("data/p/1/%d/rank-1.pack", i), 2*testChunk, uint64(100+i))
		st.extra[i], data1[i] = map[int]*txn.Pack{1: pk}, b
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: depth, Committed: st.committed, Pack: st.pack})
	read := func(step int64, rank int) {
		t.Helper()
		p.Touch(step, rank)
		pk, want := st.packs[step], st.data[step]
		if rank == 1 {
			pk, want = st.extra[step][1], data1[step]
		}
		buf := make([]byte, pk.Size)
		if _, err := c.ReadAt(ctx, pk, buf, 0); err != nil || !bytes.Equal(buf, want) {
			t.Fatalf("step %d rank %d: %v or wrong bytes", step, rank, err)
		}
	}
	// Rank 0 runs 10 steps ahead, then both go on in lock step.
	for i := range int64(10) {
		read(i, 0)
	}
	for i := range int64(n - 10) {
		read(10+i, 0)
		read(i, 1)
	}
	for i := int64(n - 10); i < n; i++ {
		read(i, 1)
	}
	if m := s.maxPerBlock(); m != 1 {
		t.Errorf("a block was fetched %d times, want once", m)
	}
}
