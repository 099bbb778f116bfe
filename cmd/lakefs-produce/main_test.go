package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/stage"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// invoke runs the command in-process and returns its exit status and output.
func invoke(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"lakefs-produce"}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func stageBatch(t *testing.T, staging, name string, ranks int) {
	t.Helper()
	for r := range ranks {
		dir := filepath.Join(staging, name, "rank-"+string(rune('0'+r)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "x.bin"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(staging, name, "_SEALED"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// dirBytes is the size of the files under dir.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		n += info.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestCommandsEndToEnd(t *testing.T) {
	root := t.TempDir()
	url := "file://" + root
	staging := t.TempDir()
	t.Setenv("LAKEFS_STORE", url)

	if code, _, stderr := invoke(t, "init", "--ranks", "2", "--first-step", "10"); code != 0 {
		t.Fatalf("init: %d %s", code, stderr)
	}
	if code, _, stderr := invoke(t, "init", "--ranks", "2"); code != 1 || !strings.Contains(stderr, "exists") {
		t.Fatalf("second init: %d %q", code, stderr)
	}
	// Empty stream: head is null.
	code, out, _ := invoke(t, "status", "--json")
	var st map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st["head"] != nil {
		t.Fatalf("status of an empty stream: %d %s", code, out)
	}
	for _, b := range []string{"a", "b", "c"} {
		stageBatch(t, staging, b, 2)
	}
	if code, _, stderr := invoke(t, "run", "--staging", staging, "--producer-id", "p0", "--once"); code != 0 {
		t.Fatalf("run: %d %s", code, stderr)
	}
	code, out, _ = invoke(t, "status", "--json")
	if code != 0 {
		t.Fatal(code)
	}
	var s struct {
		Head      *int64 `json:"head"`
		FirstStep int64  `json:"first_step"`
		Version   uint64 `json:"version"`
		Ranks     int    `json:"ranks"`
		Live      struct {
			From, To *int64
			Count    int64
		} `json:"live"`
		Producers []struct {
			ID     string `json:"id"`
			Epoch  uint64 `json:"epoch"`
			Seq    uint64 `json:"seq"`
			Cursor string `json:"cursor"`
		} `json:"producers"`
		Checkpoints []int64 `json:"checkpoints"`
		DataBytes   int64   `json:"data_bytes"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.Head == nil || *s.Head != 12 || s.FirstStep != 10 || s.Ranks != 2 || s.Live.Count != 3 || *s.Live.From != 10 ||
		len(s.Producers) != 1 || s.Producers[0].Cursor != "c" || s.Producers[0].Seq != 3 || s.DataBytes != dirBytes(t, filepath.Join(root, "data")) {
		t.Fatalf("status: %s (data/ holds %d bytes)", out, dirBytes(t, filepath.Join(root, "data")))
	}
	if code, out, _ := invoke(t, "verify"); code != 0 || !strings.Contains(out, "0 problems") {
		t.Fatalf("verify: %d %s", code, out)
	}
	if code, _, stderr := invoke(t, "checkpoint", "--step", "99"); code != 1 || !strings.Contains(stderr, "not committed") {
		t.Fatalf("checkpoint past head: %d %s", code, stderr)
	}
	for range 2 { // twice: harmless
		if code, _, stderr := invoke(t, "checkpoint", "--step", "11"); code != 0 {
			t.Fatalf("checkpoint: %d %s", code, stderr)
		}
	}
	code, out, _ = invoke(t, "status", "--json")
	if code != 0 || !strings.Contains(out, `"checkpoints":[11]`) {
		t.Fatalf("status after checkpoint: %s", out)
	}

	// Corrupt one pack: verify names it and fails.
	dir := strings.TrimPrefix(url, "file://")
	var pack string
	filepath.Walk(filepath.Join(dir, "data"), func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && pack == "" {
			pack = p
		}
		return nil
	})
	if err := os.WriteFile(pack, []byte("XX"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := invoke(t, "verify")
	rel, _ := filepath.Rel(dir, pack)
	if code != 1 || !strings.Contains(out, rel) || !strings.Contains(stderr, "problems") {
		t.Fatalf("verify of a corrupt pack: %d %s %s", code, out, stderr)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Setenv("LAKEFS_STORE", "")
	for _, c := range []struct {
		args    []string
		mention string
	}{
		{[]string{"status"}, "--store"},
		{[]string{"status", "--store", "ftp://x"}, `"ftp"`},
		{[]string{"status", "--store", "file://relative"}, "file:///abs/dir"},
		{[]string{"init", "--store", "file:///tmp/x", "--ranks", "0"}, "--ranks 0 is out of range; use 1 to 65536"},
		{[]string{"init", "--store", "file:///tmp/x", "--ranks", "65537"}, "--ranks 65537 is out of range; use 1 to 65536"},
		{[]string{"init", "--store", "file:///tmp/x"}, "--ranks is required"},
		{[]string{"init", "--store", "file:///tmp/x", "--ranks", "2", "--chunk-size", "100"}, "--chunk-size 100 is out of range; use 4KiB to 1GiB"},
		// Issue 32 item 17: became 100 without a word.
		{[]string{"init", "--store", "file:///tmp/x", "--ranks", "2", "--snapshot-every", "0"}, "--snapshot-every must be at least 1 (got 0)"},
		{[]string{"init", "--store", "file:///tmp/x", "--ranks", "2", "--chunk-size", "big"}, `--chunk-size "big" is not a size`},
		{[]string{"run", "--store", "file:///tmp/x", "--producer-id", "p"}, "--staging"},
		{[]string{"run", "--store", "file:///tmp/x", "--staging", "/nonexistent-staging", "--producer-id", "p"}, "/nonexistent-staging"},
		{[]string{"checkpoint", "--store", "file:///tmp/x"}, "--step"},
		{[]string{"status", "--no-such-flag"}, "no-such-flag"},
		{[]string{"frobnicate"}, "frobnicate"},
	} {
		code, _, stderr := invoke(t, c.args...)
		if code != 2 || !strings.Contains(stderr, c.mention) || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, stderr %q; want 2 and one line mentioning %s", c.args, code, stderr, c.mention)
		}
	}
	// No stream at a valid store: operational error naming the fix.
	code, _, stderr := invoke(t, "status", "--store", "file://"+t.TempDir())
	if code != 1 || !strings.Contains(stderr, "lakefs-produce init") {
		t.Errorf("status without a stream: %d %q", code, stderr)
	}
}

// TestDecimalFlags: integer flags are decimal only: 010 is 10, not 8
// (a stream's ranks are fixed for its life), and 0x3 is refused (issue 32
// item 8).
func TestDecimalFlags(t *testing.T) {
	t.Setenv("LAKEFS_STORE", "file://"+t.TempDir())
	if code, _, stderr := invoke(t, "init", "--ranks", "010", "--first-step", "0100", "--retain-checkpoints", "02"); code != 0 {
		t.Fatalf("init --ranks 010: %d %s", code, stderr)
	}
	code, out, _ := invoke(t, "status", "--json")
	var st struct {
		Ranks     int   `json:"ranks"`
		FirstStep int64 `json:"first_step"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Ranks != 10 || st.FirstStep != 100 {
		t.Fatalf("init --ranks 010 --first-step 0100: %s; want 10 ranks from step 100", out)
	}
	for _, args := range [][]string{
		{"init", "--store", "file://" + t.TempDir(), "--ranks", "0x3"},
		{"checkpoint", "--step", "0x10"},
		{"checkpoint", "--step", "1e3"},
		{"verify", "--parallel", "0b11"},
		{"run", "--staging", t.TempDir(), "--producer-id", "p", "--max-lead", "0o7"},
		{"init", "--store", "file://" + t.TempDir(), "--ranks", "2", "--snapshot-every", "0x10"},
	} {
		code, _, stderr := invoke(t, args...)
		if code != 2 || !strings.Contains(stderr, "is not a decimal whole number") || strings.Count(strings.TrimSpace(stderr), "\n") > 0 {
			t.Errorf("%v: exit %d, %q; want 2 and one line saying it is not decimal", args, code, stderr)
		}
	}
}

// TestInitChunkSizeUnits: --chunk-size takes units like every size.
func TestInitChunkSizeUnits(t *testing.T) {
	dir := t.TempDir()
	if code, _, stderr := invoke(t, "init", "--store", "file://"+dir, "--ranks", "2", "--chunk-size", "64KiB"); code != 0 {
		t.Fatalf("init --chunk-size 64KiB: %d %s", code, stderr)
	}
	b, err := os.ReadFile(filepath.Join(dir, "_stream.json"))
	if err != nil || !strings.Contains(string(b), `"chunk_size":65536`) {
		t.Errorf("stream config %s, %v; want chunk_size 65536", b, err)
	}
}

// TestRunOnceReportsEachBatch: run --once prints what became of each batch
// and exits 1 when any was rejected; a reused name with new content is
// rejected, not deleted.
func TestRunOnceReportsEachBatch(t *testing.T) {
	url := "file://" + t.TempDir()
	staging := t.TempDir()
	t.Setenv("LAKEFS_STORE", url)
	if code, _, stderr := invoke(t, "init", "--ranks", "2"); code != 0 {
		t.Fatal(stderr)
	}
	stageBatch(t, staging, "a", 2)
	stageBatch(t, staging, "b", 2)
	code, out, stderr := invoke(t, "run", "--staging", staging, "--producer-id", "p0", "--once")
	if code != 0 || out != "a -> step 0\nb -> step 1\n" {
		t.Fatalf("run: %d %q %s", code, out, stderr)
	}
	stageBatch(t, staging, "c", 2)
	stageBatch(t, staging, "a", 2) // the same name again, different content below
	if err := os.WriteFile(filepath.Join(staging, "a", "rank-0", "x.bin"), []byte("new data"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr = invoke(t, "run", "--staging", staging, "--producer-id", "p0", "--once")
	if code != 1 || !strings.Contains(out, "a rejected: batch \"a\" was already committed as step 0") ||
		!strings.Contains(out, "c -> step 2\n") || !strings.Contains(stderr, "1 of 2 batches rejected") {
		t.Fatalf("run with a reused name: %d %q %q", code, out, stderr)
	}
	if b, err := os.ReadFile(filepath.Join(staging, "_rejected", "a", "rank-0", "x.bin")); string(b) != "new data" {
		t.Fatalf("the new data of the reused name: %q %v", b, err)
	}
}

// TestUserMistakes: each mistake gets one line and the right exit status,
// and creates nothing.
func TestUserMistakes(t *testing.T) {
	good := "file://" + t.TempDir()
	if code, _, stderr := invoke(t, "init", "--store", good, "--ranks", "1"); code != 0 {
		t.Fatal(stderr)
	}
	missing := filepath.Join(t.TempDir(), "typo")
	cases := []struct {
		args []string
		code int
		says string
	}{
		{[]string{"init", "--store", "mem://x", "--ranks", "1"}, 2, "mem:// store lives only as long as one process"},
		{[]string{"run", "--store", good, "--staging", t.TempDir(), "--producer-id", "bad id"}, 2, "producer id \"bad id\""},
		{[]string{"checkpoint", "--store", good, "--step", "-5"}, 2, "--step -5: steps are numbered from 0"},
		{[]string{"checkpoint", "--store", good}, 2, "--step S is required"},
		// Issue 32 item 17: step+1 overflowed into a "reclaimed" range.
		{[]string{"checkpoint", "--store", good, "--step", "9223372036854775807"}, 1, "checkpoint for step 9223372036854775807, but the head step is none"},
		// Issue 32 item 1: the secret was printed back.
		{[]string{"status", "--store", "s3://b/p?endpoint=http://AKIAUSERX:SuperSecret123@127.0.0.1:1&region=us-east-1"}, 2, "or, under Kubernetes, the volume's secret"},
		{[]string{"status", "--store", "file://" + missing}, 1, ""},
		{[]string{"verify", "--store", "file://" + missing}, 1, ""},
	}
	for _, c := range cases {
		code, _, stderr := invoke(t, c.args...)
		if code != c.code || !strings.Contains(stderr, c.says) || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, "SuperSecret123") {
			t.Errorf("%v: exit %d, stderr %q; want exit %d and one line saying %q", c.args, code, stderr, c.code, c.says)
		}
	}
	if _, err := os.Lstat(missing); !os.IsNotExist(err) {
		t.Errorf("read-only commands on a mistyped path created %s: %v", missing, err)
	}
	code, out, stderr := invoke(t, "gc", "--store", good)
	if code != 0 || stderr != "" || !strings.HasPrefix(out, "deleted ") {
		t.Errorf("gc: %d, stdout %q, stderr %q (want the report only)", code, out, stderr)
	}
}

// TestGCHeldByLiveMount: gc does not reclaim the step a live mount reads;
// it says so, status shows it, and --force reclaims anyway.
func TestGCHeldByLiveMount(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("LAKEFS_STORE", "file://"+dir)
	staging := t.TempDir()
	if code, _, stderr := invoke(t, "init", "--ranks", "1", "--retain-checkpoints", "1"); code != 0 {
		t.Fatal(stderr)
	}
	for _, b := range []string{"a", "b", "c", "d"} {
		stageBatch(t, staging, b, 1)
	}
	if code, _, stderr := invoke(t, "run", "--staging", staging, "--producer-id", "p", "--once"); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := invoke(t, "checkpoint", "--step", "2"); code != 0 {
		t.Fatal(stderr)
	}
	hb, _ := json.Marshal(map[string]any{"node_id": "host-a", "step": 1, "time": time.Now()})
	if err := os.MkdirAll(filepath.Join(dir, "_consumers"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "_consumers", "host-a.json"), hb, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, _ := invoke(t, "status")
	if code != 0 || !strings.Contains(out, "below step 1 by consumer host-a at step 1") {
		t.Fatalf("status: %d\n%s", code, out)
	}
	code, out, stderr := invoke(t, "gc")
	if code != 0 || stderr != "" || !strings.Contains(out, "held back: checkpoints allow reclaiming below step 3, but consumer host-a at step 1 still read there; reclaiming only below step 1") ||
		!strings.Contains(out, "reclaimed 1 steps (below step 1)") {
		t.Fatalf("gc: %d %q %q", code, out, stderr)
	}
	code, out, stderr = invoke(t, "gc", "--force")
	if code != 0 || !strings.Contains(out, "forced: reclaiming below step 3 although consumer host-a at step 1") ||
		!strings.Contains(out, "reclaimed 2 steps (below step 3)") {
		t.Fatalf("gc --force: %d %q %q", code, out, stderr)
	}
}

// TestEmptyStreamStatus: a stream with nothing committed shows none / null,
// never the zero time.
func TestEmptyStreamStatus(t *testing.T) {
	t.Setenv("LAKEFS_STORE", "file://"+t.TempDir())
	if code, _, stderr := invoke(t, "init", "--ranks", "1"); code != 0 {
		t.Fatal(stderr)
	}
	code, out, _ := invoke(t, "status")
	if code != 0 || strings.Contains(out, "0001-01-01") || !strings.Contains(out, "none (nothing committed yet)") {
		t.Fatalf("status: %d\n%s", code, out)
	}
	code, out, _ = invoke(t, "status", "--json")
	var st map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st["time"] != nil {
		t.Fatalf("status --json: %d %s", code, out)
	}
}

// TestRunOnceSaysWhatIsNotPickedUp: a sealed batch that is a symlink or has
// a '_' or '.' name is never committed nor touched, and run --once says so
// in one line each (it used to print nothing and exit 0).
func TestRunOnceSaysWhatIsNotPickedUp(t *testing.T) {
	t.Setenv("LAKEFS_STORE", "file://"+t.TempDir())
	if code, _, stderr := invoke(t, "init", "--ranks", "1"); code != 0 {
		t.Fatal(stderr)
	}
	staging, elsewhere := t.TempDir(), t.TempDir()
	stageBatch(t, elsewhere, "real", 1)
	if err := os.Symlink(filepath.Join(elsewhere, "real"), filepath.Join(staging, "linked")); err != nil {
		t.Fatal(err)
	}
	stageBatch(t, staging, "_b", 1)
	stageBatch(t, staging, ".c", 1)
	code, out, stderr := invoke(t, "run", "--staging", staging, "--producer-id", "p0", "--once")
	for _, want := range []string{"linked not picked up: it is a symlink", "_b not picked up: names beginning with", ".c not picked up: names beginning with"} {
		if !strings.Contains(out, want) {
			t.Errorf("stdout %q lacks %q", out, want)
		}
	}
	if code != 0 || strings.Count(out, "\n") != 3 {
		t.Fatalf("run: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// TestCheckpointSaysWhatItRecorded: checkpoint prints "recorded" only when
// it wrote a version; a step gc reclaimed past exits 1 with one line; an
// older-than-recorded step says it wrote nothing.
func TestCheckpointSaysWhatItRecorded(t *testing.T) {
	t.Setenv("LAKEFS_STORE", "file://"+t.TempDir())
	if code, _, stderr := invoke(t, "init", "--ranks", "1", "--retain-checkpoints", "1"); code != 0 {
		t.Fatal(stderr)
	}
	staging := t.TempDir()
	for _, b := range []string{"b0", "b1", "b2", "b3", "b4", "b5"} {
		stageBatch(t, staging, b, 1)
	}
	if code, _, stderr := invoke(t, "run", "--staging", staging, "--producer-id", "p0", "--once"); code != 0 {
		t.Fatal(stderr)
	}
	for _, args := range [][]string{{"checkpoint", "--step", "2"}, {"checkpoint", "--step", "4"}, {"gc", "--grace", "0s"}} {
		if code, _, stderr := invoke(t, args...); code != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
	}
	cases := []struct {
		step string
		code int
		out  string
		err  string
	}{
		{"1", 1, "", "gc has reclaimed every step below 5"},
		{"4", 0, "already recorded; nothing written", ""},
		{"5", 0, "checkpoint at step 5 recorded (version", ""},
	}
	for _, c := range cases {
		code, out, stderr := invoke(t, "checkpoint", "--step", c.step)
		if code != c.code || !strings.Contains(out, c.out) || !strings.Contains(stderr, c.err) || strings.Count(out+stderr, "\n") != 1 {
			t.Errorf("checkpoint --step %s: exit %d, stdout %q, stderr %q; want exit %d saying %q%q", c.step, code, out, stderr, c.code, c.out, c.err)
		}
	}
}

// TestRunOnceRejectedNotMoved: when _rejected cannot take a rejected batch
// (a full disk; here a file in its place), run --once's last line says it
// stays staged, not that it is in _rejected (issue 32 item 15).
func TestRunOnceRejectedNotMoved(t *testing.T) {
	t.Setenv("LAKEFS_STORE", "file://"+t.TempDir())
	staging := t.TempDir()
	if code, _, stderr := invoke(t, "init", "--ranks", "2"); code != 0 {
		t.Fatal(stderr)
	}
	stageBatch(t, staging, "a", 1) // rank-1 missing
	if err := os.WriteFile(filepath.Join(staging, "_rejected"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := invoke(t, "run", "--staging", staging, "--producer-id", "p0", "--once")
	if code != 1 || !strings.Contains(out, "it stays staged") || !strings.Contains(stderr, "1 of 1 batches rejected; they could not be moved") ||
		strings.Contains(stderr, "they are in") {
		t.Fatalf("run: %d %q %q", code, out, stderr)
	}
	if _, err := os.Stat(filepath.Join(staging, "a", "_SEALED")); err != nil {
		t.Fatalf("the batch that could not be moved: %v", err)
	}
}

// TestProgressStartsAtStreamHead: run's progress line reports the stream's
// head before this run commits anything, not -1 (issue 32 item 17).
func TestProgressStartsAtStreamHead(t *testing.T) {
	url := "file://" + t.TempDir()
	staging := t.TempDir()
	t.Setenv("LAKEFS_STORE", url)
	if code, _, stderr := invoke(t, "init", "--ranks", "1"); code != 0 {
		t.Fatal(stderr)
	}
	for _, b := range []string{"a", "b", "c", "d"} {
		stageBatch(t, staging, b, 1)
	}
	if code, _, stderr := invoke(t, "run", "--staging", staging, "--producer-id", "p0", "--once"); code != 0 {
		t.Fatal(stderr)
	}
	s, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	l, err := txn.Open(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	p := newProgress(&buf, "log", newLogger(&buf, false), streamHead(t.Context(), l))
	p.batch(stage.BatchEvent{Name: "e", Waiting: "held back by --max-lead"})
	p.report(time.Second)
	p.stop()
	if !strings.Contains(buf.String(), "head=3") {
		t.Fatalf("progress of a run that committed nothing yet: %q; want head=3", buf.String())
	}
}

// TestHelpNamesEveryStore (issue 55 item 15): --help names every store
// kind and where each takes its credentials from, not file:// and s3://
// alone.
func TestHelpNamesEveryStore(t *testing.T) {
	code, out, _ := invoke(t, "--help")
	for _, want := range []string{"file:///", "s3://", "gs://", "az://", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("lakefs-produce --help (exit %d) does not name %s", code, want)
		}
	}
}
