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

	"github.com/lakestream/lakestream/txn"
)

// putFiles stores one pack of files of the given sizes, back to back, and
// returns it with each file's bytes.
func putFiles(t testing.TB, s *countingStore, key string, sizes ...int) (*txn.Pack, [][]byte) {
	t.Helper()
	total := 0
	for _, n := range sizes {
		total += n
	}
	pk, data := putPack(t, s, key, total, uint64(len(key)))
	pk.Files = nil
	var parts [][]byte
	off := 0
	for i, n := range sizes {
		b := data[off : off+n]
		pk.Files = append(pk.Files, txn.File{Name: fmt.Sprintf("f%d", i), Off: int64(off), Size: int64(n), CRC: txn.CRC32C(b)})
		parts = append(parts, b)
		off += n
	}
	return pk, parts
}

func readHandle(t testing.TB, h *Handle) []byte {
	t.Helper()
	b := make([]byte, h.Size())
	if n, err := h.ReadAt(b, 0); err != nil || int64(n) != h.Size() {
		t.Fatalf("reading the memfd: %d bytes, %v", n, err)
	}
	return b
}

// TestFilesServeExactBytesFrozen: a file opened through Files is its
// bytes exactly, in a file no fd can change (a sealed memfd, or a tmpfs
// file only open read-only), each fetched once however many open it at
// once; with both backings.
func TestFilesServeExactBytesFrozen(t *testing.T) {
	tmpfs := NewBacking(1 << 30)
	if tmpfs.Kind() != "tmpfs" {
		t.Fatalf("NewBacking made %s files; as root it makes a private tmpfs", tmpfs.Kind())
	}
	for _, b := range []*Backing{tmpfs, MemfdBacking()} {
		t.Run(b.Kind(), func(t *testing.T) {
			defer b.Close()
			s := newCounting()
			c := newTestCache(t, s, 256*testChunk)
			files := c.UseFiles(FilesOptions{Budget: 128 * testChunk, MinSize: 1, Backing: b})
			pk, parts := putFiles(t, s, "data/p/1/0/tgb.pack", 3*testChunk+17, 5, 2*testChunk)
			var wg sync.WaitGroup
			for r := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					checkFrozen(t, files, pk, r%len(parts), parts[r%len(parts)], b.Kind() == "memfd")
				}()
			}
			wg.Wait()
			if g := s.gets.Load(); g != int64(len(parts)) {
				t.Errorf("%d GETs for %d files opened by 16 readers, want one each", g, len(parts))
			}
		})
	}
}

func checkFrozen(t *testing.T, files *Files, pk *txn.Pack, i int, want []byte, sealed bool) {
	h, err := files.Open(context.Background(), pk, &pk.Files[i])
	if err != nil {
		t.Errorf("open %s: %v", pk.Files[i].Name, err)
		return
	}
	defer h.Release()
	if got := readHandle(t, h); !bytes.Equal(got, want) {
		t.Errorf("%s: the file does not hold its bytes", pk.Files[i].Name)
	}
	if sealed {
		seals, err := unix.FcntlInt(uintptr(h.Fd()), unix.F_GET_SEALS, 0)
		all := unix.F_SEAL_WRITE | unix.F_SEAL_GROW | unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL
		if err != nil || seals&all != all {
			t.Errorf("%s: seals %#x (%v), want %#x", pk.Files[i].Name, seals, err, all)
		}
	}
	if _, err := unix.Pwrite(h.Fd(), []byte{1}, 0); err == nil {
		t.Errorf("%s: a write to the handed-out fd succeeded", pk.Files[i].Name)
	}
}

// TestFilesCorruptNeverServed: bytes that fail their CRC32C twice make
// Open fail with ErrChecksum and no handle; once is fetched again.
func TestFilesCorruptNeverServed(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 256*testChunk)
	files := c.UseFiles(FilesOptions{Budget: 128 * testChunk, MinSize: 1})
	ctx := context.Background()

	pk, _ := putFiles(t, s, "data/p/1/0/tgb.pack", 2*testChunk)
	s.corrupt[pk.Key] = -1
	h, err := files.Open(ctx, pk, &pk.Files[0])
	if !errors.Is(err, ErrChecksum) || h != nil {
		t.Fatalf("corrupt file: handle %v, err %v; want ErrChecksum and no handle", h, err)
	}
	if st := files.Stats(); st.Bytes != 0 || st.Fills != 0 {
		t.Errorf("a failed file still holds %d bytes (%d fills)", st.Bytes, st.Fills)
	}
	if v := c.Stats().VerifyFailures; v != 2 {
		t.Errorf("%d verification failures, want 2 (the GET and its one refetch)", v)
	}

	pk2, parts := putFiles(t, s, "data/p/1/1/tgb.pack", 2*testChunk)
	s.corrupt[pk2.Key] = 1
	h, err = files.Open(ctx, pk2, &pk2.Files[0])
	if err != nil {
		t.Fatalf("a file corrupted once: %v; want it fetched again", err)
	}
	defer h.Release()
	if !bytes.Equal(readHandle(t, h), parts[0]) {
		t.Error("the refetched file has the wrong bytes")
	}
}

// TestFilesBudget: the memfds held never exceed the budget; open files
// are never dropped, released ones are dropped when room is needed, and
// an open that finds no room says ErrNoRoom (the caller uses blocks).
func TestFilesBudget(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 256*testChunk)
	const fileSize = 4 * testChunk
	budget := int64(32 * testChunk) // 8 files; MaxSize is budget/8 = one file
	files := c.UseFiles(FilesOptions{Budget: budget, MinSize: 1})
	ctx := context.Background()
	var held []*Handle
	for i := range 12 {
		pk, parts := putFiles(t, s, fmt.Sprintf("data/p/1/%d/tgb.pack", i), fileSize)
		h, err := files.Open(ctx, pk, &pk.Files[0])
		if i >= 8 {
			if !errors.Is(err, ErrNoRoom) {
				t.Fatalf("file %d with the budget held by 8 open files: %v, want ErrNoRoom", i, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(readHandle(t, h), parts[0]) {
			t.Fatalf("file %d: wrong bytes", i)
		}
		held = append(held, h)
		if b := files.Stats().Bytes; b > budget {
			t.Fatalf("%d bytes held, budget %d", b, budget)
		}
	}
	for _, h := range held {
		h.Release()
	}
	// Released files wait idle up to budget/8; more room is taken from them.
	for i := 12; i < 20; i++ {
		pk, _ := putFiles(t, s, fmt.Sprintf("data/p/1/%d/tgb.pack", i), fileSize)
		h, err := files.Open(ctx, pk, &pk.Files[0])
		if err != nil {
			t.Fatalf("file %d after every file was released: %v", i, err)
		}
		h.Release()
		if b := files.Stats().Bytes; b > budget {
			t.Fatalf("%d bytes held, budget %d", b, budget)
		}
	}
	if b := files.Stats().Bytes; b > budget/8 {
		t.Errorf("%d bytes held with no file open, want at most the idle cap %d", b, budget/8)
	}
}

// TestPrefetchFilesOneGetPerRun: the prefetcher fetches a step's eligible
// files into memfds, adjacent files in one GET; opening them afterwards
// fetches nothing, and the block path still serves the small file.
func TestPrefetchFilesOneGetPerRun(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 1024*testChunk)
	files := c.UseFiles(FilesOptions{Budget: 512 * testChunk, MinSize: testChunk})
	pk, parts := putFiles(t, s, "data/p/1/0/tgb.pack", 2*testChunk, 3*testChunk, 100, 2*testChunk)
	st := &steps{packs: map[int64]*txn.Pack{0: pk}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 1, Committed: st.committed, Pack: st.pack})
	p.Touch(0, 0)
	// f0 and f1 are adjacent (one GET); f3 follows the 100-byte f2, which
	// the block path serves from the block it shares with f1 and f3.
	// PrefetchBytes counts the block from before its GET starts: wait for
	// its bytes too (7 chunks of files, 1 block), or that GET may be
	// counted after the snapshot below.
	waitUntil(t, func() bool {
		return files.Stats().Fills == 3 && c.Stats().PrefetchBytes == testChunk && c.Stats().BytesFetched >= 8*testChunk
	})
	gets := s.gets.Load()
	for _, i := range []int{0, 1, 3} {
		h, err := files.Open(ctx, pk, &pk.Files[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(readHandle(t, h), parts[i]) {
			t.Errorf("f%d: wrong bytes", i)
		}
		h.Release()
	}
	buf := make([]byte, 100)
	if _, err := c.ReadAt(ctx, pk, buf, pk.Files[2].Off); err != nil || !bytes.Equal(buf, parts[2]) {
		t.Fatalf("the small file through blocks: %v or wrong bytes", err)
	}
	if g := s.gets.Load(); g != gets {
		t.Errorf("%d more GETs after the prefetch, want 0", g-gets)
	}
	if gets > 3 {
		t.Errorf("%d GETs to prefetch 3 files (2 runs) and one shared block, want at most 3", gets)
	}
}

// TestPrefetchAdjacentRanksOneGet: a node reading 8 adjacent ranks of
// small files fetches each step's 8 regions (adjacent in the TGB object)
// with one GET, and serves every byte from it.
func TestPrefetchAdjacentRanksOneGet(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 256*testChunk)
	const ranks, region, nsteps = 8, 1000, 4
	st := &steps{}
	data := map[int64][]byte{}
	for n := range int64(nsteps) {
		obj, b := putPack(t, s, fmt.Sprintf("data/p/1/%d/tgb.pack", n), ranks*region, uint64(n))
		data[n] = b
		for r := range ranks {
			rb := b[r*region : (r+1)*region]
			st.add(n, r, &txn.Pack{Key: obj.Key, Off: int64(r * region), Size: region, Chunks: []uint32{txn.CRC32C(rb)},
				Files: []txn.File{{Name: "f", Size: region, CRC: txn.CRC32C(rb)}}})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 1, Committed: st.committed, Pack: st.pack})
	// The readers open their ranks of step 0 one by one (the first
	// GETs may cover fewer ranks); the jobs for the steps after are made
	// with all 8 ranks at once.
	for r := range ranks {
		p.Touch(0, r)
	}
	waitUntil(t, func() bool { return c.Stats().BytesFetched == 2*ranks*region })
	before := s.gets.Load()
	p.Touch(2, 0)
	waitUntil(t, func() bool { return c.Stats().BytesFetched == 4*ranks*region })
	for n := int64(2); n < nsteps; n++ {
		for r := range ranks {
			pk, _ := st.pack(ctx, n, r)
			buf := make([]byte, region)
			if _, err := c.ReadAt(ctx, pk, buf, 0); err != nil || !bytes.Equal(buf, data[n][r*region:(r+1)*region]) {
				t.Fatalf("step %d rank %d: %v or wrong bytes", n, r, err)
			}
		}
	}
	if g := s.gets.Load() - before; g != 2 {
		t.Errorf("%d GETs for steps 2 and 3 of 8 adjacent ranks each, want 2 (one a step)", g)
	}
}

// TestFilesAbandonedOpenFreesRoom: a file whose only open gave up while
// it was fetched is kept idle, not held: its room goes to the next files.
func TestFilesAbandonedOpenFreesRoom(t *testing.T) {
	s := newCounting()
	c := newTestCache(t, s, 256*testChunk)
	const fileSize = 4 * testChunk
	files := c.UseFiles(FilesOptions{Budget: 32 * testChunk, MinSize: 1}) // 8 files
	pk, _ := putFiles(t, s, "data/p/1/100/tgb.pack", fileSize)
	s.delay = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	if _, err := files.Open(ctx, pk, &pk.Files[0]); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("open with a 5 ms deadline on a 50 ms store: %v", err)
	}
	cancel()
	waitUntil(t, func() bool { return files.Stats().Fills == 1 })
	s.delay = 0
	for i := range 8 {
		pk, _ := putFiles(t, s, fmt.Sprintf("data/p/1/%d/tgb.pack", i), fileSize)
		h, err := files.Open(context.Background(), pk, &pk.Files[0])
		if err != nil {
			t.Fatalf("file %d of 8 with one abandoned file in the budget: %v", i, err)
		}
		defer h.Release()
	}
}
