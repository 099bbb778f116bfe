package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/store"
)

// Memory files under a low fd limit (issue 47 item 3): opens beyond what
// the fds allow are served from blocks (ErrNoRoom), never failed, and
// running out of fds is never blamed on the store.

// TestFilesFdCap: with MaxFiles 8, a reader holding 20 files open gets
// memory files for what fits and ErrNoRoom (blocks) for the rest; the
// process's fds grow by at most MaxFiles.
func TestFilesFdCap(t *testing.T) {
	backings(t, 64<<20, func(t *testing.T, b *Backing) {
		s := newCounting()
		c := newTestCache(t, s, 1024*testChunk)
		files := c.UseFiles(FilesOptions{Budget: 64 << 20, MinSize: 1, MaxFiles: 8, Backing: b})
		fds := fdCount(t)
		var mem, blocks int
		for i := range 20 {
			pk, _ := putFiles(t, s, fmt.Sprintf("data/p/1/%d/tgb.pack", i), 3*testChunk)
			h, err := files.Open(t.Context(), pk, &pk.Files[0])
			switch {
			case err == nil:
				mem++
				defer h.Release()
			case errors.Is(err, ErrNoRoom):
				blocks++
			default:
				t.Fatalf("file %d: %v; want a memory file or ErrNoRoom", i, err)
			}
		}
		if mem != 8 || blocks != 12 {
			t.Errorf("%d memory files and %d sent to blocks, want 8 and 12", mem, blocks)
		}
		if n := fdCount(t) - fds; n > 8 {
			t.Errorf("%d more fds held, want at most MaxFiles 8", n)
		}
	})
}

// TestFilesOutOfFdsFallsBack: with the process at its fd limit,
// memfd_create (or the tmpfs open) fails with EMFILE: the open says
// ErrNoRoom (the file goes to blocks), not an error.
func TestFilesOutOfFdsFallsBack(t *testing.T) {
	backings(t, 64<<20, func(t *testing.T, b *Backing) {
		s := newCounting()
		c := newTestCache(t, s, 1024*testChunk)
		files := c.UseFiles(FilesOptions{Budget: 64 << 20, MinSize: 1, Backing: b})
		pk, _ := putFiles(t, s, "data/p/1/0/tgb.pack", 3*testChunk)
		var old unix.Rlimit
		if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
		low := old
		free, err := unix.Dup(0) // the lowest free fd
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(free)
		low.Cur = uint64(free) // no fd left
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &low); err != nil {
			t.Fatal(err)
		}
		_, err = files.Open(t.Context(), pk, &pk.Files[0])
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &old); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(err, ErrNoRoom) || !errors.Is(err, syscall.EMFILE) {
			t.Fatalf("an open with no fd left: %v; want ErrNoRoom (blocks) naming EMFILE", err)
		}
		if st := files.Stats(); st.Bytes != 0 {
			t.Errorf("%d bytes held after a fill that could not start", st.Bytes)
		}
	})
}

// TestRetryOutOfFdsNotAnOutage: a store call failing for want of an fd
// here (a dial's "socket: too many open files", even wrapped as
// store.ErrUnreachable) never marks the source degraded.
func TestRetryOutOfFdsNotAnOutage(t *testing.T) {
	src := NewSource("block", slog.New(slog.DiscardHandler))
	calls := 0
	err := Retry{Window: 5 * time.Second, Source: src}.Do(context.Background(), func(context.Context) error {
		calls++
		if calls >= 5 {
			return nil
		}
		return fmt.Errorf("get range k: dial tcp 127.0.0.1:9: socket: %w: %w", syscall.EMFILE, store.ErrUnreachable)
	})
	if err != nil {
		t.Fatalf("%v after %d calls; want the call retried until fds come back", err, calls)
	}
	err = Retry{Window: -1, Source: src}.Do(context.Background(), func(context.Context) error {
		return fmt.Errorf("get range k: dial tcp: socket: %w: %w", syscall.ENFILE, store.ErrUnreachable)
	})
	if !errors.Is(err, syscall.ENFILE) {
		t.Fatalf("%v; want the ENFILE", err)
	}
	if _, cause, down := src.Degraded(); down {
		t.Errorf("the source is degraded by this process's fd limit: %v", cause)
	}
}
