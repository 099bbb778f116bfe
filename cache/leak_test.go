package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/lakestream/lakestream/txn"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/store"
)

// Resource accounting of failed memory-file fills (issue 43 item 1): a
// fill that fails (bytes that fail their CRC32C, a body that breaks off)
// leaves no file behind: neither an fd of this process nor bytes in the
// backing.

// fdCount is how many fds this process holds.
func fdCount(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// backingUsed is the bytes b's files hold: the tmpfs's used blocks, or
// the sizes of the memfds this process holds open.
func backingUsed(t testing.TB, b *Backing) int64 {
	t.Helper()
	if b.mnt >= 0 {
		var st unix.Statfs_t
		if err := unix.Fstatfs(b.mnt, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Blocks-st.Bfree) * st.Bsize
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range ents {
		p := "/proc/self/fd/" + e.Name()
		if l, err := os.Readlink(p); err != nil || !strings.HasPrefix(l, "/memfd:lakefs:") {
			continue
		}
		var st unix.Stat_t
		if fd, err := strconv.Atoi(e.Name()); err == nil && unix.Fstat(fd, &st) == nil {
			n += st.Size
		}
	}
	return n
}

// backings runs f with a tmpfs backing and a memfd backing.
func backings(t *testing.T, budget int64, f func(t *testing.T, b *Backing)) {
	for _, mk := range []func() *Backing{func() *Backing { return NewBacking(budget) }, MemfdBacking} {
		b := mk()
		t.Run(b.Kind(), func(t *testing.T) {
			defer b.Close()
			f(t, b)
		})
	}
}

// halfStore streams every range's first half, then fails the body.
type halfStore struct {
	*countingStore
	broken chan struct{} // closed: ranges break halfway
}

var errBodyBroke = errors.New("connection reset by peer")

type halfReader struct {
	r    io.Reader
	left int64
}

func (h *halfReader) Read(p []byte) (int, error) {
	if h.left <= 0 {
		return 0, fmt.Errorf("reading the body: %w", errBodyBroke)
	}
	if int64(len(p)) > h.left {
		p = p[:h.left]
	}
	n, err := h.r.Read(p)
	h.left -= int64(n)
	return n, err
}

func (s *halfStore) GetRangeStream(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	rc, err := store.GetRangeStream(ctx, s.countingStore, key, off, n)
	if err != nil {
		return nil, err
	}
	select {
	case <-s.broken:
		return struct {
			io.Reader
			io.Closer
		}{&halfReader{r: rc, left: n / 2}, rc}, nil
	default:
		return rc, nil
	}
}

// TestFailedFillLeavesNothing: an open of a file whose bytes fail their
// CRC32C (twice: the GET and its refetch), and an open whose GET body
// breaks off halfway, leave the process's fd count and the backing's
// used bytes where they were; with both backings.
func TestFailedFillLeavesNothing(t *testing.T) {
	const budget = 64 << 20
	backings(t, budget, func(t *testing.T, b *Backing) {
		s := &halfStore{countingStore: newCounting(), broken: make(chan struct{})}
		c, err := New(Options{Store: s, ChunkSize: testChunk, Size: 4 * budget, Fetchers: 4,
			Logger: slog.New(slog.DiscardHandler), Retry: Retry{Window: -1}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		files := c.UseFiles(FilesOptions{Budget: budget, MinSize: 1, Backing: b})
		ctx := context.Background()
		corrupt, _ := putFiles(t, s.countingStore, "data/p/1/0/tgb.pack", 3<<20)
		broken, _ := putFiles(t, s.countingStore, "data/p/1/1/tgb.pack", 3<<20)
		s.corrupt[corrupt.Key] = -1

		fds, used := fdCount(t), backingUsed(t, b)
		if _, err := files.Open(ctx, corrupt, &corrupt.Files[0]); !errors.Is(err, ErrChecksum) {
			t.Fatalf("open of a corrupt file: %v, want ErrChecksum", err)
		}
		if f, u := fdCount(t), backingUsed(t, b); f != fds || u != used {
			t.Errorf("a file failing its CRC32C twice: %d fds and %d backing bytes after, %d and %d before", f, u, fds, used)
		}

		close(s.broken)
		fds, used = fdCount(t), backingUsed(t, b)
		if _, err := files.Open(ctx, broken, &broken.Files[0]); !errors.Is(err, errBodyBroke) {
			t.Fatalf("open of a file whose body breaks: %v, want the body's error", err)
		}
		if f, u := fdCount(t), backingUsed(t, b); f != fds || u != used {
			t.Errorf("a body broken halfway: %d fds and %d backing bytes after, %d and %d before", f, u, fds, used)
		}
		if st := files.Stats(); st.Bytes != 0 {
			t.Errorf("the budget counts %d bytes with no file held", st.Bytes)
		}
	})
}

// TestNewAllocatesByUseNotSize: a cache of 1 PiB with 1 MiB chunks (and
// memory files of a quarter of it) allocates little at start: memory grows
// with what is cached, not with the setting (issue 47 item 2); and it
// still serves exact bytes.
func TestNewAllocatesByUseNotSize(t *testing.T) {
	const size, chunk = 1 << 50, 1 << 20
	s := newCounting()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c, err := New(Options{Store: s, ChunkSize: chunk, Size: size, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	b := NewBacking(size / 4)
	defer b.Close()
	files := c.UseFiles(FilesOptions{Budget: size / 4, MinSize: 1, Backing: b})
	runtime.ReadMemStats(&after)
	t.Logf("New and UseFiles of a %d-byte cache allocated %d bytes (heap %d -> %d)",
		int64(size), after.TotalAlloc-before.TotalAlloc, before.HeapAlloc, after.HeapAlloc)
	if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
		t.Errorf("New and UseFiles of a 1 PiB cache allocated %d bytes; want under 8 MiB", n)
	}

	pk, data := putPack(t, s, "data/p/1/0/tgb.pack", 3*chunk+5, 1)
	pk.Chunks = nil
	for off := 0; off < len(data); off += chunk {
		pk.Chunks = append(pk.Chunks, txn.CRC32C(data[off:min(off+chunk, len(data))]))
	}
	got := make([]byte, len(data))
	if n, err := c.ReadAt(t.Context(), pk, got, 0); err != nil || n != len(data) || !bytes.Equal(got, data) {
		t.Fatalf("a read through the 1 PiB cache: %d bytes, %v (or wrong bytes)", n, err)
	}
	h, err := files.Open(t.Context(), pk, &pk.Files[0])
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if !bytes.Equal(readHandle(t, h), data) {
		t.Fatal("the memory file of the 1 PiB cache holds wrong bytes")
	}
}
