package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestInitRefusesNestedStreams (issue 47 item 1): init refuses a stream
// inside another stream's data/, _log/, _consumers/ or _probe/ (whose gc
// would delete it as garbage) and one that would hold a stream in its
// own, naming the other stream; a stream beside another's prefixes (a
// sibling directory under its root) is fine.
func TestInitRefusesNestedStreams(t *testing.T) {
	root := t.TempDir()
	outer := "file://" + root + "/fx"
	if code, _, stderr := invoke(t, "init", "--store", outer, "--ranks", "1"); code != 0 {
		t.Fatal(stderr)
	}
	for _, sub := range []string{"data", "data/imagenet", "_log/x", "_consumers/y", "_probe/z"} {
		code, _, stderr := invoke(t, "init", "--store", outer+"/"+sub, "--ranks", "1")
		if code != 2 || !strings.Contains(stderr, "lies in the") || !strings.Contains(stderr, root+"/fx") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("init inside %s/: exit %d, %q; want one usage line naming the outer stream", sub, code, stderr)
		}
		if _, err := os.Stat(filepath.Join(root, "fx", sub, txn.StreamKey)); err == nil {
			t.Errorf("init inside %s/ wrote a _stream.json", sub)
		}
	}
	if code, _, stderr := invoke(t, "init", "--store", outer+"/other", "--ranks", "1"); code != 0 {
		t.Errorf("init of a sibling prefix under the stream's root: exit %d, %s", code, stderr)
	}
	// The reverse: a stream first, then one around it.
	inner := "file://" + root + "/gx/data/imagenet"
	if code, _, stderr := invoke(t, "init", "--store", inner, "--ranks", "1"); code != 0 {
		t.Fatal(stderr)
	}
	code, _, stderr := invoke(t, "init", "--store", "file://"+root+"/gx", "--ranks", "1")
	if code != 2 || !strings.Contains(stderr, "would hold the stream at its data/imagenet/") {
		t.Errorf("init around a stream: exit %d, %q; want a usage error naming it", code, stderr)
	}
}

// TestGCLeavesForeignStream (issue 47 item 1): a stream inside another's
// data/ (made before init refused it, or by hand) is never gc's garbage:
// gc --grace 0s of the outer stream leaves the inner one's _stream.json,
// log and data, says so, and the inner one still reads.
func TestGCLeavesForeignStream(t *testing.T) {
	root := t.TempDir()
	outer, innerDir := "file://"+root, filepath.Join(root, "data", "imagenet")
	if code, _, stderr := invoke(t, "init", "--store", outer, "--ranks", "1"); code != 0 {
		t.Fatal(stderr)
	}
	s, err := store.NewFile(innerDir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txn.Create(t.Context(), s, txn.CreateOptions{Ranks: 1}); err != nil {
		t.Fatal(err)
	}
	staging := t.TempDir()
	stageBatch(t, staging, "b0", 1)
	if code, _, stderr := invoke(t, "run", "--store", "file://"+innerDir, "--staging", staging, "--producer-id", "p", "--once"); code != 0 {
		t.Fatal(stderr)
	}
	before := filesUnder(t, innerDir)
	code, out, stderr := invoke(t, "gc", "--store", outer, "--grace", "0s")
	if code != 0 || !strings.Contains(out, "left alone: another stream at data/imagenet/") {
		t.Fatalf("gc of the outer stream: exit %d, %q %s", code, out, stderr)
	}
	if after := filesUnder(t, innerDir); !slicesEqual(before, after) {
		t.Fatalf("gc of the outer stream changed the inner one: before %v, after %v", before, after)
	}
	code, out, stderr = invoke(t, "status", "--store", "file://"+innerDir, "--json")
	var st struct{ Head *int64 }
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Head == nil || *st.Head != 0 {
		t.Fatalf("status of the inner stream after gc: exit %d, %q %s", code, out, stderr)
	}
}

func filesUnder(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, strings.TrimPrefix(p, dir))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func slicesEqual(a, b []string) bool {
	return strings.Join(a, "\n") == strings.Join(b, "\n")
}

// TestFirstStepBounded (issue 47 item 9): --first-step above txn.MaxStep
// is a usage error (MaxInt64 was accepted and the second step committed
// as -9223372036854775808); at MaxStep the first batch commits and the
// next is refused with one line, nothing written, no negative step.
func TestFirstStepBounded(t *testing.T) {
	url := "file://" + t.TempDir()
	code, _, stderr := invoke(t, "init", "--store", url, "--ranks", "1", "--first-step", "9223372036854775807")
	if code != 2 || !strings.Contains(stderr, "--first-step 9223372036854775807 is out of range; use 0 to "+strconv.Itoa(txn.MaxStep)) {
		t.Fatalf("init --first-step MaxInt64: exit %d, %q", code, stderr)
	}
	if code, _, stderr := invoke(t, "init", "--store", url, "--ranks", "1", "--first-step", strconv.Itoa(txn.MaxStep)); code != 0 {
		t.Fatal(stderr)
	}
	staging := t.TempDir()
	stageBatch(t, staging, "a", 1)
	stageBatch(t, staging, "b", 1)
	code, out, stderr := invoke(t, "run", "--store", url, "--staging", staging, "--producer-id", "p", "--once")
	if code != 1 || !strings.Contains(stderr, "reached its highest step") || !strings.Contains(out, "a -> step "+strconv.Itoa(txn.MaxStep)) {
		t.Fatalf("run past the highest step: exit %d, %q %q", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(staging, "b", "_SEALED")); err != nil {
		t.Fatalf("the batch that could not commit left the staging tree: %v", err)
	}
	_, out, _ = invoke(t, "status", "--store", url, "--json")
	var st struct{ Head *int64 }
	if json.Unmarshal([]byte(out), &st) != nil || st.Head == nil || *st.Head != txn.MaxStep {
		t.Fatalf("status after: %s; want head %d", out, txn.MaxStep)
	}
}

// TestVerifyParallelRange (issue 47 item 10): verify --parallel 0 or -1
// is a usage error (it was accepted silently).
func TestVerifyParallelRange(t *testing.T) {
	url := "file://" + t.TempDir()
	for _, n := range []string{"0", "-1"} {
		code, _, stderr := invoke(t, "verify", "--store", url, "--parallel", n)
		if code != 2 || !strings.Contains(stderr, "--parallel "+n+" is out of range; use 1 to") {
			t.Errorf("verify --parallel %s: exit %d, %q", n, code, stderr)
		}
	}
}

// TestGCInterruptedOneLine (issue 47 item 7): a gc stopped by a signal
// says in one short line what is committed, how many deletes were cut
// short and what a rerun does, never the keys.
func TestGCInterruptedOneLine(t *testing.T) {
	rep := &txn.GCReport{ReclaimedSteps: 400, ReclaimedBelow: 500, Version: 812, NotDeleted: 1000, LogDeletedCount: 3000,
		DataDeleted: []string{strings.Repeat("data/p/1/1/tgb.pack,", 1000)}}
	msg := gcInterrupted(rep, 10*time.Minute).Error()
	for _, want := range []string{"reclamation of 400 steps below step 500 is committed (version 812)", "1000 deletes were cut short", "run gc again"} {
		if !strings.Contains(msg, want) {
			t.Errorf("%q; want %q", msg, want)
		}
	}
	if strings.Contains(msg, "tgb.pack") || strings.Contains(msg, "\n") || len(msg) > 400 {
		t.Errorf("the interrupted gc's line is %d bytes or names keys: %q", len(msg), msg)
	}
}

// TestTaskProgress (issue 47 item 8): long commands show progress on
// stderr: nothing in the first two seconds, then a line every five
// seconds when stderr is not a terminal, and the last one.
func TestTaskProgress(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(1000, 0)
	p := newTaskProgress(&buf, "verify: objects checked")
	p.now, p.start = func() time.Time { return clock }, clock
	at := func(d time.Duration, done int64) { clock = time.Unix(1000, 0).Add(d); p.update(done, 100) }
	at(time.Second, 10)
	if buf.Len() != 0 {
		t.Fatalf("progress within two seconds: %q", buf.String())
	}
	at(2500*time.Millisecond, 20)
	at(3*time.Second, 30)
	at(8*time.Second, 80)
	at(9*time.Second, 100)
	want := "verify: objects checked 20 of 100 (20%), 3s\nverify: objects checked 80 of 100 (80%), 8s\nverify: objects checked 100 of 100 (100%), 9s\n"
	if buf.String() != want {
		t.Fatalf("progress lines:\n%s\nwant:\n%s", buf.String(), want)
	}
}
