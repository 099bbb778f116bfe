package cache

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/lakestream/lakestream/txn"
)

// PrefetchOptions configure a Prefetcher.
type PrefetchOptions struct {
	// Depth is P: touching step n prefetches steps n..n+P. 0 disables
	// prefetching.
	Depth int
	// Committed reports whether a step is committed and not reclaimed. It
	// is called with the prefetcher's lock held: it must not do I/O.
	Committed func(step int64) bool
	// Pack returns a rank's pack (rank -1: the shared files; nil when
	// none) of a committed step. It may fetch the step's index; it is
	// called by the prefetcher's own goroutine, never under its lock.
	Pack func(ctx context.Context, step int64, rank int) (*txn.Pack, error)
	// FillsPerRank bounds the memfd fills in flight, per rank being read;
	// one more runs beside them (default DefaultFillsPerRank).
	FillsPerRank int
	Logger       *slog.Logger
}

// DefaultFillsPerRank: the memfd fills in flight are one per rank being
// read, plus one, and at least minFills. Files fetched side by side share
// the link and finish together, so each fill beyond what keeps the link
// busy makes every file arrive later (a reader waiting on them gets them
// in bursts: the per-file p95 grows) for no more bytes a second; the one
// more has a GET under way when another ends, so the link does not idle
// between them. bench read, 4 MiB files, 4 readers, against two per rank:
// p95 0.70x-0.87x over HTTP and TLS, MB/s within the spread between
// passes (docs/bench/READPATH.md).
const DefaultFillsPerRank = 1

// minFills is the fewest memfd fills let run at once, whatever the ranks:
// one reader reads a file from memory several times faster than a GET
// brings the next, so with two in flight it waits for nearly every file;
// a third keeps it fed. Measured with bench read, the store server on a
// CPU of its own (docs/bench/READPATH.md).
const minFills = 3

// Prefetcher fetches, for the ranks this node's readers open, the step a
// reader touches and the P steps after it into the cache, nearest step
// first, with at most Options.Fetchers GETs in flight and at most Size/2
// bytes staged. Only ranks a reader opened are prefetched (a rank touched
// at or after position-2P-2; a reader that stops opening a rank stops its
// prefetch), so a node fetches what its readers read, whatever it shows.
// The touched step itself is included so that its remaining blocks arrive
// in parallel while the reader works through them; blocks already in
// flight, staged, cached or read recently are skipped, so nothing is
// fetched twice.
//
// The reader's position is the highest step touched (it moves back only
// when a rank is opened more than 2P+2 steps below its own last step, e.g.
// a job restarted from a checkpoint; a rank more than 2P+2 steps behind
// the position is read without prefetch). A job prefetches one step; it is dropped, cancelling its
// GETs and freeing its unread blocks, once its step falls outside
// [lowest-P-2, position+P] or is reclaimed, where lowest is the newest
// step of the slowest active rank: the slack below lets several workers
// read neighbouring steps at once, and readers of different ranks move at
// their own pace.
type Prefetcher struct {
	// Dependencies and constant data.
	c         *Cache
	depth     int
	committed func(int64) bool
	pack      func(context.Context, int64, int) (*txn.Pack, error)
	log       *slog.Logger
	ctx       context.Context
	kick      chan struct{} // wakes the scheduler; capacity 1
	perRank   int           // memfd fills in flight per active rank
	filling   atomic.Int64  // memfd fills in flight

	last atomic.Pointer[touch] // last touch: Touch's fast path

	mu       sync.Mutex
	roomWait bool           // GUARDED_BY(mu): memfd fills wait for Files.Freed
	pos      int64          // GUARDED_BY(mu): the reader's position, valid if hasPos
	hasPos   bool           // GUARDED_BY(mu)
	ranks    map[int]int64  // GUARDED_BY(mu): rank -> the newest step it was touched at
	jobs     map[int64]*job // GUARDED_BY(mu)
}

type touch struct {
	step int64
	rank int
}

// job prefetches the packs of one step's opened ranks.
type job struct {
	step   int64
	ranks  []int       // GUARDED_BY(Prefetcher.mu): ranks to fetch, in order
	packs  []*txn.Pack // GUARDED_BY(Prefetcher.mu): packs[i] of ranks[i], once resolved
	ctx    context.Context
	cancel context.CancelFunc
	// GUARDED_BY(Prefetcher.mu): the first pack not done, and per pack
	// the next file (memfds) and block to issue, and the blocks the block
	// path serves (nil: all).
	pi     int
	fi, bi []int
	need   [][]bool

	entries []*entry // GUARDED_BY(Cache.mu): blocks this job started
	dropped bool     // GUARDED_BY(Cache.mu)
}

// NewPrefetcher starts a prefetcher over c; it stops when ctx ends.
func (c *Cache) NewPrefetcher(ctx context.Context, o PrefetchOptions) *Prefetcher {
	if o.Logger == nil {
		o.Logger = c.log
	}
	p := &Prefetcher{
		c:         c,
		depth:     o.Depth,
		committed: o.Committed,
		pack:      o.Pack,
		log:       o.Logger,
		ctx:       ctx,
		kick:      make(chan struct{}, 1),
		perRank:   o.FillsPerRank,
		ranks:     map[int]int64{},
		jobs:      map[int64]*job{},
	}
	if p.perRank <= 0 {
		p.perRank = DefaultFillsPerRank
	}
	if p.depth > 0 {
		go p.run()
		context.AfterFunc(ctx, p.dropAll)
	}
	return p
}

// Touch tells the prefetcher that a reader opened a file of rank (-1: a
// step-level file) in step n.
func (p *Prefetcher) Touch(n int64, rank int) {
	if p.depth <= 0 || p.ctx.Err() != nil {
		return
	}
	t := &touch{n, rank}
	if old := p.last.Swap(t); old != nil && *old == *t {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// The position moves back only when a reader jumps back (a job
	// restarted from a checkpoint): a rank opened far below its own last
	// step. A rank slower than the others, or first opened far below the
	// position, does not move it (it is read without prefetch while it is
	// more than 2P+2 steps behind), or the faster ranks' jobs would be
	// dropped and fetched again.
	far := int64(2*p.depth + 2)
	at, seen := p.ranks[rank]
	back := seen && n < at-far
	if !seen || n > at || back {
		p.ranks[rank] = n
	}
	if !p.hasPos || n > p.pos || back {
		p.pos, p.hasPos = n, true
	}
	p.reconcileLocked(n)
}

// Kick re-evaluates the window after the view changed: steps committed
// since are prefetched, reclaimed ones dropped.
func (p *Prefetcher) Kick() {
	if p.depth <= 0 || p.ctx.Err() != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hasPos {
		p.reconcileLocked(p.pos)
	}
}

// Depth is how many steps beyond the reader's position are being
// prefetched or held.
func (p *Prefetcher) Depth() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for s := range p.jobs {
		if s > p.pos {
			n++
		}
	}
	return n
}

// activeRanksLocked are the ranks touched recently enough to prefetch, in
// order.
func (p *Prefetcher) activeRanksLocked() []int {
	// Ranks below stay in p.ranks (at most one entry per rank of the
	// stream), so that a slow reader's next open is not taken for a jump.
	var rs []int
	for r, at := range p.ranks {
		if at >= p.pos-int64(2*p.depth+2) {
			rs = append(rs, r)
		}
	}
	slices.Sort(rs)
	return rs
}

// reconcileLocked starts jobs for steps from..from+P inside the window,
// adds newly opened ranks to the jobs there, and drops the jobs outside it.
func (p *Prefetcher) reconcileLocked(from int64) {
	ranks := p.activeRanksLocked()
	// The window starts below the slowest active rank, not the position:
	// readers of different ranks move at their own pace, and a job dropped
	// under a slower reader would have its blocks fetched twice.
	lo, hi := p.pos-int64(p.depth)-2, p.pos+int64(p.depth)
	for _, r := range ranks {
		lo = min(lo, p.ranks[r]-int64(p.depth)-2)
	}
	for s, j := range p.jobs {
		if s < lo || s > hi || !p.committed(s) {
			p.dropLocked(j) // out of the window, or reclaimed
		}
	}
	started := false
	for s := max(from, lo); s <= min(from+int64(p.depth), hi); s++ {
		if j := p.jobs[s]; j != nil {
			for _, r := range ranks {
				if !slices.Contains(j.ranks, r) {
					j.ranks = append(j.ranks, r)
					started = true
				}
			}
			continue
		}
		if !p.committed(s) {
			break // not committed yet: Kick starts it later
		}
		ctx, cancel := context.WithCancel(p.ctx)
		p.jobs[s] = &job{step: s, ranks: slices.Clone(ranks), ctx: ctx, cancel: cancel}
		started = true
	}
	if started {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

func (p *Prefetcher) dropLocked(j *job) {
	delete(p.jobs, j.step)
	j.cancel()
	p.c.dropJob(j)
	if files := p.c.files.Load(); files != nil {
		files.dropJob(j)
	}
}

func (p *Prefetcher) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, j := range p.jobs {
		p.dropLocked(j)
	}
}

// work is one prefetch GET for job j: blocks (of one pack, or running on
// into adjacent ranks' packs of the same object), or (files set) a run of
// pk's files into memfds.
type work struct {
	j      *job
	blocks []blockRef
	pk     *txn.Pack
	files  []*txn.File
	bytes  int64
	pi     int // files: the pack's index in j.packs
	from   int // files: j.fi[pi] before the run, to take it again
}

// next returns the next GET to issue, from the lowest step's first pack
// not done: its memfd files first (when the cache has them), then the
// blocks the block path serves, up to maxRun blocks' bytes a GET, running
// on into the next ranks' packs where they follow in the same object (a
// node reading adjacent ranks of small files fetches them in one GET). A
// job's packs are resolved first, outside the lock (it may fetch the
// step's index); a rank that fails to resolve is skipped.
func (p *Prefetcher) next() (work, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	files := p.c.files.Load()
	for {
		var best *job
		for _, j := range p.jobs {
			for j.pi < len(j.packs) && j.packDone(j.pi, files) {
				j.pi++
			}
			if j.pi < len(j.ranks) && (best == nil || j.step < best.step) {
				best = j
			}
		}
		if best == nil {
			return work{}, false
		}
		if len(best.packs) < len(best.ranks) {
			step, rank := best.step, best.ranks[len(best.packs)]
			p.mu.Unlock()
			pk, err := p.pack(best.ctx, step, rank)
			p.mu.Lock()
			if err != nil && best.ctx.Err() == nil {
				p.log.Debug("prefetch: no pack", "step", step, "rank", rank, "err", err)
			}
			best.addPack(pk) // nil: skipped; only this goroutine adds packs
			continue
		}
		pk := best.packs[best.pi]
		if files != nil && best.fi[best.pi] < len(pk.Files) {
			if p.roomWait {
				// The files wait for room; the blocks go on meanwhile.
				if run := best.blockRun(files, p.c); len(run) > 0 {
					return work{j: best, blocks: run}, true
				}
				return work{}, false // room given back wakes the scheduler
			}
			if p.filling.Load() >= int64(max(p.perRank*len(p.activeRanksLocked())+1, minFills)) {
				return work{}, false // a fill's end kicks the scheduler
			}
			from := best.fi[best.pi]
			run, bytes, next := files.nextRun(pk, from)
			best.fi[best.pi] = next
			if len(run) > 0 {
				return work{j: best, pk: pk, files: run, bytes: bytes, pi: best.pi, from: from}, true
			}
			continue
		}
		if run := best.blockRun(files, p.c); len(run) > 0 {
			return work{j: best, blocks: run}, true
		}
	}
}

func (j *job) addPack(pk *txn.Pack) {
	j.packs = append(j.packs, pk)
	j.fi = append(j.fi, 0)
	j.bi = append(j.bi, 0)
	j.need = append(j.need, nil)
}

// packDone reports whether the job issued everything of pack q.
func (j *job) packDone(q int, files *Files) bool {
	pk := j.packs[q]
	return pk == nil || (files == nil || j.fi[q] >= len(pk.Files)) && j.bi[q] >= len(pk.Chunks)
}

// blockRun takes the next run of blocks the block path serves from the
// job's first pack not done on: consecutive blocks up to maxRun blocks'
// bytes, going on into the next pack when it starts where this one ends
// in the same object. A block the block path does not serve (its bytes go
// to a memfd) ends the run.
func (j *job) blockRun(files *Files, c *Cache) []blockRef {
	limit := int64(c.maxRun) * c.chunk
	var run []blockRef
	var bytes int64
	for q := j.pi; q < len(j.packs); q++ {
		pk := j.packs[q]
		if pk == nil || q > j.pi && !follows(j.packs[q-1], pk) {
			break
		}
		if files != nil && j.need[q] == nil {
			j.need[q] = blocksNeeded(pk, files, c.chunk)
		}
		for ; j.bi[q] < len(pk.Chunks); j.bi[q]++ {
			i := j.bi[q]
			if j.need[q] != nil && !j.need[q][i] {
				if len(run) > 0 {
					return run
				}
				continue
			}
			n := c.blockLen(pk, i)
			if len(run) > 0 && bytes+n > limit {
				return run
			}
			run = append(run, blockRef{pk, i})
			bytes += n
		}
	}
	return run
}

// follows reports whether pack b's bytes start where a's end, in the same
// object: adjacent ranks' regions of one TGB.
func follows(a, b *txn.Pack) bool {
	return a != nil && a.Key == b.Key && a.Off+a.Size == b.Off
}

// blocksNeeded marks the blocks of pk that hold bytes of a file the block
// path serves (one not eligible for a memfd).
func blocksNeeded(pk *txn.Pack, files *Files, chunk int64) []bool {
	need := make([]bool, len(pk.Chunks))
	for _, f := range pk.Files {
		if files.Eligible(f.Size) || f.Size == 0 {
			continue
		}
		for b := f.Off / chunk; b <= (f.Off+f.Size-1)/chunk && b < int64(len(need)); b++ {
			need[b] = true
		}
	}
	return need
}

// run is the scheduler: it issues GETs one at a time, blocking for a GET
// slot and block prefetch memory, so the nearest step always goes first.
// Memory-file room is only tried: without it, fills wait for room to be
// given back while blocks go on.
func (p *Prefetcher) run() {
	for {
		w, ok := p.next()
		if !ok {
			var freed <-chan struct{}
			if files := p.c.files.Load(); files != nil {
				freed = files.Freed()
			}
			select {
			case <-p.kick:
				continue
			case <-freed:
				p.mu.Lock()
				p.roomWait = false
				p.mu.Unlock()
				continue
			case <-p.ctx.Done():
				return
			}
		}
		var err error
		if w.files != nil {
			err = p.prefetchFiles(w)
		} else {
			err = p.c.prefetch(w.j, w.blocks)
		}
		if err != nil && w.j.ctx.Err() == nil {
			p.log.Debug("prefetch stopped", "step", w.j.step, "err", err)
		}
	}
}

// prefetchFiles starts the GET of a run of files into memfds, once a GET
// slot is free, if there is room for the files; else the run is taken
// again once room is given back (Files.Freed).
func (p *Prefetcher) prefetchFiles(w work) error {
	c := p.c
	files := c.files.Load()
	if err := c.slots.Acquire(w.j.ctx, 1); err != nil {
		return err
	}
	if !files.tryReserve(w.bytes, len(w.files)) {
		c.slots.Release(1)
		p.mu.Lock()
		w.j.fi[w.pi] = min(w.j.fi[w.pi], w.from)
		p.roomWait = true
		p.mu.Unlock()
		// Room given back before roomWait was set left a token in
		// Freed: the scheduler wakes and tries again.
		return nil
	}
	p.filling.Add(1)
	files.start(w.j, w.pk, w.files, func() {
		c.slots.Release(1)
		p.filling.Add(-1)
		select {
		case p.kick <- struct{}{}:
		default:
		}
	})
	return nil
}

// absentLocked reports whether block k is nowhere: not in flight, staged,
// cached, or read recently.
func (c *Cache) absentLocked(k blockKey) bool {
	_, busy := c.calls[k]
	return !busy && !c.recent.has(k) && !c.lruHas(k)
}

// lruHas reports whether the ristretto cache holds block k.
func (c *Cache) lruHas(k blockKey) bool {
	b, ok := c.lruGet(k)
	if ok {
		c.release(b)
	}
	return ok
}

// prefetch fetches for job j the blocks bs (consecutive in their object)
// that are absent, each run of consecutive absent blocks with one ranged
// GET. It blocks for a GET slot and for prefetch memory.
func (c *Cache) prefetch(j *job, bs []blockRef) error {
	for i := 0; i < len(bs); {
		c.mu.Lock()
		for i < len(bs) && !c.absentLocked(bs[i].key()) {
			i++
		}
		end := i
		for end < len(bs) && c.absentLocked(bs[end].key()) {
			end++
		}
		c.mu.Unlock()
		if i == end {
			return nil
		}
		var bytes int64
		for _, b := range bs[i:end] {
			bytes += c.blockLen(b.pk, b.i)
		}
		if err := c.slots.Acquire(j.ctx, 1); err != nil {
			return err
		}
		if err := c.prefetchSem.Acquire(j.ctx, bytes); err != nil {
			c.slots.Release(1)
			return err
		}
		c.prefetchBytes.Add(bytes)
		c.mu.Lock()
		// A reader may have started some of these meanwhile: fetch the
		// absent prefix, give back the rest.
		run := i
		for run < end && !j.dropped && c.absentLocked(bs[run].key()) {
			run++
		}
		var unused int64
		for _, b := range bs[run:end] {
			unused += c.blockLen(b.pk, b.i)
		}
		if unused > 0 {
			c.prefetchSem.Release(unused)
			c.prefetchBytes.Add(-unused)
		}
		if run == i {
			c.slots.Release(1)
		} else {
			j.entries = append(j.entries, c.startLocked(bs[i:run], true, true)...)
		}
		c.mu.Unlock()
		i = max(run, i+1)
	}
	return nil
}

// dropJob lets go of a dropped job's blocks: unfinished fetches nobody
// else waits for are cancelled, ones a reader waits for become ordinary
// reads, and unread staged blocks are freed.
func (c *Cache) dropJob(j *job) {
	c.mu.Lock()
	defer c.mu.Unlock()
	j.dropped = true
	for _, e := range j.entries {
		if c.calls[e.key] != e || !e.prefetch {
			continue
		}
		if !e.finished() {
			e.prefetch = false
			c.releaseLocked(e)
			c.leaveLocked(e)
			continue
		}
		c.unstageLocked(e, e.served > 0)
	}
	j.entries = nil
}
