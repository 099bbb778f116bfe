package stage_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lakestream/lakestream/stage"
)

// TestRejectWritesNothingInTheBatch (issue 43 item 5): rejecting a batch
// writes its reason outside the batch and links it in: a symlink the
// writer planted at the old temporary name (.reason.tmp -> a victim) is
// never written through (the producer often runs as root), and a
// writer's own file of that name is neither overwritten nor deleted.
func TestRejectWritesNothingInTheBatch(t *testing.T) {
	e := newEnv(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Both batches lack rank-1: rejected.
	write(t, filepath.Join(e.staging, "b1"), map[string]string{"rank-0/a": "x", stage.Sealed: ""})
	if err := os.Symlink(victim, filepath.Join(e.staging, "b1", ".reason.tmp")); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(e.staging, "b2"), map[string]string{"rank-0/a": "x", ".reason.tmp": "the writer's own", stage.Sealed: ""})
	rejected := e.run(t, "p")
	if len(rejected) != 2 {
		t.Fatalf("rejected %v; want both batches", rejected)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Fatalf("the symlink's target holds %q (%v); the rejection wrote through the planted symlink", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(e.staging, stage.RejectedDir, "b2", ".reason.tmp")); err != nil || string(b) != "the writer's own" {
		t.Fatalf("the writer's .reason.tmp after the rejection: %q, %v", b, err)
	}
	for _, b := range []string{"b1", "b2"} {
		if r, err := os.ReadFile(filepath.Join(e.staging, stage.RejectedDir, b, stage.Reason)); err != nil || !strings.HasPrefix(string(r), "invalid batch") {
			t.Fatalf("%s's _REASON: %q, %v", b, r, err)
		}
	}
}

// TestLockRefusesSymlink (issue 43 item 5): a _lock planted as a symlink
// is refused with one line, and its target is not truncated.
func TestLockRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, stage.LockFile)); err != nil {
		t.Fatal(err)
	}
	tree, err := stage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := tree.Lock("p")
	if err == nil {
		unlock()
		t.Fatal("Lock took a staging directory whose _lock is a symlink")
	}
	if !strings.Contains(err.Error(), "is a symlink") {
		t.Errorf("Lock: %v; want it to say _lock is a symlink", err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Fatalf("the symlink's target holds %q (%v)", b, err)
	}
}
