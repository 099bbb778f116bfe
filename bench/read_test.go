package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestReadFile runs bench read on file:// through a real kernel mount (a
// lakefs-mount built for the test) and checks the contract's fields, that
// every system read every file of the readers' ranks with its CRC32C
// checked, that the mount fetched at most 1.05x what it served with
// default flags (ranks nobody opened are never fetched), that direct and
// plain-get count one GET per file, that mount rows carry their ratios
// to both, and that mount-blocks served every file by the block path and
// mount (default flags) every file of at least 1 MiB by passthrough.
func TestReadFile(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lakefs-mount")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/lakestream/lakestream/cmd/lakefs-mount").CombinedOutput(); err != nil {
		t.Fatalf("building lakefs-mount: %v\n%s", err, out)
	}
	var out bytes.Buffer
	o := ReadOptions{
		StoreURL: "file://" + t.TempDir(), Steps: 6, Ranks: 4, FilesPerRank: 2, Size: 3<<20 + 12345, Readers: []int{1, 2},
		MountBin: bin, JSON: true, Logger: quiet,
	}
	if err := Read(t.Context(), o, &out); err != nil {
		t.Fatal(err)
	}
	var rows []ReadRow
	for line := range strings.SplitSeq(strings.TrimSpace(out.String()), "\n") {
		var fields map[string]any
		if err := json.Unmarshal([]byte(line), &fields); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		for _, k := range []string{"system", "readers", "mb_per_s", "p50_ms", "p95_ms", "fetched_bytes", "served_bytes", "rss_mib", "cpu_s_per_gb",
			"files_per_s", "gets", "staged_peak_mib"} {
			if _, ok := fields[k]; !ok {
				t.Fatalf("line %q has no %q", line, k)
			}
		}
		var r ReadRow
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		rows = append(rows, r)
	}
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8 (every system for 1 and 2 readers):\n%s", len(rows), out.String())
	}
	wantPath := map[string]string{SystemMountBlocks: "blocks", SystemMount: "passthrough"}
	for _, r := range rows {
		// The kernel may ask for a range twice (served counts what the
		// mount returned to it), never less than the readers read.
		files := r.Readers * o.Steps * o.FilesPerRank
		want := int64(files) * o.Size
		if r.Files != files || r.ServedBytes < want || r.MBPerS <= 0 || r.FilesPerS <= 0 || r.P95Ms < r.P50Ms {
			t.Errorf("%+v: want %d files, >= %d bytes served", r, files, want)
		}
		mounted := r.System == SystemMount || r.System == SystemMountBlocks
		if !mounted && r.Gets != int64(files) {
			t.Errorf("%+v: %d GETs, want one per file", r, r.Gets)
		}
		if mounted && (r.Gets < 1 || r.VsDirect == nil || r.VsPlainGet == nil || r.Path != wantPath[r.System]) {
			t.Errorf("%+v: want the mount's GETs, path %q and its ratios to direct and plain-get", r, wantPath[r.System])
		}
		if r.System == SystemMount && r.StagedPeakMiB <= 0 {
			t.Errorf("%+v: passthrough files staged nothing in memory files", r)
		}
		if float64(r.FetchedBytes) > 1.05*float64(want) {
			t.Errorf("%+v: fetched %d bytes for %d read", r, r.FetchedBytes, want)
		}
		if mounted && r.RSSMiB <= 0 {
			t.Errorf("%+v: no RSS of the mount", r)
		}
	}
}

// TestReadServerPIDMustBeAlive: a --server-pid that names no process is a
// one-line error at the start, not a table of empty server columns.
func TestReadServerPIDMustBeAlive(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := cmd.Process.Pid // reaped: no process has it now (pids are not reused this soon)
	o := ReadOptions{StoreURL: "file://" + t.TempDir(), ServerPID: gone, Systems: []string{SystemDirect}}
	err := o.defaults()
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("--server-pid %d", gone)) {
		t.Fatalf("defaults with a dead server pid: %v, want an error naming --server-pid %d", err, gone)
	}
	o = ReadOptions{StoreURL: "file://" + t.TempDir(), ServerPID: os.Getpid(), Systems: []string{SystemDirect}}
	if err := o.defaults(); err != nil {
		t.Fatalf("defaults with a live server pid: %v", err)
	}
}
