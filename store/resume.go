package store

import (
	"context"
	"errors"
	"io"
)

// resumeBody is an object's body that, when its connection is lost part
// way (reset, or closed before the body's length), asks again from the
// byte after the last one received, as GCS's reader does: through a link
// that cuts every connection after N bytes, a read of more than N still
// ends, where a retry from byte 0 never would (issue 55 item 14).
//
// It asks again only after a connection that delivered bytes, so every
// request gains ground, and never after a timeout: a stalled server is
// the caller's to retry, within its own bounds. The new request is pinned
// to the version first read (open sends If-Match with its ETag), so the
// bytes of two versions are never spliced; when it fails (the object was
// replaced or deleted, the store went away) the read ends with the lost
// connection's error, which callers retry from the start.
type resumeBody struct {
	ctx  context.Context
	rc   io.ReadCloser
	open func(off, n int64) (io.ReadCloser, error) // n < 0: to the end
	off  int64                                     // the next byte's offset in the object
	left int64                                     // bytes still to come; < 0: to the end
	got  int64                                     // bytes from rc since it was opened
}

// resumable makes first, the body of a read of n bytes at off (n < 0: to
// the end), resume through open; a version the store named no ETag for
// cannot be pinned and is not resumed.
func resumable(ctx context.Context, first io.ReadCloser, etag string, off, n int64, open func(off, n int64) (io.ReadCloser, error)) io.ReadCloser {
	if etag == "" {
		return first
	}
	return &resumeBody{ctx: ctx, rc: first, open: open, off: off, left: n}
}

func (r *resumeBody) Read(p []byte) (int, error) {
	for {
		n, err := r.rc.Read(p)
		r.off += int64(n)
		r.got += int64(n)
		if r.left > 0 {
			r.left -= int64(n)
		}
		if err == nil || err == io.EOF || r.got == 0 || r.left == 0 || !lostConnection(err) {
			return n, err
		}
		rc, oerr := r.open(r.off, r.left)
		if oerr != nil {
			if r.ctx.Err() != nil {
				return n, oerr
			}
			return n, err
		}
		_ = r.rc.Close()
		r.rc, r.got = rc, 0
		if n > 0 {
			return n, nil
		}
	}
}

func (r *resumeBody) Close() error { return r.rc.Close() }

// lostConnection tells a body's error that a new request may cure at
// once: the connection went away, not a timeout, not an answer.
func lostConnection(err error) bool {
	return errors.Is(err, ErrUnreachable) && !timedOut(err)
}
