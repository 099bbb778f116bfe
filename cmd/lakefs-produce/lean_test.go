package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestProducerLinksNoFUSEOrNATS: what ships to production nodes links
// neither the FUSE mount nor a NATS server (the benchmarks' peers).
func TestProducerLinksNoFUSEOrNATS(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/lakestream/lakestream/cmd/lakefs-produce").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, dep := range strings.Fields(string(out)) {
		for _, banned := range []string{"github.com/hanwen/go-fuse", "github.com/nats-io/", "github.com/lakestream/lakestream/mount", "github.com/lakestream/lakestream/bench"} {
			if strings.HasPrefix(dep, banned) {
				t.Errorf("lakefs-produce links %s", dep)
			}
		}
	}
}

// TestBenchRunsLakefsBench: `lakefs-produce bench ...` runs lakefs-bench
// with the same arguments and passes its exit status through; without
// lakefs-bench it says in one line where the benchmarks went.
func TestBenchRunsLakefsBench(t *testing.T) {
	dir := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, "lakefs-bench"), "github.com/lakestream/lakestream/cmd/lakefs-bench").CombinedOutput(); err != nil {
		t.Fatalf("building lakefs-bench: %v\n%s", err, out)
	}
	t.Setenv("PATH", t.TempDir())
	code, _, stderr := invoke(t, "bench", "ingest", "--producers", "1")
	if code != 1 || !strings.Contains(stderr, "lakefs-bench ingest --producers 1") || strings.Count(stderr, "\n") != 1 {
		t.Errorf("bench without lakefs-bench: exit %d, %q; want 1 and one line naming lakefs-bench", code, stderr)
	}
	t.Setenv("PATH", dir)
	code, out, stderr := invoke(t, "bench", "ingest", "--help")
	if code != 0 || !strings.Contains(out, "lakefs-bench ingest") {
		t.Errorf("bench ingest --help: exit %d, %q %q", code, out, stderr)
	}
	code, _, stderr = invoke(t, "bench", "ingest", "--store", "file:///tmp/x", "--payload", "0")
	if code != 2 || !strings.Contains(stderr, "--payload 0 is out of range") {
		t.Errorf("bench ingest --payload 0: exit %d, %q; want lakefs-bench's usage error and exit 2", code, stderr)
	}
}
