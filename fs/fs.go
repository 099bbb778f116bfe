// Package fs is the read-only FUSE view of a stream:
//
//	<mnt>/head                          the highest committed step, as text
//	<mnt>/steps/<n>/rank-<r>/<files>    one directory per live step
//	<mnt>/steps/<n>/<step-level files>
//
// # Invariants
//
//   - Every request reads one immutable Snapshot (View.Load), so a step
//     directory exists only once its TGB is committed and then has all of
//     it: the TGB is immutable and the tree is built from it alone.
//   - Step directories, their contents and file data never change, so
//     they carry long kernel entry/attribute timeouts and files are opened
//     with FOPEN_KEEP_CACHE. `head` and `steps/` change: their attributes
//     have zero timeouts, `head` is opened with FOPEN_DIRECT_IO, failed
//     lookups are not cached. A reclaimed step is removed from the inode
//     tree and the kernel is told (NotifyDelete) so its dentries go.
//   - A live step directory never leaves the view. Memory bounds evict
//     only cached file lists (they are built again on use), never a node
//     the kernel may be walking.
//   - Nothing is writable: the mount is read-only (the kernel answers
//     EROFS), and every mutating operation that still reaches a node
//     answers EROFS too.
//   - Errors become errno values in one place, Root.toErrno.
//
// # Concurrency
//
// Nodes hold immutable data (TGB pointers, packs, constant options);
// what is built on demand inside a step is built once under its own
// mutex (a directory's listing, lazyTree.mu, held while the listing is
// fetched; the rank directories made so far, rankSet.mu). A listing may be
// evicted by the metadata window and built again, identical; the step
// directories themselves never leave the view while live. The View is
// replaced atomically by one publisher (View.mu serialises publishers;
// View.waitMu guards the shared --wait deadlines; Root.notify serialises
// kernel notifications). Kernel notifications for reclaimed steps run on
// their own goroutine, never on the publisher's: the kernel may hold the
// steps/ directory lock while a --wait lookup waits for that very
// publisher.
//
// Lock order: Root.loadedMu, then go-fuse's inode locks; a lazyTree's mu
// is only ever tried (without waiting) under loadedMu, and loadedMu is
// never taken under a lazyTree's mu. No other two of the package's locks
// are held together. A lazyTree's mu is a channel so that a lookup waiting
// for another's build (which may wait out a store outage) gives up when
// its request is interrupted.
package fs

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/lakestream/lakestream/txn"
)

// Reader reads pack bytes: the block cache.
type Reader interface {
	// ReadAt reads up to len(dst) bytes of p at off (fewer only at the end
	// of the pack), every byte verified.
	ReadAt(ctx context.Context, p *txn.Pack, dst []byte, off int64) (int, error)
}

// VecReader is a Reader that can hand out the bytes it holds without a
// copy: the reply to the kernel is written straight from them.
type VecReader interface {
	// ReadVec returns up to n bytes of p at off, every byte verified, as
	// slices valid until release is called.
	ReadVec(ctx context.Context, p *txn.Pack, off, n int64) (vec [][]byte, release func(), err error)
}

// vecResult is a READ reply written to the kernel straight from cache
// blocks (go-fuse writes a result with Slices with one writev and calls
// Done after it).
type vecResult struct {
	vec     [][]byte
	release func()
}

func (r *vecResult) Slices() ([][]byte, fuse.Status) { return r.vec, fuse.OK }

func (r *vecResult) Size() int {
	n := 0
	for _, b := range r.vec {
		n += len(b)
	}
	return n
}

// Bytes flattens the reply, for a server that does not write vectors.
func (r *vecResult) Bytes(buf []byte) ([]byte, fuse.Status) {
	if len(r.vec) == 1 {
		return r.vec[0], fuse.OK
	}
	buf = buf[:0]
	for _, b := range r.vec {
		buf = append(buf, b...)
	}
	return buf, fuse.OK
}

func (r *vecResult) Done() { r.release() }

// Options configure the view.
type Options struct {
	View   *View
	Reader Reader
	// Ranks are the ranks shown (of the view, with ViewRanks); nil shows
	// all.
	Ranks []int
	// Wait is how long a lookup of a step that is not committed yet waits
	// for it (0: fail at once).
	Wait time.Duration
	// Packs gives a rank's file list when a reader first lists or opens
	// its directory.
	Packs PackSource
	// StreamRanks is the stream's number of ranks R.
	StreamRanks int
	// ViewRanks, if > 0, shows R2 = ViewRanks ranks (R2 divides R): rank-r
	// holds the original ranks r*(R/R2)..(r+1)*(R/R2)-1, each as a
	// directory rank-<original> (--view-ranks).
	ViewRanks int
	// Touch, if set, is called when a file of a step is opened, with the
	// original rank the file belongs to (-1: a step-level file): the
	// prefetch trigger.
	Touch func(step int64, rank int)
	// Served, if set, is called after bytes of a step were read.
	Served func(step int64, n int)
	// Awaited, if set, is called when a lookup asks for the step right
	// after the head: a reader waiting for it has read what came before
	// (a restarted trainer resumes there without reading anything else).
	Awaited func(step int64)
	// BlockSize is st_blksize of files: the I/O size tools should use.
	BlockSize uint32
	Logger    *slog.Logger
}

// ImmutableTimeout is the kernel entry and attribute timeout of step
// directories and files. Reclamation is notified, so it can be long.
const ImmutableTimeout = time.Hour

// MaxRead is the largest READ the kernel sends (max_read, max_pages).
const MaxRead = 1 << 20

// Root is the root directory node of the view.
type Root struct {
	gofs.Inode
	readOnly

	// Constant after New.
	view    *View
	reader  Reader
	packs   PackSource
	layout  layout
	wait    time.Duration
	touch   func(int64, int)
	servedf func(int64, int)
	awaited func(int64)
	blksize uint32
	log     *slog.Logger

	steps  atomic.Pointer[gofs.Inode] // set in OnAdd
	notify sync.Mutex                 // serialises kernel notifications

	// files, once set (SetPassthrough), serves the files it takes from
	// memfds the kernel reads directly.
	files                 atomic.Pointer[passthroughBox]
	opensMem, opensBlocks atomic.Int64

	loadedMu sync.Mutex
	loaded   map[int64]*dirNode // GUARDED_BY(loadedMu): step directories with file lists built
	builds   int64              // GUARDED_BY(loadedMu): file lists built
}

// New returns the root of a view; mount it with gofs.Mount and
// Root.MountOptions.
func New(o Options) *Root {
	r := &Root{
		view:    o.View,
		reader:  o.Reader,
		packs:   o.Packs,
		layout:  layout{ranks: o.StreamRanks, view: o.ViewRanks},
		wait:    o.Wait,
		touch:   o.Touch,
		servedf: o.Served,
		awaited: o.Awaited,
		blksize: o.BlockSize,
		log:     o.Logger,
		loaded:  map[int64]*dirNode{},
	}
	if o.Ranks != nil {
		r.layout.shown = map[int]bool{}
		for _, rk := range o.Ranks {
			r.layout.shown[rk] = true
		}
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if r.blksize == 0 {
		r.blksize = 1 << 20
	}
	return r
}

// MountOptions are the FUSE options the view's guarantees rely on:
// read-only, no default caching (nodes set their own timeouts), 1 MiB
// reads.
func (r *Root) MountOptions(allowOther, debug bool) *gofs.Options {
	zero := time.Duration(0)
	return &gofs.Options{
		EntryTimeout:    &zero,
		AttrTimeout:     &zero,
		NegativeTimeout: &zero,
		MountOptions: fuse.MountOptions{
			Options:           []string{"ro"},
			DirectMountFlags:  syscall.MS_NOSUID | syscall.MS_NODEV | syscall.MS_RDONLY,
			DirectMount:       true,
			DirectMountStrict: true,
			AllowOther:        allowOther,
			// The type "fuse.lakefs" in the mount table is how
			// lakefs-mount --abort knows a mount is ours.
			FsName:       "lakefs",
			Name:         "lakefs",
			MaxWrite:     MaxRead,
			MaxReadAhead: MaxRead,
			// go-fuse logs a splice warning on every 1 MiB reply otherwise.
			DisableSplice: true,
			// head is FOPEN_DIRECT_IO; let it be mmapped like any file.
			ExtraCapabilities: fuse.CAP_DIRECT_IO_ALLOW_MMAP,
			Debug:             debug,
		},
	}
}

// Publish shows a new snapshot. Steps it no longer has (reclaimed) leave
// the inode tree, and the kernel is told to drop their dentries.
func (r *Root) Publish(s *Snapshot) {
	old := r.view.Publish(s)
	if s.LiveFrom <= old.LiveFrom {
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.forgetBelow(s.LiveFrom)
	}()
	// Usually the kernel takes the notifications at once; but it holds the
	// steps/ directory lock while a --wait lookup in it waits, so do not
	// stall the publisher for long.
	t := time.NewTimer(notifyPatience)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.log.Debug("kernel notification for reclaimed steps is slow; continuing without waiting")
	}
}

// notifyPatience is how long Publish waits for the kernel to take the
// notifications of reclaimed steps.
const notifyPatience = time.Second

// Metadata window: a node keeps the file lists of the step directories
// within StepWindow steps of the one whose list it built last, and lets go
// of the others every trimEvery builds; a later lookup builds them again
// (fetching them again). So a reader moving through thousands of steps, or
// a find over all of them, holds a window of file lists, not the whole
// stream. Only cached lists go: step directories stay in the inode tree and
// the kernel's caches until their step is reclaimed, because a walker may be
// inside any of them (dropping them made find and os.walk miss files).
const (
	StepWindow = 64
	trimEvery  = 16
)

// warm records that a file list under step directory d (step n) was built,
// and every trimEvery builds lets go of the lists of steps outside the
// window around n.
func (r *Root) warm(n int64, d *dirNode) {
	r.loadedMu.Lock()
	defer r.loadedMu.Unlock()
	r.loaded[n] = d
	r.builds++
	if r.builds%trimEvery != 0 {
		return
	}
	for s, sd := range r.loaded {
		if s < n-StepWindow || s > n+StepWindow {
			delete(r.loaded, s)
			evictInode(sd)
		}
	}
}

// evictInode lets go of the cached file lists of directory d and of the
// directories under it the kernel still knows. The nodes stay: lookups in
// them build the lists again.
func evictInode(d *dirNode) {
	d.tree.evict()
	for _, ch := range d.Children() {
		if cd, ok := ch.Operations().(*dirNode); ok {
			evictInode(cd)
		}
	}
}

// forgetBelow removes the step directories below live (reclaimed) from the
// tree and the kernel's dentry cache.
func (r *Root) forgetBelow(live int64) {
	r.loadedMu.Lock()
	for s := range r.loaded {
		if s < live {
			delete(r.loaded, s)
		}
	}
	r.loadedMu.Unlock()
	steps := r.steps.Load()
	if steps == nil {
		return
	}
	r.notify.Lock()
	defer r.notify.Unlock()
	for name, ch := range steps.Children() {
		n, ok := parseStep(name)
		if !ok || n >= live {
			continue
		}
		steps.RmChild(name)
		if errno := steps.NotifyDelete(name, ch); errno != 0 && errno != syscall.ENOENT {
			r.log.Debug("kernel notification for a reclaimed step failed", "step", n, "errno", errno)
		}
	}
}

var (
	_ gofs.NodeOnAdder   = (*Root)(nil)
	_ gofs.NodeGetattrer = (*Root)(nil)
	_ gofs.NodeLookuper  = (*Root)(nil)
	_ gofs.NodeStatfser  = (*Root)(nil)
)

// OnAdd creates the fixed children, steps/ and head.
func (r *Root) OnAdd(ctx context.Context) {
	steps := r.NewPersistentInode(ctx, &stepsNode{r: r}, gofs.StableAttr{Mode: syscall.S_IFDIR})
	r.AddChild("steps", steps, true)
	r.steps.Store(steps)
	head := r.NewPersistentInode(ctx, &headNode{r: r}, gofs.StableAttr{Mode: syscall.S_IFREG})
	r.AddChild("head", head, true)
}

func (r *Root) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	r.dirAttr(&out.Attr, r.view.Load().Time)
	return 0
}

// Lookup finds steps/ and head. The names never change, so the kernel may
// keep the entries; their attributes do change and are never cached.
func (r *Root) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	ch := r.GetChild(name)
	if ch == nil {
		return nil, syscall.ENOENT
	}
	var a fuse.AttrOut
	if errno := ch.Operations().(gofs.NodeGetattrer).Getattr(ctx, nil, &a); errno != 0 {
		return nil, errno
	}
	out.Attr = a.Attr
	out.SetEntryTimeout(ImmutableTimeout)
	return ch, 0
}

func (r *Root) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	out.Bsize = r.blksize
	out.Frsize = r.blksize
	out.NameLen = 255
	return 0
}

func (r *Root) dirAttr(a *fuse.Attr, t time.Time) {
	a.Mode = syscall.S_IFDIR | 0o555
	a.Nlink = 1 // "unknown": find must not count subdirectories
	a.Blksize = r.blksize
	a.SetTimes(&t, &t, &t)
}

func (r *Root) fileAttr(a *fuse.Attr, size int64, t time.Time) {
	a.Mode = syscall.S_IFREG | 0o444
	a.Nlink = 1
	a.Size = uint64(size)
	a.Blocks = uint64((size + 511) / 512)
	a.Blksize = r.blksize
	a.SetTimes(&t, &t, &t)
}

// parseStep accepts a step directory name: a decimal number in canonical
// form.
func parseStep(name string) (int64, bool) {
	if name == "" || len(name) > 19 || (name[0] == '0' && len(name) > 1) {
		return 0, false
	}
	for _, c := range name {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(name, 10, 64)
	return n, err == nil
}

// headNode is <mnt>/head: the highest committed step and a newline, or
// empty before the first commit. Its content changes, so it is never
// cached.
type headNode struct {
	gofs.Inode
	readOnly
	r *Root
}

var (
	_ gofs.NodeGetattrer = (*headNode)(nil)
	_ gofs.NodeOpener    = (*headNode)(nil)
	_ gofs.NodeReader    = (*headNode)(nil)
)

func headText(s *Snapshot) []byte {
	h, ok := s.Head()
	if !ok {
		return nil
	}
	return []byte(strconv.FormatInt(h, 10) + "\n")
}

func (h *headNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s := h.r.view.Load()
	h.r.fileAttr(&out.Attr, int64(len(headText(s))), s.Time)
	return 0
}

func (h *headNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if writeFlags(flags) {
		return nil, 0, syscall.EROFS
	}
	// Whoever reads head wants it fresh: poll the log now.
	h.r.view.Want()
	// Direct I/O: each read sees the current head, whatever size the
	// kernel last saw.
	return nil, fuse.FOPEN_DIRECT_IO, 0
}

func (h *headNode) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	b := headText(h.r.view.Load())
	if off >= int64(len(b)) {
		return fuse.ReadResultData(nil), 0
	}
	return fuse.ReadResultData(b[off:min(int64(len(b)), off+int64(len(dest)))]), 0
}

// stepsNode is <mnt>/steps: one directory per live step.
type stepsNode struct {
	gofs.Inode
	readOnly
	r *Root
}

var (
	_ gofs.NodeGetattrer = (*stepsNode)(nil)
	_ gofs.NodeLookuper  = (*stepsNode)(nil)
	_ gofs.NodeReaddirer = (*stepsNode)(nil)
)

func (s *stepsNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	s.r.dirAttr(&out.Attr, s.r.view.Load().Time)
	return 0
}

func (s *stepsNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	n, ok := parseStep(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	if s.r.awaited != nil && n == s.r.view.Load().Next() {
		s.r.awaited(n)
	}
	tgb, err := s.r.view.WaitStep(ctx, n, s.r.wait)
	if err != nil {
		return nil, s.r.toErrno("lookup", "steps/"+name, err)
	}
	s.r.dirAttr(&out.Attr, tgb.Time)
	out.SetEntryTimeout(ImmutableTimeout)
	out.SetAttrTimeout(ImmutableTimeout)
	if ch := s.GetChild(name); ch != nil {
		if d, ok := ch.Operations().(*dirNode); ok && d.tgb == tgb {
			return ch, 0
		}
	}
	d := &dirNode{r: s.r, tgb: tgb, path: "steps/" + name}
	warm := func() { s.r.warm(n, d) }
	d.tree = newLazy(func(ctx context.Context) (*tree, error) {
		return stepTree(ctx, s.r.packs, tgb, s.r.layout, warm)
	}, warm)
	return s.NewInode(ctx, d, gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
}

func (s *stepsNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	s.r.view.Want() // a listing wants new steps too
	snap := s.r.view.Load()
	list := make([]fuse.DirEntry, len(snap.Steps))
	for i := range snap.Steps {
		list[i] = fuse.DirEntry{Name: strconv.FormatInt(snap.LiveFrom+int64(i), 10), Mode: syscall.S_IFDIR}
	}
	return gofs.NewListDirStream(list), 0
}

// dirNode is a directory inside a step: the step itself, a rank, or a
// subdirectory of file names.
type dirNode struct {
	gofs.Inode
	readOnly
	r    *Root
	tgb  *txn.TGB
	path string // for logs
	tree *lazyTree
}

var (
	_ gofs.NodeGetattrer = (*dirNode)(nil)
	_ gofs.NodeLookuper  = (*dirNode)(nil)
	_ gofs.NodeReaddirer = (*dirNode)(nil)
)

func (d *dirNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	d.r.dirAttr(&out.Attr, d.tgb.Time)
	out.SetTimeout(ImmutableTimeout)
	return 0
}

func (d *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	t, err := d.tree.get(ctx)
	if err != nil {
		return nil, d.r.toErrno("lookup", d.path+"/"+name, err)
	}
	e := t.lookup(name)
	if e == nil {
		return nil, syscall.ENOENT
	}
	if e.isDir() {
		d.r.dirAttr(&out.Attr, d.tgb.Time)
	} else {
		d.r.fileAttr(&out.Attr, e.file.Size, d.tgb.Time)
	}
	out.SetEntryTimeout(ImmutableTimeout)
	out.SetAttrTimeout(ImmutableTimeout)
	if ch := d.GetChild(name); ch != nil {
		return ch, 0 // children of an immutable directory never change
	}
	path := d.path + "/" + name
	if e.isDir() {
		sub := e.lazy
		if sub == nil {
			sub = known(e.dir)
		}
		return d.NewInode(ctx, &dirNode{r: d.r, tgb: d.tgb, path: path, tree: sub},
			gofs.StableAttr{Mode: syscall.S_IFDIR}), 0
	}
	return d.NewInode(ctx, &fileNode{r: d.r, tgb: d.tgb, pack: e.pack, file: e.file, rank: e.rank, path: path},
		gofs.StableAttr{Mode: syscall.S_IFREG}), 0
}

func (d *dirNode) Readdir(ctx context.Context) (gofs.DirStream, syscall.Errno) {
	t, err := d.tree.get(ctx)
	if err != nil {
		return nil, d.r.toErrno("readdir", d.path, err)
	}
	names, isDir := t.list()
	list := make([]fuse.DirEntry, len(names))
	for i, name := range names {
		mode := uint32(syscall.S_IFREG)
		if isDir(name) {
			mode = syscall.S_IFDIR
		}
		list[i] = fuse.DirEntry{Name: name, Mode: mode}
	}
	return gofs.NewListDirStream(list), 0
}

// fileNode is one file of a pack.
type fileNode struct {
	gofs.Inode
	readOnly
	r    *Root
	tgb  *txn.TGB
	pack *txn.Pack
	file *txn.File
	rank int // original rank; -1: a step-level file
	path string

	// Linux (6.9+) refuses to mix passthrough and cached opens of one
	// inode (fs/fuse/iomode.c: ETXTBSY or EINVAL, EIO to open(2)): while
	// any handle is open, every new open takes the path the open ones
	// took. mu is held across the choice and the memory file's open, so
	// two first opens cannot choose differently.
	mu    sync.Mutex
	opens int  // GUARDED_BY(mu): handles open
	mem   bool // GUARDED_BY(mu): they are passthrough (else block path)
}

var (
	_ gofs.NodeGetattrer = (*fileNode)(nil)
	_ gofs.NodeOpener    = (*fileNode)(nil)
	_ gofs.NodeReader    = (*fileNode)(nil)
)

// blockHandle is an open file served by the block path; it exists to
// count the node's open handles (fileNode.opens).
type blockHandle struct{ f *fileNode }

var _ gofs.FileReleaser = (*blockHandle)(nil)

func (b *blockHandle) Release(context.Context) syscall.Errno {
	b.f.closed()
	return 0
}

// closed counts a handle of f gone.
func (f *fileNode) closed() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.opens--
}

func (f *fileNode) Getattr(ctx context.Context, fh gofs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	f.r.fileAttr(&out.Attr, f.file.Size, f.tgb.Time)
	out.SetTimeout(ImmutableTimeout)
	return 0
}

func (f *fileNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	if writeFlags(flags) {
		return nil, 0, syscall.EROFS
	}
	if f.r.touch != nil {
		f.r.touch(f.tgb.Step, f.rank)
	}
	if f.r.servedf != nil {
		// The reader's position moves at open: reads of a passthrough
		// file never reach this process.
		f.r.servedf(f.tgb.Step, 0)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if files := f.r.files.Load(); files != nil && files.Eligible(f.file.Size) && (f.opens == 0 || f.mem) {
		h, err := files.Open(ctx, f.pack, f.file)
		switch {
		case err == nil:
			f.r.opensMem.Add(1)
			f.opens, f.mem = f.opens+1, true
			// The kernel reads the memfd; nothing to flush on close.
			return &memHandle{f: h, node: f}, fuse.FOPEN_NOFLUSH, 0
		case !errors.Is(err, ErrNoRoom) || f.opens > 0:
			// Passthrough handles are open: a block-path open would fail
			// in the kernel anyway.
			return nil, 0, f.r.toErrno("open", f.path, err)
		}
	}
	f.r.opensBlocks.Add(1)
	f.opens, f.mem = f.opens+1, false
	// The bytes never change: the page cache may keep them across opens.
	return &blockHandle{f: f}, fuse.FOPEN_KEEP_CACHE, 0
}

func (f *fileNode) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if off >= f.file.Size {
		return fuse.ReadResultData(nil), 0
	}
	if h, ok := fh.(*memHandle); ok {
		// The kernel did not take the memfd (passthrough refused after
		// the probe): read it here.
		n, err := h.f.ReadAt(dest[:min(int64(len(dest)), f.file.Size-off)], off)
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, f.r.toErrno("read", f.path, err)
		}
		return fuse.ReadResultData(dest[:n]), 0
	}
	dest = dest[:min(int64(len(dest)), f.file.Size-off)]
	if vr, ok := f.r.reader.(VecReader); ok {
		vec, release, err := vr.ReadVec(ctx, f.pack, f.file.Off+off, int64(len(dest)))
		if err != nil {
			return nil, f.r.toErrno("read", f.path, err)
		}
		res := &vecResult{vec: vec, release: release}
		if f.r.servedf != nil {
			f.r.servedf(f.tgb.Step, res.Size())
		}
		return res, 0
	}
	n, err := f.r.reader.ReadAt(ctx, f.pack, dest, f.file.Off+off)
	if err != nil {
		return nil, f.r.toErrno("read", f.path, err)
	}
	if f.r.servedf != nil {
		f.r.servedf(f.tgb.Step, n)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func writeFlags(flags uint32) bool {
	return flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&(syscall.O_TRUNC|syscall.O_APPEND|syscall.O_CREAT) != 0
}
