package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
)

// TestThousandFillsLeaveNothing is issue 43's closing measurement: a read
// of 1,000 files of which every tenth fails its CRC32C, then a second run
// whose store breaks every body halfway from its 500th file on, leave the
// fd count and the memory-file bytes where they were (printed); with both
// backings. One file read before the measurement fills the idle list, as
// the last file read does after it.
func TestThousandFillsLeaveNothing(t *testing.T) {
	const size = 2 * testChunk
	budget := int64(8 * size) // the idle list holds one file
	backings(t, budget, func(t *testing.T, b *Backing) {
		s := &halfStore{countingStore: newCounting(), broken: make(chan struct{})}
		c, err := New(Options{Store: s, ChunkSize: testChunk, Size: 1024 * testChunk, Fetchers: 4,
			Logger: slog.New(slog.DiscardHandler), Retry: Retry{Window: -1}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		files := c.UseFiles(FilesOptions{Budget: budget, MinSize: 1, Backing: b})
		ctx := context.Background()
		open := func(key string, corrupt bool) error {
			pk, _ := putFiles(t, s.countingStore, key, size)
			if corrupt {
				s.corrupt[pk.Key] = -1
			}
			h, err := files.Open(ctx, pk, &pk.Files[0])
			if err == nil {
				h.Release()
			}
			return err
		}
		if err := open("data/p/0/warm/tgb.pack", false); err != nil {
			t.Fatal(err)
		}
		fds, used := fdCount(t), backingUsed(t, b)
		var bad int
		for i := range 1000 {
			err := open(fmt.Sprintf("data/p/1/%d/tgb.pack", i), i%10 == 0)
			if (i%10 == 0) != errors.Is(err, ErrChecksum) || (err != nil && !errors.Is(err, ErrChecksum)) {
				t.Fatalf("file %d: %v", i, err)
			}
			if err != nil {
				bad++
			}
		}
		f1, u1 := fdCount(t), backingUsed(t, b)
		t.Logf("1,000 files, %d failing their CRC32C: fds %d -> %d, memory-file bytes %d -> %d", bad, fds, f1, used, u1)
		if f1 != fds || u1 != used {
			t.Errorf("fds %d -> %d, memory-file bytes %d -> %d; want both unchanged", fds, f1, used, u1)
		}
		for i := range 1000 {
			if i == 500 {
				close(s.broken)
			}
			err := open(fmt.Sprintf("data/p/2/%d/tgb.pack", i), false)
			if (i < 500) != (err == nil) {
				t.Fatalf("file %d of the run whose store breaks at 500: %v", i, err)
			}
		}
		f2, u2 := fdCount(t), backingUsed(t, b)
		t.Logf("1,000 files, the store failing from the 500th: fds %d -> %d, memory-file bytes %d -> %d", fds, f2, used, u2)
		if f2 != fds || u2 != used {
			t.Errorf("fds %d -> %d, memory-file bytes %d -> %d; want both unchanged", fds, f2, used, u2)
		}
	})
}
