package integration

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/txn"
)

// TestMountLowFdLimit (issue 47 item 3): a mount started with an open-file
// limit of 256 (soft and hard, as `ulimit -n 256` sets) serves one reader
// holding 480 files of ~1 MiB open: every open succeeds with the right
// bytes (before, 237 failed with EMFILE, where --passthrough off opened
// all), the memory files take at most half the limit and the rest go
// through blocks; the mount never reports its own fd limit as the store
// failing, and /health answers 200 once the files are closed.
func TestMountLowFdLimit(t *testing.T) {
	longtest.Skip(t, "480 files held open under a 256-fd limit")
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	url, _ := mntFileURL(t)
	const steps, ranks, perRank = 30, 4, 4
	var files []ptFile
	for i := range perRank {
		files = append(files, ptFile{fmt.Sprintf("f%d.bin", i), 1<<20 + 100*i})
	}
	ptProduce(t, url, txn.CreateOptions{Ranks: ranks}, steps, files)
	wrapper := filepath.Join(t.TempDir(), "lakefs-mount-256")
	script := "#!/bin/sh\nulimit -n 256 || exit 97\nexec " + bin + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	m := ptStart(t, wrapper, url, "--passthrough", "on", "--prefetch-steps", "0")
	var held []*os.File
	defer func() {
		for _, f := range held {
			f.Close()
		}
	}()
	for s := range int64(steps) {
		for r := range ranks {
			for _, pf := range files {
				f, err := os.Open(ptPath(m.mnt, s, r, pf.name))
				if err != nil {
					t.Fatalf("open %d of %d (step %d rank %d %s): %v", len(held)+1, steps*ranks*perRank, s, r, pf.name, err)
				}
				held = append(held, f)
				b, err := io.ReadAll(f)
				if err == nil {
					_, err = mntCheckContent(b, r, pf.name)
				}
				if err != nil {
					t.Fatalf("%s: %v", f.Name(), err)
				}
			}
		}
	}
	pt, blocks := m.opens(t)
	t.Logf("%d files held open through a mount limited to 256 fds: %d by passthrough, %d by blocks", len(held), pt, blocks)
	if pt < 1 || pt > 128 {
		t.Errorf("%d passthrough opens; want some, and at most half the fd limit", pt)
	}
	for _, f := range held {
		f.Close()
	}
	held = nil
	var health string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := outHealth(t, m.addr)
		if health = fmt.Sprintf("%d %s", code, body); code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/health after every file closed: %s", health)
		}
	}
	if out := m.stderr.String(); strings.Contains(out, "store calls failing") || strings.Contains(out, "too many open files") {
		t.Errorf("the mount blamed its fd limit on the store:\n%s", out)
	}
}
