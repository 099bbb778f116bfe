package fs

import (
	"context"
	"errors"
	"syscall"

	"github.com/lakestream/lakestream/cache"
	"github.com/lakestream/lakestream/store"
)

// errNoEntry classifies lookups of names the view does not have.
var errNoEntry = errors.New("no such file or directory")

// toErrno is the one place where errors become errno values. It uses
// errors.Is/As because every error here is wrapped (fs.ToErrno compares
// os.ErrNotExist and friends with ==, and would turn a wrapped not-found
// or cancellation into ENOTSUP). Errors that are not a plain answer
// (missing entry, interrupted request) are logged with the path.
func (r *Root) toErrno(op, path string, err error) syscall.Errno {
	var errno syscall.Errno
	switch {
	case err == nil:
		return 0
	case errors.Is(err, store.ErrUnreachable):
		// First: the network error inside (ECONNREFUSED, a timeout that is
		// also context.DeadlineExceeded) would mislead the reader; the
		// file is there, the read failed.
		r.log.Error("returning EIO: the store is unreachable", "op", op, "path", path, "err", err)
		return syscall.EIO
	case errors.As(err, &errno):
		return errno
	case errors.Is(err, errNoEntry):
		return syscall.ENOENT
	case errors.Is(err, context.Canceled):
		// The kernel interrupted the request (the caller got a signal).
		return syscall.EINTR
	case errors.Is(err, context.DeadlineExceeded):
		return syscall.ETIMEDOUT
	case errors.Is(err, store.ErrNotFound):
		// A pack gone from the store: its step was reclaimed and deleted
		// while it was in the view. Not ENOENT: glibc's readdir() takes
		// that for the end of the directory, and a walk would see an
		// empty step.
		r.log.Warn("pack object missing from the store; was its step reclaimed?", "op", op, "path", path, "err", err)
		return syscall.ESTALE
	case errors.Is(err, cache.ErrChecksum):
		r.log.Error("returning EIO: data failed CRC32C verification", "op", op, "path", path, "err", err)
		return syscall.EIO
	default:
		r.log.Error("returning EIO", "op", op, "path", path, "err", err)
		return syscall.EIO
	}
}
