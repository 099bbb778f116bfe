// Package cache is the mount's read path: verified pack blocks held in a
// bounded amount of memory, fetched once however many readers want them,
// and prefetched ahead of the training loop with ranged GETs in parallel
// (each GET a run of consecutive blocks).
//
// A block is one chunk of a pack (txn.Pack.Chunks: the stream's ChunkSize
// bytes, the last one shorter), so each block is checked against the chunk
// CRC32C recorded at production before any byte of it is returned.
//
// # Invariants
//
//   - Every block handed to a reader matched its chunk's CRC32C. A
//     mismatch is refetched once; a second mismatch is ErrChecksum, a log
//     line and a count in Stats.VerifyFailures. Failures are never cached.
//
//   - A GET that fails transiently (a store restarting) is retried within
//     Options.Retry's window (retry.go); a missing or corrupt object and a
//     reader that gave up end the wait at once.
//
//   - At most one GET per block is in flight: readers of a block that is
//     being fetched wait for that fetch (an entry in Cache.calls). A fetch
//     is cancelled only when every waiter (readers and the prefetch job)
//     has gone.
//
//   - Memory: a block lives in one of three places, each bounded, and
//     their bounds sum to 11/16 of Options.Size:
//     1. the ristretto cache (cost = bytes, 1/16 of Size), for blocks
//     already read (the kernel's page cache holds them too, see New);
//     2. staged prefetched blocks, held until read or until their prefetch
//     job is dropped, bounded by the prefetch semaphore (Size/2);
//     3. staged partly read blocks (a block shared by two files is read
//     twice, the second time usually soon after), a FIFO bounded by
//     Size/8.
//     Staging exists because ristretto's TinyLFU admission rejects a new
//     block that was never read when the cache is full of blocks read
//     once, which is exactly the streaming case: prefetched blocks must
//     not depend on admission.
//
//   - Block buffers are reused (a free list), because touching fresh
//     memory costs more than the rest of the read path on the VMs this
//     was measured on. Buffers are only allocated when none is free, so
//     the free list never holds more than the most blocks ever held. A
//     buffer returns to the free list only when its block's reference
//     count drops to zero: references are held by staging, by the
//     ristretto cache (released in OnExit, at most once per lruRef) and
//     by each reader while it copies. A reader takes its
//     reference with tryAcquire, which fails on a block already at zero,
//     so it never reads a buffer that was handed to another block.
//
//   - Whole files the passthrough path takes live in sealed memfds
//     (Files, memfile.go), a quarter of the mount's --cache-size; their
//     bytes are never also held as blocks: the prefetcher streams them
//     into the memfd and fetches blocks only for the files the block path
//     serves.
//
// # Lock order
//
// Prefetcher.mu, then Cache.mu, then Cache.closeMu; Prefetcher.mu, then
// Files.mu. None is held during
// I/O; semaphores are acquired with no lock held.
package cache

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/ristretto/v2"
	"golang.org/x/sync/semaphore"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// ErrChecksum: a block's bytes did not match the CRC32C recorded at
// production, twice in a row. The bytes were not returned.
var ErrChecksum = errors.New("block failed CRC32C verification")

// Options configure a Cache.
type Options struct {
	Store store.Store
	// ChunkSize is the stream's chunk size: the size of one block.
	ChunkSize int64
	// Size is the memory budget for blocks, in bytes (see the package doc
	// for how it is split). It must hold at least MinBlocks blocks.
	Size int64
	// Fetchers bounds concurrent prefetch GETs (default DefaultFetchers). Reads by
	// applications are not bounded by it.
	Fetchers int
	// MaxRun is how many consecutive blocks one prefetch GET may fetch
	// (default 8): fewer, larger requests cost less on S3 and hide more
	// latency.
	MaxRun int
	Logger *slog.Logger
	// ObserveGet, if set, is called with the latency of every GET.
	ObserveGet func(time.Duration)
	// Retry is how block and memory-file GETs wait out transient store
	// errors (retry.go).
	Retry Retry
}

// maxLRUItems caps the blocks the ristretto cache's admission counters
// are sized for (10 counters each, allocated at start).
const maxLRUItems = 100_000

// MinBlocks is the smallest budget, in blocks, that Options.Size may give.
const MinBlocks = 16

// DefaultFetchers is Options.Fetchers when it is not set.
const DefaultFetchers = 16

// CheckSize checks a cache budget of size bytes against the stream's
// chunk size: it must hold at least MinBlocks blocks.
func CheckSize(size, chunkSize int64) error {
	if size < MinBlocks*chunkSize {
		return fmt.Errorf("holds fewer than %d blocks of this stream's %d bytes; give at least %d bytes",
			MinBlocks, chunkSize, MinBlocks*chunkSize)
	}
	return nil
}

// Stats are the cache's counters since New.
type Stats struct {
	Hits   int64 // block requests that started no GET
	Misses int64 // block requests that started a GET
	Gets   int64 // GETs issued, retries and refetches included
	// BytesFetched counts bytes received from the store; BytesServed bytes
	// returned to readers. Their ratio is the read amplification.
	BytesFetched int64
	BytesServed  int64
	// VerifyFailures counts GETs whose bytes failed CRC32C verification.
	VerifyFailures int64
	// PrefetchBytes is the memory now held by prefetched blocks, fetched
	// or in flight, not yet read.
	PrefetchBytes int64
}

// Cache serves byte ranges of packs from verified blocks. It is safe for
// concurrent use.
type Cache struct {
	// Dependencies and constant data.
	store       store.Store
	chunk       int64
	log         *slog.Logger
	observeGet  func(time.Duration)
	retry       Retry
	maxRun      int // blocks per prefetch GET, at most
	lru         *ristretto.Cache[string, *lruRef]
	freeMu      sync.Mutex
	free        [][]byte            // GUARDED_BY(freeMu): reusable block buffers, cap = chunk
	prefetchSem *semaphore.Weighted // bytes of prefetched blocks
	prefetchCap int64
	slots       *semaphore.Weighted // concurrent prefetch GETs
	demandCap   int64
	life        context.Context // fetches run under it, not under a reader's
	stop        context.CancelFunc
	fetches     sync.WaitGroup // running fetch goroutines
	closeMu     sync.RWMutex   // write-held only by Close
	closed      bool           // GUARDED_BY(closeMu)
	// files, once set (NewFiles), takes the files it is eligible for:
	// the prefetcher fetches those into memfds, not blocks.
	files atomic.Pointer[Files]

	mu sync.Mutex
	// calls holds the blocks being fetched and the staged ones.
	// GUARDED_BY(mu). INVARIANT: a staged entry (done, no error) holds
	// prefetch weight or sits in demand, never both.
	calls       map[blockKey]*entry
	demand      *list.List // GUARDED_BY(mu): staged partly read blocks, oldest first
	demandBytes int64      // GUARDED_BY(mu)
	// recent holds the keys of the blocks most recently read whole, so
	// the prefetcher does not fetch again what a reader already has (the
	// ristretto cache may have declined to keep it). GUARDED_BY(mu).
	recent *keyRing

	hits, misses, gets, fetched, served, verifyFailures, prefetchBytes atomic.Int64
}

// blockKey names block i of the pack (a region of an object) at off.
type blockKey struct {
	pack string
	off  int64
	i    int
}

func (k blockKey) String() string {
	return k.pack + "@" + strconv.FormatInt(k.off, 10) + "#" + strconv.Itoa(k.i)
}

// block is a verified block in a reusable buffer.
type block struct {
	data []byte       // never modified while refs > 0
	refs atomic.Int32 // 0: dead for good, its buffer may be reused
}

// tryAcquire takes a reference unless the block is already dead.
func (b *block) tryAcquire() bool {
	for {
		r := b.refs.Load()
		if r <= 0 {
			return false
		}
		if b.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

// release drops a reference; the last one recycles the buffer.
func (c *Cache) release(b *block) {
	switch r := b.refs.Add(-1); {
	case r == 0:
		c.putBuf(b.data)
	case r < 0:
		panic("cache: block released more often than acquired")
	}
}

// lruRef is the ristretto cache's reference to a block, released once.
type lruRef struct {
	blk      *block
	released atomic.Bool
}

func (c *Cache) lruExit(r *lruRef) {
	if r != nil && r.released.CompareAndSwap(false, true) {
		c.release(r.blk)
	}
}

// lruSet puts a block into the ristretto cache with its own reference.
// The caller holds a reference, so tryAcquire cannot fail.
func (c *Cache) lruSet(k blockKey, b *block) {
	if !b.tryAcquire() {
		return
	}
	r := &lruRef{blk: b}
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed || !c.lru.Set(k.String(), r, int64(len(b.data))) {
		c.lruExit(r) // dropped: no callback will come
	}
}

// lruGet looks a block up in the ristretto cache and takes a reference.
func (c *Cache) lruGet(k blockKey) (*block, bool) {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if c.closed {
		return nil, false
	}
	r, ok := c.lru.Get(k.String())
	if !ok || !r.blk.tryAcquire() {
		return nil, false
	}
	return r.blk, true
}

// lruWait waits until the ristretto cache applied the sets made so far.
func (c *Cache) lruWait() {
	c.closeMu.RLock()
	defer c.closeMu.RUnlock()
	if !c.closed {
		c.lru.Wait()
	}
}

func (c *Cache) getBuf(n int64) []byte {
	if n < c.chunk/4 {
		// A small block (a small rank's region) gets its own small buffer:
		// a pooled chunk-sized one would hold a chunk of memory for it.
		return make([]byte, n)
	}
	c.freeMu.Lock()
	if k := len(c.free); k > 0 {
		b := c.free[k-1]
		c.free[k-1] = nil
		c.free = c.free[:k-1]
		c.freeMu.Unlock()
		return b[:n]
	}
	c.freeMu.Unlock()
	return make([]byte, n, c.chunk)
}

func (c *Cache) putBuf(b []byte) {
	if int64(cap(b)) != c.chunk {
		return
	}
	// Buffers are only allocated when none is free, so the free list never
	// holds more than the most blocks ever held at once: it grows with
	// use, never with the budget, and needs no bound of its own.
	c.freeMu.Lock()
	c.free = append(c.free, b[:cap(b)])
	c.freeMu.Unlock()
}

// entry is one block being fetched, or fetched and staged.
type entry struct {
	key  blockKey
	pack *txn.Pack     // the pack (region) the block belongs to
	done chan struct{} // closed once blk or err is set
	blk  *block        // after done, when err == nil
	err  error

	// GUARDED_BY(Cache.mu):
	refs     int           // waiters while not done; a prefetch job counts as one
	run      *fetchRun     // the GET fetching it
	prefetch bool          // staged for a prefetch job until read
	weight   int64         // prefetch semaphore bytes held
	served   int64         // bytes handed to readers
	leaving  bool          // read whole, moving to the ristretto cache
	staged   bool          // holds a reference to blk (staging's)
	elem     *list.Element // in Cache.demand, or nil
}

func (e *entry) finished() bool { return closed(e.done) }

// closed reports whether ch is closed (a fetch or fill is done), without
// waiting.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// New returns a cache over o.Store. Close releases it.
func New(o Options) (*Cache, error) {
	if o.ChunkSize <= 0 {
		return nil, fmt.Errorf("cache: chunk size %d must be positive", o.ChunkSize)
	}
	if err := CheckSize(o.Size, o.ChunkSize); err != nil {
		return nil, fmt.Errorf("cache size %d bytes: %w", o.Size, err)
	}
	if o.Fetchers <= 0 {
		o.Fetchers = DefaultFetchers
	}
	if o.MaxRun <= 0 {
		o.MaxRun = 8
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	prefetchCap := o.Size / 2
	demandCap := o.Size / 8
	// Blocks already read are also in the kernel's page cache (files are
	// opened with FOPEN_KEEP_CACHE): this copy only serves re-reads after
	// the kernel dropped them. A large one costs more than it saves: every
	// block buffer it holds is fresh memory, and first touches of memory
	// are the dominant cost of a streaming read (bench read: 2x the MB/s
	// and 0.45x the CPU with the buffers recycled).
	lruCap := o.Size / 16
	// Ristretto allocates its admission counters up front: sized by the
	// budget, a --cache-size of petabytes would allocate gigabytes at
	// start. Capped, a cache larger than maxLRUItems blocks admits a
	// little less precisely; memory grows with what is cached.
	items := min(max(lruCap/o.ChunkSize, 64), maxLRUItems)
	c := &Cache{}
	lru, err := ristretto.NewCache(&ristretto.Config[string, *lruRef]{
		NumCounters:        items * 10,
		MaxCost:            lruCap,
		BufferItems:        64,
		IgnoreInternalCost: true, // cost is bytes of block data; metadata is small
		OnExit:             c.lruExit,
	})
	if err != nil {
		return nil, fmt.Errorf("cache: %w", err)
	}
	life, stop := context.WithCancel(context.Background())
	*c = Cache{
		recent:      newKeyRing(int(min(max(256, 2*o.Size/o.ChunkSize), math.MaxInt32))),
		store:       o.Store,
		chunk:       o.ChunkSize,
		log:         o.Logger,
		observeGet:  o.ObserveGet,
		retry:       o.Retry,
		maxRun:      o.MaxRun,
		lru:         lru,
		prefetchSem: semaphore.NewWeighted(prefetchCap),
		prefetchCap: prefetchCap,
		slots:       semaphore.NewWeighted(int64(o.Fetchers)),
		demandCap:   demandCap,
		life:        life,
		stop:        stop,
		calls:       map[blockKey]*entry{},
		demand:      list.New(),
	}
	return c, nil
}

// Close cancels every fetch, waits for them to end and drops the cached
// blocks. Reads after Close fail.
func (c *Cache) Close() {
	c.mu.Lock()
	c.stop()
	c.mu.Unlock()
	c.fetches.Wait()
	// Ristretto must not be closed under a Set (it would send on a closed
	// channel): readers may still be finishing.
	c.closeMu.Lock()
	c.closed = true
	c.closeMu.Unlock()
	c.lru.Close()
}

// Stats returns the counters.
func (c *Cache) Stats() Stats {
	return Stats{
		Hits:           c.hits.Load(),
		Misses:         c.misses.Load(),
		Gets:           c.gets.Load(),
		BytesFetched:   c.fetched.Load(),
		BytesServed:    c.served.Load(),
		VerifyFailures: c.verifyFailures.Load(),
		PrefetchBytes:  c.prefetchBytes.Load(),
	}
}

// blockLen is the size of block i of p.
func (c *Cache) blockLen(p *txn.Pack, i int) int64 {
	return min(c.chunk, p.Size-int64(i)*c.chunk)
}

// ReadAt reads up to len(dst) bytes of pack p at off into dst and returns
// how many it read: fewer only at the end of the pack. Every byte comes
// from a verified block. The blocks a read spans are fetched in parallel.
func (c *Cache) ReadAt(ctx context.Context, p *txn.Pack, dst []byte, off int64) (int, error) {
	vec, release, err := c.ReadVec(ctx, p, off, int64(len(dst)))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range vec {
		n += copy(dst[n:], b)
	}
	release()
	return n, nil
}

// ReadVec returns up to n bytes of pack p at off as slices of verified
// blocks, without copying them (fewer bytes only at the end of the pack),
// and release, which the caller calls once it is done with the slices.
// The blocks a read spans are fetched in parallel.
func (c *Cache) ReadVec(ctx context.Context, p *txn.Pack, off, n int64) (vec [][]byte, release func(), err error) {
	if off < 0 {
		return nil, nil, fmt.Errorf("read %s at negative offset %d", p.Key, off)
	}
	if off >= p.Size || n <= 0 {
		return nil, func() {}, nil
	}
	end := min(off+n, p.Size)
	first, last := int(off/c.chunk), int((end-1)/c.chunk)
	blocks := make([]*block, last-first+1)
	errs := make([]error, len(blocks))
	var wg sync.WaitGroup
	for k := 1; k < len(blocks); k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			blocks[k], errs[k] = c.block(ctx, p, first+k)
		}()
	}
	blocks[0], errs[0] = c.block(ctx, p, first)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, b := range blocks {
			if b != nil {
				c.release(b)
			}
		}
		return nil, nil, err
	}
	vec = make([][]byte, len(blocks))
	var total int64
	for k, b := range blocks {
		i := first + k
		lo := max(off-int64(i)*c.chunk, 0)
		hi := min(end-int64(i)*c.chunk, int64(len(b.data)))
		vec[k] = b.data[lo:hi]
		total += hi - lo
		// The caller's reference keeps the buffer until release, even if
		// the block leaves staging now.
		c.markServed(blockKey{p.Key, p.Off, i}, hi-lo)
	}
	c.served.Add(total)
	return vec, func() {
		for _, b := range blocks {
			c.release(b)
		}
	}, nil
}

// block returns block i of p, verified, with a reference the caller
// releases.
func (c *Cache) block(ctx context.Context, p *txn.Pack, i int) (*block, error) {
	if i < 0 || i >= len(p.Chunks) {
		return nil, fmt.Errorf("pack %s has no block %d", p.Key, i)
	}
	k := blockKey{p.Key, p.Off, i}
	for {
		if b, ok := c.lruGet(k); ok {
			c.hits.Add(1)
			return b, nil
		}
		c.mu.Lock()
		e := c.calls[k]
		switch {
		case e != nil && e.finished():
			// Staged: staging holds a reference, so this cannot fail.
			ok := e.blk.tryAcquire()
			c.mu.Unlock()
			if ok {
				c.hits.Add(1)
				return e.blk, nil
			}
			continue
		case e != nil:
			e.refs++
			c.hits.Add(1)
		default:
			e = c.startLocked([]blockRef{{p, i}}, false, false)[0]
			c.misses.Add(1)
		}
		c.mu.Unlock()
		select {
		case <-e.done:
			if e.err != nil {
				return nil, e.err
			}
			if e.blk.tryAcquire() {
				return e.blk, nil
			}
			// Already read whole and evicted by the time this reader woke:
			// look again.
		case <-ctx.Done():
			c.mu.Lock()
			c.leaveLocked(e)
			c.mu.Unlock()
			return nil, fmt.Errorf("reading %s block %d: %w", p.Key, i, ctx.Err())
		}
	}
}

// blockRef is block i of pack pk.
type blockRef struct {
	pk *txn.Pack
	i  int
}

func (b blockRef) key() blockKey { return blockKey{b.pk.Key, b.pk.Off, b.i} }

// startLocked registers a fetch of the blocks bs, consecutive in their
// object (blocks of one pack, or running on into the next region of the
// same object), one waiter each (the reader, or the prefetch job), and
// starts it. prefetch says the waiter is a prefetch job: each entry then
// holds its block's bytes of prefetch memory (entry.weight, released by
// releaseLocked); slot says whether the caller holds a prefetch GET slot
// that the fetch releases.
func (c *Cache) startLocked(bs []blockRef, prefetch bool, slot bool) []*entry {
	fctx, cancel := context.WithCancel(c.life)
	run := &fetchRun{cancel: cancel, live: len(bs)}
	es := make([]*entry, len(bs))
	for k, b := range bs {
		key := b.key()
		e := &entry{key: key, pack: b.pk, done: make(chan struct{}), refs: 1, run: run, prefetch: prefetch}
		if prefetch {
			e.weight = c.blockLen(b.pk, b.i)
		}
		c.calls[key] = e
		es[k] = e
	}
	// Add under mu, and Close cancels c.life under mu: after Close has
	// waited, no fetch starts (a cancelled context fails at once).
	c.fetches.Add(1)
	go func() {
		defer c.fetches.Done()
		c.fetch(fctx, es, slot)
	}()
	return es
}

// leaveLocked drops one waiter of an unfinished fetch; when no block of
// the run has a waiter left, the GET is cancelled.
func (c *Cache) leaveLocked(e *entry) {
	if e.finished() {
		return
	}
	e.refs--
	if e.refs > 0 {
		return
	}
	if c.calls[e.key] == e {
		delete(c.calls, e.key)
	}
	c.releaseLocked(e)
	if e.run.live--; e.run.live == 0 {
		e.run.cancel()
	}
}

// releaseLocked returns e's prefetch memory, once.
func (c *Cache) releaseLocked(e *entry) {
	if e.weight > 0 {
		c.prefetchSem.Release(e.weight)
		c.prefetchBytes.Add(-e.weight)
		e.weight = 0
	}
}

// fetchRun is one GET for consecutive blocks of an object (one block for
// a read; for a prefetch up to Options.MaxRun blocks' bytes, of one pack or
// of adjacent ranks' packs). Its context is cancelled
// when none of its blocks has a waiter any more.
type fetchRun struct {
	cancel context.CancelFunc
	live   int // GUARDED_BY(Cache.mu): entries with waiters
}

// fetch runs the GET of a run of blocks and completes their entries. The
// response streams straight into reused block buffers, each verified as
// it fills: every byte is written to memory once, with no copy. A stream
// that breaks mid-run leaves the rest to one GET per block, with retries.
func (c *Cache) fetch(ctx context.Context, es []*entry, slot bool) {
	off := int64(es[0].key.i) * c.chunk
	var total int64
	for _, e := range es {
		total += c.blockLen(e.pack, e.key.i)
	}
	start := time.Now()
	rc, err := c.openRange(ctx, es[0].pack, off, total)
	for _, e := range es {
		p, i := e.pack, e.key.i
		if err != nil {
			c.complete(e, nil, fmt.Errorf("reading %s block %d: %w", p.Key, i, err))
			continue
		}
		if rc != nil {
			blk, rerr := c.readBlock(rc, p, i)
			if rerr == nil && blk != nil {
				c.complete(e, blk, nil)
				continue
			}
			if rerr != nil {
				rc.Close()
				rc = nil
				if ctx.Err() != nil || !Retryable(rerr) {
					err = rerr
					c.complete(e, nil, fmt.Errorf("reading %s block %d: %w", p.Key, i, err))
					continue
				}
				c.log.Debug("GET broke off; fetching the rest block by block", "pack", p.Key, "block", i, "err", rerr)
				blk, berr := c.fetchBlock(ctx, p, i, false)
				c.complete(e, blk, berr)
				continue
			}
		}
		// A CRC mismatch (the stream stays in step), or the stream broke
		// earlier.
		blk, berr := c.fetchBlock(ctx, p, i, rc != nil)
		c.complete(e, blk, berr)
	}
	if rc != nil {
		rc.Close()
	}
	if c.observeGet != nil {
		c.observeGet(time.Since(start))
	}
	if slot {
		c.slots.Release(1)
	}
	es[0].run.cancel()
}

// complete publishes a fetched block (or the error) to its entry's
// waiters and stages it.
func (c *Cache) complete(e *entry, blk *block, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e.blk, e.err = blk, err
	close(e.done)
	switch {
	case err != nil:
		if c.calls[e.key] == e {
			delete(c.calls, e.key)
		}
		c.releaseLocked(e)
	case c.calls[e.key] != e:
		// Abandoned (every waiter left) or detached from a dropped job:
		// keep it cached for waiters that may remain, not staged.
		c.releaseLocked(e)
		c.lruSet(e.key, blk)
		c.release(blk)
	case e.prefetch:
		// Staged under its prefetch weight until read or dropped; the
		// fetch's reference becomes staging's.
		e.staged = true
	default:
		e.staged = true
		e.elem = c.demand.PushBack(e)
		c.demandBytes += int64(len(blk.data))
		for c.demandBytes > c.demandCap {
			c.unstageLocked(c.demand.Front().Value.(*entry), true)
		}
	}
}

// unstageLocked removes a finished entry from the staging area, keeping
// its block in the ristretto cache if keep.
func (c *Cache) unstageLocked(e *entry, keep bool) {
	if c.calls[e.key] == e {
		delete(c.calls, e.key)
	}
	if e.elem != nil {
		c.demand.Remove(e.elem)
		c.demandBytes -= int64(len(e.blk.data))
		e.elem = nil
	}
	c.releaseLocked(e)
	if e.staged {
		if keep {
			c.lruSet(e.key, e.blk)
		}
		e.staged = false
		c.release(e.blk)
	}
}

// markServed records n bytes of block k handed to a reader; a staged block
// read whole leaves staging for the ristretto cache.
func (c *Cache) markServed(k blockKey, n int64) {
	c.mu.Lock()
	e := c.calls[k]
	if e == nil || !e.staged || e.leaving {
		c.mu.Unlock()
		return
	}
	e.served += n
	if e.served < int64(len(e.blk.data)) {
		c.mu.Unlock()
		return
	}
	e.leaving = true
	c.recent.add(k)
	c.mu.Unlock()
	// Into the cache first (ristretto applies sets asynchronously), then
	// out of staging: a block in neither place would be fetched again by
	// the prefetcher. Staging's reference keeps the block alive meanwhile.
	c.lruSet(k, e.blk)
	c.lruWait()
	c.mu.Lock()
	c.unstageLocked(e, false)
	c.mu.Unlock()
}

// openRange opens n bytes of p at off, waiting out transient store errors
// (c.retry).
func (c *Cache) openRange(ctx context.Context, p *txn.Pack, off, n int64) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := c.retry.Do(ctx, func(ctx context.Context) error {
		var err error
		rc, err = c.openOnce(ctx, p, off, n)
		return err
	})
	return rc, err
}

// openOnce is one GET of n bytes of p at off.
func (c *Cache) openOnce(ctx context.Context, p *txn.Pack, off, n int64) (io.ReadCloser, error) {
	c.gets.Add(1)
	return store.GetRangeStream(ctx, c.store, p.Key, p.Off+off, n)
}

// readBlock reads block i of p from a stream into a reused buffer and
// checks it (what is verified is what readers get) against its CRC32C.
// On a mismatch the buffer goes back, the failure is counted and logged,
// and blk is nil with a nil error: the caller fetches the block again.
func (c *Cache) readBlock(rc io.Reader, p *txn.Pack, i int) (blk *block, err error) {
	buf := c.getBuf(c.blockLen(p, i))
	n, err := io.ReadFull(rc, buf)
	c.fetched.Add(int64(n))
	if err != nil {
		c.putBuf(buf)
		return nil, err
	}
	if got := txn.CRC32C(buf); got != p.Chunks[i] {
		c.putBuf(buf)
		c.verifyFailures.Add(1)
		// Blocks count from the start of the rank's region: the object
		// bytes tell one rank's block i from another's.
		lo := p.Off + int64(i)*c.chunk
		c.log.Warn("block failed CRC32C verification; refetching once",
			"object", p.Key, "block", i, "object_bytes", fmt.Sprintf("%d-%d", lo, lo+int64(len(buf))-1),
			"crc", fmt.Sprintf("%08x", got), "want", fmt.Sprintf("%08x", p.Chunks[i]))
		return nil, nil
	}
	blk = &block{data: buf}
	blk.refs.Store(1)
	return blk, nil
}

// fetchBlock GETs block i of p alone, waiting out transient store errors
// (a stream that breaks mid-block is one more failed attempt). again says
// its bytes already failed verification once: a mismatch now is
// ErrChecksum; else a mismatch is fetched once more.
func (c *Cache) fetchBlock(ctx context.Context, p *txn.Pack, i int, again bool) (*block, error) {
	off, n := int64(i)*c.chunk, c.blockLen(p, i)
	for {
		var blk *block
		err := c.retry.Do(ctx, func(ctx context.Context) error {
			rc, err := c.openOnce(ctx, p, off, n)
			if err != nil {
				return err
			}
			defer rc.Close()
			blk, err = c.readBlock(rc, p, i)
			return err
		})
		if err != nil {
			return nil, fmt.Errorf("reading %s block %d: %w", p.Key, i, err)
		}
		if blk != nil {
			return blk, nil
		}
		if again {
			c.log.Error("block failed CRC32C verification twice; returning EIO",
				"object", p.Key, "block", i, "object_bytes", fmt.Sprintf("%d-%d", p.Off+off, p.Off+off+n-1), "want", fmt.Sprintf("%08x", p.Chunks[i]))
			return nil, fmt.Errorf("%w: %s block %d of the region at %d (object bytes %d-%d): manifest says CRC32C %08x",
				ErrChecksum, p.Key, i, p.Off, p.Off+off, p.Off+off+n-1, p.Chunks[i])
		}
		again = true
	}
}

// keyRing is a bounded set of block keys that forgets the oldest. It
// grows with the keys added, up to its bound, and allocates nothing by the
// bound (which scales with the cache budget).
type keyRing struct {
	keys  []blockKey
	limit int
	next  int
	set   map[blockKey]int // key -> how many times it is in keys
}

func newKeyRing(n int) *keyRing {
	return &keyRing{limit: n, set: map[blockKey]int{}}
}

func (r *keyRing) add(k blockKey) {
	if len(r.keys) < r.limit {
		r.keys = append(r.keys, k)
	} else {
		old := r.keys[r.next]
		if r.set[old]--; r.set[old] == 0 {
			delete(r.set, old)
		}
		r.keys[r.next] = k
		r.next = (r.next + 1) % len(r.keys)
	}
	r.set[k]++
}

func (r *keyRing) has(k blockKey) bool { return r.set[k] > 0 }
