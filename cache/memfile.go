package cache

// Whole files in memory files (backing.go: a private huge-page tmpfs, or
// memfds): the passthrough path. A file's bytes stream from the GET's body
// through one small reused buffer, where their CRC32C is computed while
// they are hot, into the memory file's pages; the file is frozen (sealed,
// or left open read-only) and handed out only once all of it matched the
// CRC32C recorded at production. The memory file is the cache for that
// file: the kernel reads it directly (FUSE passthrough), so its bytes are
// held once, never also as cache blocks. ("memfd" below means any such
// memory file.)

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/txn"
)

// ErrNoRoom: a file does not fit in the memfd budget now (it is held by
// open and unread files); the caller serves it from blocks.
var ErrNoRoom = errors.New("no room in the memfd budget")

// FilesOptions configure the memfd files of a Cache.
type FilesOptions struct {
	// Budget bounds the bytes held in memfds: files open, prefetched and
	// not read yet, and recently read ones.
	Budget int64
	// Backing makes the files (default: memfds).
	Backing *Backing
	// MinSize and MaxSize bound the files that go to memfds; others are
	// served from blocks (Eligible). MaxSize is at most Budget/8, so one
	// file never holds most of the budget.
	MinSize, MaxSize int64
	// MaxFiles bounds the memory files held (each holds an fd of this
	// process); 0: half of the soft RLIMIT_NOFILE less 32 (DefaultMaxFiles).
	// Opens beyond it are served from blocks, never failed.
	MaxFiles int
}

// DefaultMaxFiles is FilesOptions.MaxFiles when it is not set: half the
// fds this process may open, less a few for the FUSE device, the store's
// connections and files being filled, so memory files never take the fds
// the rest of the mount needs (with a low `ulimit -n` each held file
// would otherwise pin one until memfd_create failed with EMFILE).
func DefaultMaxFiles() int {
	var r unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &r); err != nil || r.Cur > 1<<21 {
		return 1 << 20
	}
	return max(int(r.Cur)/2-32, 8)
}

// Files holds verified whole files in sealed memfds.
//
// Invariants: a memfd is handed out (Handle.Fd) only after the whole file
// matched its CRC32C and no fd can write it any more; a failed fill is never
// kept (the next open fetches again); the bytes of memfds this process
// holds never exceed Budget (room), nor their number MaxFiles; a file is
// dropped only when no handle has it open; a read file with no open handle
// waits in the idle list, bounded by Budget/8, and is dropped first when
// room is needed. Room is only ever tried, never waited for: a prefetch
// finding none waits for Files.freed outside any lock, and the last eighth
// of the budget and of MaxFiles is left to opens (demand first).
//
// Lock order: Cache.mu is never held with Files.mu; Files.mu is held for
// no I/O.
type Files struct {
	c        *Cache
	min, max int64
	idleCap  int64
	budget   int64
	maxFiles int
	pieces   chan []byte // reusable stream buffers
	backing  *Backing
	freed    chan struct{} // a token after room was given back (capacity 1)

	mu        sync.Mutex
	reserved  int64                // GUARDED_BY(mu): bytes of room taken (files held, filling, or reserved for a prefetch)
	nfiles    int                  // GUARDED_BY(mu): files counted the same way
	files     map[fileKey]*memFile // GUARDED_BY(mu)
	idle      *list.List           // GUARDED_BY(mu): read, unopened files, oldest first
	idleBytes int64                // GUARDED_BY(mu)

	held, peak, opens, fills atomic.Int64
	warnedLarge              atomic.Bool
}

// fileKey names a file by its object and the object offset of its bytes.
type fileKey struct {
	obj string
	off int64
}

// memFile is one file being filled, or filled and held.
type memFile struct {
	key  fileKey
	size int64
	crc  uint32
	name string        // for errors and logs
	done chan struct{} // closed once fd or err is set
	// fd is the frozen memory file once done with err == nil, else -1:
	// never an int's zero value, since fd 0 is some other file of this
	// process and closeLocked closes any fd >= 0.
	fd  int
	err error

	// GUARDED_BY(Files.mu):
	opens   int           // open handles
	waiters int           // opens waiting for the fill
	job     *job          // the prefetch job holding it unread, or nil
	read    bool          // opened at least once
	elem    *list.Element // in Files.idle, or nil
	gone    bool          // dropped from files: closes when the last handle goes
	run     *fillRun      // the prefetch GET filling it, or nil (an open's own fill)
	wanted  bool          // counted in run.live
}

// fillRun is a prefetch job's GET filling a run of memory files. Its
// context ends only when none of its unfinished files is wanted any more
// (no job holds it, no open waits for it), as fetchRun does for blocks: a
// job dropped while an open waits for one of its files leaves that fill
// to the open, instead of cancelling it under the open.
type fillRun struct {
	cancel context.CancelFunc
	files  []*memFile
	live   int  // GUARDED_BY(Files.mu): unfinished files that are wanted
	dead   bool // GUARDED_BY(Files.mu): cancelled
	// refills cancel the refetches of its files that failed verification
	// (refillContext): they outlive the GET, not the run's wanting them.
	refills []context.CancelFunc // GUARDED_BY(Files.mu)
}

func (mf *memFile) finished() bool { return closed(mf.done) }

// settleLocked recounts whether mf's fill is wanted, after its job,
// waiters or outcome changed; the run's last wanted file going cancels
// the GET and drops the run's unfinished files (an open coming later
// fetches its file itself).
func (f *Files) settleLocked(mf *memFile) {
	r := mf.run
	if r == nil || r.dead {
		return
	}
	want := !mf.finished() && (mf.job != nil || mf.waiters > 0)
	switch {
	case want && !mf.wanted:
		mf.wanted = true
		r.live++
	case !want && mf.wanted:
		mf.wanted = false
		if r.live--; r.live > 0 {
			return
		}
		r.dead = true
		r.cancel()
		for _, stop := range r.refills {
			stop()
		}
		for _, o := range r.files {
			if !o.finished() {
				f.dropLocked(o)
			}
		}
	}
}

// UseFiles gives c memfd files: from now on the prefetcher fetches the
// files they take into memfds. Close of c does not close them: handles
// stay valid until released.
func (c *Cache) UseFiles(o FilesOptions) *Files {
	if o.MaxSize <= 0 || o.MaxSize > o.Budget/8 {
		o.MaxSize = o.Budget / 8
	}
	if o.MaxFiles <= 0 {
		o.MaxFiles = DefaultMaxFiles()
	}
	f := &Files{
		c: c, min: max(o.MinSize, 1), max: o.MaxSize,
		idleCap: o.Budget / 8, budget: o.Budget, maxFiles: o.MaxFiles,
		files: map[fileKey]*memFile{}, idle: list.New(),
		pieces:  make(chan []byte, 2*DefaultFetchers),
		backing: o.Backing,
		freed:   make(chan struct{}, 1),
	}
	if f.backing == nil {
		f.backing = MemfdBacking()
	}
	c.files.Store(f)
	return f
}

// Files returns c's memfd files, nil before UseFiles.
func (c *Cache) Files() *Files { return c.files.Load() }

// Eligible reports whether a file of size bytes goes to a memfd. The first
// file too large for one is logged: it is served from blocks, which a user
// who expected passthrough would not see otherwise.
func (f *Files) Eligible(size int64) bool {
	if size > f.max && f.warnedLarge.CompareAndSwap(false, true) {
		f.c.log.Info("passthrough: files larger than an eighth of its memory are served from blocks; raise --cache-size (passthrough memory is a quarter of it) to serve them by passthrough",
			"file_bytes", size, "largest", f.max)
	}
	return size >= f.min && size <= f.max
}

// FilesStats are the memfd counters.
type FilesStats struct {
	Bytes, Peak int64 // held now, and the most ever held
	Opens       int64 // handles given out
	Fills       int64 // files fetched into a memfd
}

// Stats returns the counters; zero on a nil Files.
func (f *Files) Stats() FilesStats {
	if f == nil {
		return FilesStats{}
	}
	return FilesStats{Bytes: f.held.Load(), Peak: f.peak.Load(), Opens: f.opens.Load(), Fills: f.fills.Load()}
}

// Handle is an open file's hold on a memfd.
type Handle struct {
	f    *Files
	mf   *memFile
	once sync.Once
}

// Fd is the frozen memory file, valid until Release.
func (h *Handle) Fd() int { return h.mf.fd }

// Size is the file's size.
func (h *Handle) Size() int64 { return h.mf.size }

// ReadAt reads from the memfd: for a kernel that did not take the fd.
func (h *Handle) ReadAt(dst []byte, off int64) (int, error) {
	n, err := unix.Pread(h.mf.fd, dst, off)
	if err == nil && n < len(dst) {
		err = io.EOF
	}
	return n, err
}

// Release lets go of the handle; the file stays, idle, until room is
// needed.
func (h *Handle) Release() {
	h.once.Do(func() {
		f := h.f
		f.mu.Lock()
		defer f.mu.Unlock()
		h.mf.opens--
		if h.mf.opens > 0 {
			return
		}
		if h.mf.gone {
			f.closeLocked(h.mf)
			return
		}
		f.parkLocked(h.mf)
	})
}

// parkLocked puts a filled file nobody holds (no handle, no waiting open,
// no prefetch job) in the idle list, where it is dropped first when room
// is needed, and trims the list to its cap.
func (f *Files) parkLocked(mf *memFile) {
	select {
	case <-mf.done:
	default:
		return // finish parks it
	}
	if mf.gone || mf.err != nil || mf.opens > 0 || mf.waiters > 0 || mf.job != nil || mf.elem != nil {
		return
	}
	mf.elem = f.idle.PushBack(mf)
	f.idleBytes += mf.size
	for f.idleBytes > f.idleCap {
		f.dropLocked(f.idle.Front().Value.(*memFile))
	}
}

// maxOpenFills bounds the fills one Open waits for: a fill it waited for
// can only be lost to the cache closing, or to a drop in the instant
// between the fill and the open taking it.
const maxOpenFills = 3

// Open returns a handle on file fi of pack p, fetching it if no fill has
// it yet. It waits for the fill; ErrChecksum when the bytes failed
// verification twice (nothing of them is handed out), ErrNoRoom when the
// budget is held by open and unread files.
func (f *Files) Open(ctx context.Context, p *txn.Pack, fi *txn.File) (*Handle, error) {
	for n := 1; ; n++ {
		h, again, err := f.open(ctx, p, fi)
		if !again || n == maxOpenFills {
			return h, err
		}
	}
}

// open is one attempt of Open; again says the fill it waited for was lost
// (cancelled or dropped under it) and another may succeed.
func (f *Files) open(ctx context.Context, p *txn.Pack, fi *txn.File) (h *Handle, again bool, err error) {
	k := fileKey{p.Key, p.Off + fi.Off}
	f.mu.Lock()
	mf := f.files[k]
	if mf == nil {
		if !f.reserveLocked(fi.Size, 1, true) {
			f.mu.Unlock()
			return nil, false, ErrNoRoom
		}
		mf = f.addLocked(k, fi, nil)
		f.c.misses.Add(1)
		go f.fill(f.c.life, p, []*memFile{mf}, nil)
	} else {
		f.c.hits.Add(1)
	}
	mf.waiters++
	f.settleLocked(mf)
	f.mu.Unlock()
	select {
	case <-mf.done:
	case <-ctx.Done():
		f.mu.Lock()
		mf.waiters--
		f.settleLocked(mf)
		f.parkLocked(mf) // a file fetched for this open alone
		f.mu.Unlock()
		return nil, false, ctx.Err()
	}
	f.mu.Lock()
	mf.waiters--
	if mf.err != nil {
		f.mu.Unlock()
		// A fill cancelled under a waiting open (the cache closing): one
		// more try, bounded by Open.
		return nil, errors.Is(mf.err, context.Canceled) && ctx.Err() == nil, mf.err
	}
	if mf.gone { // dropped between the fill and now: fetch it again
		f.mu.Unlock()
		return nil, true, fmt.Errorf("opening %s of %s: its memory file was dropped: %w", fi.Name, p.Key, ErrNoRoom)
	}
	mf.opens++
	mf.job = nil
	if mf.elem != nil {
		f.idle.Remove(mf.elem)
		f.idleBytes -= mf.size
		mf.elem = nil
	}
	first := !mf.read
	mf.read = true
	f.mu.Unlock()
	f.opens.Add(1)
	if first {
		f.c.served.Add(mf.size)
	}
	return &Handle{f: f, mf: mf}, false, nil
}

// reserveLocked takes room for k files of n bytes, dropping idle files
// for it; false if open and unread files hold too much. A prefetch
// (!demand) leaves the last eighth of the budget and of MaxFiles to opens.
func (f *Files) reserveLocked(n int64, k int, demand bool) bool {
	budget, files := f.budget, f.maxFiles
	if !demand {
		budget -= f.budget / 8
		files -= f.maxFiles / 8
	}
	for f.reserved+n > budget || f.nfiles+k > files {
		e := f.idle.Front()
		if e == nil {
			return false
		}
		f.dropLocked(e.Value.(*memFile))
	}
	f.reserved += n
	f.nfiles += k
	return true
}

// releaseLocked gives back room for k files of n bytes and wakes a
// prefetch waiting for room.
func (f *Files) releaseLocked(n int64, k int) {
	f.reserved -= n
	f.nfiles -= k
	select {
	case f.freed <- struct{}{}:
	default:
	}
}

// Freed receives a token after room was given back: a prefetch that found
// no room waits for it (never inside Acquire, holding the scheduler).
func (f *Files) Freed() <-chan struct{} { return f.freed }

func (f *Files) addLocked(k fileKey, fi *txn.File, j *job) *memFile {
	mf := &memFile{key: k, size: fi.Size, crc: fi.CRC, name: fi.Name, done: make(chan struct{}), fd: -1, job: j}
	f.files[k] = mf
	if h := f.held.Add(fi.Size); h > f.peak.Load() {
		f.peak.Store(h) // one writer at a time: under mu
	}
	return mf
}

// dropLocked removes a file; its memfd closes now, or when its last
// handle is released.
func (f *Files) dropLocked(mf *memFile) {
	if mf.gone {
		return
	}
	mf.gone = true
	if f.files[mf.key] == mf {
		delete(f.files, mf.key)
	}
	if mf.elem != nil {
		f.idle.Remove(mf.elem)
		f.idleBytes -= mf.size
		mf.elem = nil
	}
	if mf.opens == 0 {
		f.closeLocked(mf)
	}
}

// closeLocked closes a gone file's memfd (after its fill) and gives its
// room back.
func (f *Files) closeLocked(mf *memFile) {
	select {
	case <-mf.done:
	default:
		return // the fill closes it when it ends (finish)
	}
	if mf.fd >= 0 {
		unix.Close(mf.fd)
		mf.fd = -1
	}
	f.releaseLocked(mf.size, 1)
	f.held.Add(-mf.size)
}

// finish publishes a fill's outcome.
func (f *Files) finish(mf *memFile, fd int, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	mf.fd, mf.err = fd, err
	close(mf.done)
	f.settleLocked(mf)
	if err != nil && !mf.gone {
		mf.gone = true
		if f.files[mf.key] == mf {
			delete(f.files, mf.key)
		}
	}
	if mf.gone && mf.opens == 0 {
		f.closeLocked(mf)
		return
	}
	f.parkLocked(mf) // its open left before it was filled
}

// fill fetches the files of one run, in object order, with one ranged GET
// (from the first file's first byte to the last one's last) and streams
// each into its memfd. A file whose bytes fail verification is fetched
// again alone, once, after the GET if need be (refillContext); a second
// failure is ErrChecksum. Transient store errors, at the GET or in the
// middle of its body, are waited out (Retry): the next attempt starts at
// the first file not yet filled. slot, if set, is released when the GET
// is done.
func (f *Files) fill(ctx context.Context, p *txn.Pack, run []*memFile, slot func()) {
	if slot != nil {
		defer slot()
	}
	next := 0
	err := f.c.retry.Do(ctx, func(ctx context.Context) error {
		var err error
		next, err = f.fillFrom(ctx, p, run, next)
		return err
	})
	if err != nil {
		for _, mf := range run[next:] {
			f.finish(mf, -1, fmt.Errorf("reading %s of %s: %w", mf.name, p.Key, err))
		}
	}
}

// fillFrom is one GET of run[from:]: it fills the files in turn and
// returns the index of the first one not finished and the error that
// stopped it.
func (f *Files) fillFrom(ctx context.Context, p *txn.Pack, run []*memFile, from int) (int, error) {
	off := run[from].key.off - p.Off
	end := run[len(run)-1].key.off + run[len(run)-1].size - p.Off
	rc, err := f.c.openOnce(ctx, p, off, end-off)
	if err != nil {
		return from, err
	}
	defer rc.Close()
	pos := off
	for i := from; i < len(run); i++ {
		mf := run[i]
		if fo := mf.key.off - p.Off; fo > pos {
			n, err := io.CopyN(io.Discard, rc, fo-pos)
			f.c.fetched.Add(n)
			if err != nil {
				return i, err
			}
		}
		pos = mf.key.off - p.Off + mf.size
		fd, err := f.stream(rc, mf)
		if errors.Is(err, ErrChecksum) {
			// The stream is still in step: go on with the rest.
			if rctx, stop, ok := f.refillContext(mf); ok {
				go func() {
					defer stop()
					f.refill(rctx, p, mf)
				}()
			} else {
				f.finish(mf, -1, fmt.Errorf("reading %s of %s: %w", mf.name, p.Key, err))
			}
			continue
		}
		if err != nil {
			return i, err
		}
		f.fills.Add(1)
		f.finish(mf, fd, nil)
	}
	return len(run), nil
}

// refillContext returns the context a refetch of mf runs under: the
// cache's lifetime, not the GET that found the mismatch (a prefetch GET's
// context ends with it, which cancelled nearly every refill of a
// prefetched file), ended with mf's run when nobody wants the run's files
// any more. ok is false when mf was dropped already: nobody wants it.
func (f *Files) refillContext(mf *memFile) (ctx context.Context, stop context.CancelFunc, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if mf.gone { // a dead run drops its unfinished files
		return nil, nil, false
	}
	ctx, stop = context.WithCancel(f.c.life)
	if mf.run != nil {
		mf.run.refills = append(mf.run.refills, stop)
	}
	return ctx, stop, true
}

// refill fetches a file that failed verification once more, alone.
func (f *Files) refill(ctx context.Context, p *txn.Pack, mf *memFile) {
	off := mf.key.off - p.Off
	fd := -1 // until stream returns a file: a failed refill holds none
	err := f.c.retry.Do(ctx, func(ctx context.Context) error {
		rc, err := f.c.openOnce(ctx, p, off, mf.size)
		if err != nil {
			return err
		}
		defer rc.Close()
		fd, err = f.stream(rc, mf)
		return err
	})
	if errors.Is(err, ErrChecksum) {
		f.c.log.Error("file failed CRC32C verification twice; opens return EIO",
			"object", p.Key, "file", mf.name, "object_bytes", fmt.Sprintf("%d-%d", mf.key.off, mf.key.off+mf.size-1))
	}
	if err != nil {
		err = fmt.Errorf("reading %s of %s: %w", mf.name, p.Key, err)
	} else {
		f.fills.Add(1)
	}
	f.finish(mf, fd, err)
}

// streamPiece is how much is read, checked and written to the memfd at a
// time: small enough that the CRC32C and the write read bytes still in
// the CPU cache.
const streamPiece = 256 << 10

func (f *Files) getPiece() []byte {
	select {
	case b := <-f.pieces:
		return b
	default:
		return make([]byte, streamPiece)
	}
}

func (f *Files) putPiece(b []byte) {
	select {
	case f.pieces <- b:
	default:
	}
}

// stream reads mf.size bytes of rc into a new memory file, checks them
// against mf.crc and freezes the file (Backing.freeze). On a mismatch the
// stream has still been read to the file's end and the error is
// ErrChecksum. On any error the memory file is closed: nothing of a failed
// fill outlives it.
func (f *Files) stream(rc io.Reader, mf *memFile) (int, error) {
	fd, err := f.backing.create(mf.name, mf.size)
	if err != nil {
		return -1, localError{err}
	}
	if err := f.copyChecked(rc, mf, fd); err != nil {
		unix.Close(fd)
		return -1, err
	}
	ro, err := f.backing.freeze(fd) // closes fd, whatever happens
	if err != nil {
		return -1, localError{err}
	}
	return ro, nil
}

// copyChecked writes mf.size bytes of rc into fd and checks their CRC32C.
func (f *Files) copyChecked(rc io.Reader, mf *memFile, fd int) error {
	buf := f.getPiece()
	defer f.putPiece(buf)
	var crc uint32
	for o := int64(0); o < mf.size; {
		piece := buf[:min(int64(len(buf)), mf.size-o)]
		n, err := io.ReadFull(rc, piece)
		f.c.fetched.Add(int64(n))
		if err != nil {
			return err
		}
		crc = crc32.Update(crc, castagnoli, piece)
		// pwrite, not a mapping read into: written whole, pages are
		// allocated without being zeroed first (the mapping zeroed every
		// page, measured at half the CPU of a fill).
		for w := 0; w < n; {
			k, err := unix.Pwrite(fd, piece[w:], o+int64(w))
			if errors.Is(err, unix.ENOSPC) {
				return localError{fmt.Errorf("%w: writing a %s file: %w", ErrNoRoom, f.backing.kind, err)}
			}
			if err != nil {
				return localError{fmt.Errorf("writing a %s file: %w", f.backing.kind, err)}
			}
			w += k
		}
		o += int64(n)
	}
	if crc != mf.crc {
		f.c.verifyFailures.Add(1)
		f.c.log.Warn("file failed CRC32C verification", "file", mf.name,
			"object_bytes", fmt.Sprintf("%d-%d", mf.key.off, mf.key.off+mf.size-1),
			"crc", fmt.Sprintf("%08x", crc), "want", fmt.Sprintf("%08x", mf.crc))
		return fmt.Errorf("%w: file %s (object %s bytes %d-%d): manifest says CRC32C %08x",
			ErrChecksum, mf.name, mf.key.obj, mf.key.off, mf.key.off+mf.size-1, mf.crc)
	}
	return nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// nextRun returns the next run of p's eligible files from index from on
// that no fill holds: files adjacent in the object (gaps under a block),
// in object order, of at most maxRun blocks' bytes in all; and the index
// after the run.
func (f *Files) nextRun(p *txn.Pack, from int) (run []*txn.File, bytes int64, next int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	// A quarter of the budget at most: a run of maxRun blocks can be
	// larger than the whole budget (4 MiB chunks, 64 MiB of cache), and
	// its room would never be free.
	limit := min(int64(f.c.maxRun)*f.c.chunk, f.budget/4)
	var end int64
	i := from
	for ; i < len(p.Files); i++ {
		fi := &p.Files[i]
		if !f.Eligible(fi.Size) || f.files[fileKey{p.Key, p.Off + fi.Off}] != nil {
			if len(run) > 0 {
				break
			}
			continue
		}
		if len(run) > 0 && (fi.Off < end || fi.Off-end >= f.c.chunk || fi.Off+fi.Size-run[0].Off > limit) {
			break
		}
		run = append(run, fi)
		bytes += fi.Size
		end = fi.Off + fi.Size
	}
	return run, bytes, i
}

// tryReserve takes room for a prefetch of k files of n bytes, dropping
// idle files first; false if open and unread files hold it (the caller
// waits for Freed, never here).
func (f *Files) tryReserve(n int64, k int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reserveLocked(n, k, false)
}

// start fills the files of run that are still absent for prefetch job j,
// with room for all of them taken (what is not used is given back); slot
// is released when the GET is done.
func (f *Files) start(j *job, p *txn.Pack, run []*txn.File, slot func()) {
	f.mu.Lock()
	var mfs []*memFile
	var unused int64
	var unusedFiles int
	for _, fi := range run {
		k := fileKey{p.Key, p.Off + fi.Off}
		if f.files[k] != nil || j.ctx.Err() != nil {
			unused += fi.Size
			unusedFiles++
			continue
		}
		mfs = append(mfs, f.addLocked(k, fi, j))
	}
	if unusedFiles > 0 {
		f.releaseLocked(unused, unusedFiles)
	}
	ctx, cancel := context.WithCancel(f.c.life)
	r := &fillRun{cancel: cancel, files: mfs}
	for _, mf := range mfs {
		mf.run = r
		f.settleLocked(mf)
	}
	f.mu.Unlock()
	if len(mfs) == 0 {
		cancel()
		slot()
		return
	}
	f.c.misses.Add(int64(len(mfs)))
	// A run with a hole (a file filled meanwhile) is fetched whole: the
	// hole is read and dropped, cheaper than a second GET.
	go func() {
		defer cancel()
		f.fill(ctx, p, mfs, slot)
	}()
}

// dropJob drops the files job j prefetched that no reader opened.
func (f *Files) dropJob(j *job) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, mf := range f.files {
		if mf.job != j {
			continue
		}
		mf.job = nil
		if !mf.read && mf.opens == 0 && mf.waiters == 0 {
			f.dropLocked(mf)
		}
		// Else an open waits for it: it is the open's now, and its fill
		// goes on for it.
		f.settleLocked(mf)
	}
}
