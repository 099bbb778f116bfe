package cache

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lakestream/lakestream/txn"
)

// TestPrefetchRunLargerThanBudget: with 4 MiB chunks a run of 8 blocks'
// bytes is 32 MiB, twice a 16 MiB passthrough budget; 16 adjacent files of
// 2 MiB start filling within a second all the same (issue 43 item 3: the
// run's room was waited for forever, inside the scheduler).
func TestPrefetchRunLargerThanBudget(t *testing.T) {
	const chunk, budget, fileSize = 4 << 20, 16 << 20, 2 << 20
	backings(t, budget, func(t *testing.T, b *Backing) {
		s := newCounting()
		c, err := New(Options{Store: s, ChunkSize: chunk, Size: MinBlocks * chunk, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		files := c.UseFiles(FilesOptions{Budget: budget, MinSize: 1, Backing: b})
		sizes := make([]int, 16)
		for i := range sizes {
			sizes[i] = fileSize
		}
		pk, parts := putFiles(t, s, "data/p/1/0/tgb.pack", sizes...)
		pk.Chunks = nil
		all := bytes.Join(parts, nil)
		for off := 0; off < len(all); off += chunk {
			pk.Chunks = append(pk.Chunks, txn.CRC32C(all[off:min(off+chunk, len(all))]))
		}
		st := &steps{packs: map[int64]*txn.Pack{0: pk}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 1, Committed: st.committed, Pack: st.pack})
		start := time.Now()
		p.Touch(0, 0)
		for files.Stats().Fills == 0 {
			if time.Since(start) > time.Second {
				t.Fatalf("no fill started within 1s of the touch (%d bytes held)", files.Stats().Bytes)
			}
			time.Sleep(time.Millisecond)
		}
		// Every file opens through passthrough with its bytes, the
		// prefetch going on as the reader frees room.
		for i := range parts {
			h, err := files.Open(ctx, pk, &pk.Files[i])
			if err != nil {
				t.Fatalf("f%d: %v", i, err)
			}
			if !bytes.Equal(readHandle(t, h), parts[i]) {
				t.Fatalf("f%d: wrong bytes", i)
			}
			h.Release()
			if held := files.Stats().Bytes; held > budget {
				t.Fatalf("%d bytes held, budget %d", held, budget)
			}
		}
	})
}

// TestOpenGoesFirst: a prefetch that found the budget held leaves room
// for opens: an open of a file no prefetch fetched gets a memory file
// (issue 43 item 3: a prefetch waiting in the FIFO semaphore made every
// open's TryAcquire fail), and the prefetch resumes as the reader frees
// room.
func TestOpenGoesFirst(t *testing.T) {
	const fileSize = 8 * testChunk
	budget := int64(64 * testChunk) // 8 files
	s := newCounting()
	c := newTestCache(t, s, 1024*testChunk)
	files := c.UseFiles(FilesOptions{Budget: budget, MinSize: 1})
	sizes := make([]int, 16)
	for i := range sizes {
		sizes[i] = fileSize
	}
	pk, parts := putFiles(t, s, "data/p/1/0/tgb.pack", sizes...)
	other, otherParts := putFiles(t, s, "data/p/1/9/tgb.pack", fileSize)
	st := &steps{packs: map[int64]*txn.Pack{0: pk}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.NewPrefetcher(ctx, PrefetchOptions{Depth: 1, Committed: st.committed, Pack: st.pack})
	p.Touch(0, 0)
	// The prefetch takes what it may and waits for room.
	waitUntil(t, func() bool {
		st := files.Stats()
		return st.Fills >= 7 && st.Bytes == st.Fills*fileSize
	})
	h, err := files.Open(ctx, other, &other.Files[0])
	if err != nil {
		t.Fatalf("an open while prefetched files hold the budget: %v", err)
	}
	if !bytes.Equal(readHandle(t, h), otherParts[0]) {
		t.Fatal("wrong bytes")
	}
	h.Release()
	for i := range parts {
		h, err := files.Open(ctx, pk, &pk.Files[i])
		if err != nil {
			t.Fatalf("f%d: %v", i, err)
		}
		if !bytes.Equal(readHandle(t, h), parts[i]) {
			t.Fatalf("f%d: wrong bytes", i)
		}
		h.Release()
	}
	// Each file is fetched once; one more fill is allowed: a fill the
	// prefetcher started and cancelled when the reader passed its job (a
	// started fill counts) is fetched again by the reader's open.
	if f := files.Stats().Fills; f < int64(len(parts))+1 || f > int64(len(parts))+2 {
		t.Errorf("%d fills for %d files", f, len(parts)+1)
	}
}
