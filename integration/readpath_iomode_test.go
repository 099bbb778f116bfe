package integration

import (
	"io"
	"os"
	"testing"

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/txn"
)

// TestMountOneIOModePerFile (issue 43 item 4): the kernel (Linux 6.9+)
// refuses a passthrough open of a file that has a cached (block path)
// open, and the other way round, with EIO at open(2). With the memory
// files full, reader A opens F through blocks and keeps it open; the
// room frees; reader B opens F: it must succeed, with F's bytes (it
// takes the block path too while A holds F), and once both closed, F
// is served by passthrough again.
func TestMountOneIOModePerFile(t *testing.T) {
	longtest.Skip(t, "reopening files across room for passthrough")
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	url, _ := mntFileURL(t)
	const size = 4 << 20
	// 16 files of 4 MiB; a 128 MiB cache gives the memory files 32 MiB:
	// room for 8 of them.
	ptProduce(t, url, txn.CreateOptions{Ranks: 4}, 4, []ptFile{{ptBig, size}})
	m := ptStart(t, bin, url, "--passthrough", "on", "--cache-size", "128MiB", "--prefetch-steps", "0")
	open := func(step int64, rank int) *os.File {
		t.Helper()
		f, err := os.Open(ptPath(m.mnt, step, rank, ptBig))
		if err != nil {
			t.Fatalf("open step %d rank %d: %v", step, rank, err)
		}
		return f
	}
	check := func(f *os.File, rank int) {
		t.Helper()
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f)
		if err == nil {
			_, err = mntCheckContent(b, rank, ptBig)
		}
		if err != nil {
			t.Fatalf("%s: %v", f.Name(), err)
		}
	}
	// Eight files hold the memory files' room.
	var holders []*os.File
	for i := range 8 {
		f := open(int64(i/4), i%4)
		check(f, i%4)
		holders = append(holders, f)
	}
	pt0, blocks0 := m.opens(t)
	a := open(2, 0) // no room: the block path
	check(a, 0)
	if pt, blocks := m.opens(t); pt != pt0 || blocks != blocks0+1 {
		t.Fatalf("reader A's open: %d passthrough, %d blocks (before %d, %d); want it on the block path", pt, blocks, pt0, blocks0)
	}
	for _, f := range holders {
		f.Close()
	}
	b := open(2, 0) // room is free now, but A holds F through blocks
	check(b, 0)
	check(a, 0)
	b.Close()
	a.Close()
	pt1, _ := m.opens(t)
	c := open(2, 0) // nobody holds F: passthrough again
	check(c, 0)
	c.Close()
	if pt, _ := m.opens(t); pt != pt1+1 {
		t.Errorf("F opened alone after both closed: passthrough opens %d -> %d; want one more", pt1, pt)
	}
}
