package cache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Refills of prefetched files (issue 55 item 1): a file failing
// verification in a prefetch GET is fetched again alone, once, and a fill
// that fails closes no descriptor it did not open.

// getFault is what one GET of a faultStore does.
type getFault int

const (
	getOK      getFault = iota
	getFlipBit          // one bit of the range flipped
	getMissing          // store.ErrNotFound, as if the object were gone
)

// faultStore answers its GETs by a script: the n-th GetRange does
// script[n], those past the script go through. Every GET first waits
// delay (or for its context to end).
type faultStore struct {
	store.Store
	delay time.Duration

	mu     sync.Mutex
	script []getFault // GUARDED_BY(mu)
	gets   int        // GUARDED_BY(mu): GETs begun
}

func (s *faultStore) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	s.mu.Lock()
	fault := getOK
	if s.gets < len(s.script) {
		fault = s.script[s.gets]
	}
	s.gets++
	s.mu.Unlock()
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return nil, fmt.Errorf("get range %s: %w", key, ctx.Err())
	}
	if fault == getMissing {
		return nil, fmt.Errorf("get range %s: %w", key, store.ErrNotFound)
	}
	b, err := s.Store.GetRange(ctx, key, off, n)
	if err == nil && fault == getFlipBit {
		b = bytes.Clone(b)
		b[len(b)/2] ^= 0x40
	}
	return b, err
}

func (s *faultStore) begun() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets
}

// pipeOnFd0 puts a pipe of the test's on fd 0 until the test ends, and
// returns a check that fd 0 is still open and still that pipe: fd 0 is
// what a fill taking an int's zero value for "no descriptor" closes, and
// in a mount whatever holds that number (a store socket, another file's
// memory file, /dev/fuse) is someone else's.
func pipeOnFd0(t *testing.T) func() error {
	t.Helper()
	saved, err := unix.FcntlInt(0, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		t.Fatal(err)
	}
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	if err := unix.Dup3(p[0], 0, 0); err != nil {
		t.Fatal(err)
	}
	var want unix.Stat_t
	if err := unix.Fstat(p[1], &want); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = unix.Dup3(saved, 0, 0)
		unix.Close(saved)
		unix.Close(p[0])
		unix.Close(p[1])
	})
	return func() error {
		if _, err := unix.FcntlInt(0, unix.F_GETFD, 0); err != nil {
			return fmt.Errorf("fd 0, which this code never opened, was closed: %w", err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(0, &st); err != nil || st.Dev != want.Dev || st.Ino != want.Ino {
			return fmt.Errorf("fd 0 is no longer the test's pipe (fstat: %v): it was closed and its number reused", err)
		}
		return nil
	}
}

// settled reports whether file fi of pk has been fetched by a fill that
// has ended: it was begun (gets > 0) and is either filled or gone.
func settled(f *Files, pk *txn.Pack, fi *txn.File) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	mf := f.files[fileKey{pk.Key, pk.Off + fi.Off}]
	return mf == nil || mf.finished()
}

// TestPrefetchRefill: a prefetched file whose GET has one bit flipped, on
// a healthy store, is fetched again alone, once (the refill runs: before,
// it ran under the prefetch GET's context, cancelled as that GET ended),
// filled and then served verified without another GET. Whatever the refill
// meets (the right bytes, corrupt bytes again, a failed GET), fd 0, a
// descriptor this code never opened, stays open and the same file (before,
// a refill that ended without a file closed fd 0); a failed refill keeps
// nothing, so the next open fetches again. Both backings.
func TestPrefetchRefill(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  []getFault
		filled  bool // by the refill
		verifyF int64
	}{
		{"refill verifies", []getFault{getFlipBit}, true, 1},
		{"refill corrupt again", []getFault{getFlipBit, getFlipBit}, false, 2},
		{"refill GET fails", []getFault{getFlipBit, getMissing}, false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backings(t, 64<<20, func(t *testing.T, b *Backing) {
				fd0 := pipeOnFd0(t)
				// A GET takes 20 ms, as a store's does, so the refill's
				// GET is under way when the prefetch GET has ended.
				s := &faultStore{Store: store.NewMem(), delay: 20 * time.Millisecond, script: tc.script}
				c := newTestCache(t, s, 1024*testChunk)
				files := c.UseFiles(FilesOptions{Budget: 512 * testChunk, MinSize: testChunk, Backing: b})
				pk, data := putPack(t, s.Store, "data/p/1/0/tgb.pack", 3*testChunk+17, 7)
				fi := &pk.Files[0]
				st := &steps{}
				st.add(0, 0, pk)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 1, Committed: st.committed, Pack: st.pack})
				p.Touch(0, 0)
				waitUntil(t, func() bool { return s.begun() > 0 && settled(files, pk, fi) })

				if err := fd0(); err != nil {
					t.Error(err)
				}
				wantGets := 2 // the prefetch GET and the refill's
				if g := s.begun(); g != wantGets {
					t.Errorf("%d GETs, want %d: the prefetch GET and the refill's, alone", g, wantGets)
				}
				if v := c.Stats().VerifyFailures; v != tc.verifyF {
					t.Errorf("%d verification failures, want %d", v, tc.verifyF)
				}
				wantFills := int64(0)
				if tc.filled {
					wantFills = 1
				}
				if n := files.Stats().Fills; n != wantFills {
					t.Errorf("%d files filled, want %d", n, wantFills)
				}

				// The refilled file is served from its memory file; a
				// failed one was not kept and is fetched again (the store
				// is healthy past the script).
				before := s.begun()
				h, err := files.Open(context.Background(), pk, fi)
				if err != nil {
					t.Fatalf("open after the refill: %v", err)
				}
				defer h.Release()
				if !bytes.Equal(readHandle(t, h), data) {
					t.Error("the file's memory file does not hold its bytes")
				}
				want := 0
				if !tc.filled {
					want = 1
				}
				if g := s.begun() - before; g != want {
					t.Errorf("the open made %d GETs, want %d", g, want)
				}
				if err := fd0(); err != nil {
					t.Error(err)
				}
			})
		})
	}
}

// TestRefillFailureNeverClosesFd0: a refill whose GET fails keeps no
// descriptor, and closes none: opens of a file corrupted on its first GET
// and missing on its refetch fail with the store's error, many times, and
// fd 0 stays the test's pipe throughout (the open's own fill, on the
// cache's lifetime, is the path where the refill's context was never the
// cause).
func TestRefillFailureNeverClosesFd0(t *testing.T) {
	fd0 := pipeOnFd0(t)
	s := &faultStore{Store: store.NewMem()}
	c := newTestCache(t, s, 1024*testChunk)
	files := c.UseFiles(FilesOptions{Budget: 512 * testChunk, MinSize: testChunk})
	pk, _ := putPack(t, s.Store, "data/p/1/0/tgb.pack", 2*testChunk, 9)
	for i := range 5 {
		s.mu.Lock()
		s.script = append(s.script, getFlipBit, getMissing)
		s.mu.Unlock()
		if _, err := files.Open(context.Background(), pk, &pk.Files[0]); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("open %d: %v; want the refetch's store.ErrNotFound", i, err)
		}
		if err := fd0(); err != nil {
			t.Fatalf("after failed refill %d: %v", i+1, err)
		}
	}
}
