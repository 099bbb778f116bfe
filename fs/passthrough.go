package fs

import (
	"context"
	"errors"
	"syscall"

	gofs "github.com/hanwen/go-fuse/v2/fs"

	"github.com/lakestream/lakestream/txn"
)

// Passthrough serves whole verified files from memory-backed files the
// kernel reads directly (FUSE passthrough): a reader's read() never enters
// this process. The block path (Reader) serves every file it does not
// take.
type Passthrough interface {
	// Eligible reports whether files of size bytes are served this way.
	Eligible(size int64) bool
	// Open returns file f of pack p, every byte verified, waiting for its
	// fetch; ErrNoRoom (wrapped or not) sends the file to the block path.
	Open(ctx context.Context, p *txn.Pack, f *txn.File) (MemFile, error)
}

// MemFile is an open hold on a verified file's memory-backed file.
type MemFile interface {
	// Fd is the file descriptor handed to the kernel, valid until
	// Release.
	Fd() int
	// ReadAt reads it here: for a kernel that did not take the fd.
	ReadAt(dst []byte, off int64) (int, error)
	Release()
}

// ErrNoRoom: the passthrough memory is held by open and unread files; the
// file is served from blocks.
var ErrNoRoom = errors.New("no room for the file in passthrough memory")

// passthroughBox holds a Passthrough in an atomic.Pointer.
type passthroughBox struct{ Passthrough }

// SetPassthrough serves the files p takes through it, for opens from now
// on.
func (r *Root) SetPassthrough(p Passthrough) { r.files.Store(&passthroughBox{p}) }

// Opens counts the files opened so far by path: passthrough and blocks.
func (r *Root) Opens() (passthrough, blocks int64) {
	return r.opensMem.Load(), r.opensBlocks.Load()
}

// memHandle is an open file served by passthrough: the kernel reads the
// memory-backed file while the handle is open.
type memHandle struct {
	f    MemFile
	node *fileNode // nil outside a fileNode (tests)
}

var (
	_ gofs.FilePassthroughFder = (*memHandle)(nil)
	_ gofs.FileReleaser        = (*memHandle)(nil)
)

func (m *memHandle) PassthroughFd() (int, bool) { return m.f.Fd(), true }

func (m *memHandle) Release(context.Context) syscall.Errno {
	m.f.Release()
	if m.node != nil {
		m.node.closed()
	}
	return 0
}
