package stage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/stage"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// write creates files (path -> content) under dir.
func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// batch stages a valid two-rank batch, sealed.
func batch(t *testing.T, staging, name string) {
	t.Helper()
	write(t, filepath.Join(staging, name), map[string]string{
		"rank-0/a.bin":     name + "/0/a",
		"rank-0/sub/b.bin": name + "/0/b",
		"rank-1/a.bin":     name + "/1/a",
		"meta.json":        `{"batch":"` + name + `"}`,
		stage.Sealed:       "",
	})
}

type env struct {
	staging string
	store   store.Store
	log     *txn.Log
}

func newEnv(t *testing.T) *env {
	s, err := store.NewFile(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	l, err := txn.Create(t.Context(), s, txn.CreateOptions{Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	return &env{staging: t.TempDir(), store: s, log: l}
}

// run runs one `run --once` pass and returns the rejected batch reasons.
func (e *env) run(t *testing.T, id string) map[string]string {
	t.Helper()
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	rejected := map[string]string{}
	err = stage.Run(t.Context(), stage.RunOptions{
		Store: e.store, Log: e.log, Tree: tree, ProducerID: id, Once: true,
		OnBatch: func(b stage.BatchEvent) {
			if b.Rejected != "" {
				rejected[b.Name] = b.Rejected
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rejected
}

// steps maps committed batch names to steps.
func (e *env) steps(t *testing.T) map[string]int64 {
	t.Helper()
	st, err := e.log.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, tgb := range st.Steps {
		if _, dup := out[tgb.Batch]; dup {
			t.Fatalf("batch %s committed twice", tgb.Batch)
		}
		out[tgb.Batch] = tgb.Step
	}
	return out
}

func TestRejectionReasons(t *testing.T) {
	cases := []struct {
		name   string
		make   func(t *testing.T, dir string)
		reason string
	}{
		{"missing-rank", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", stage.Sealed: ""})
		}, "missing rank directory rank-1"},
		{"extra-rank", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", "rank-1/a": "x", "rank-2/a": "x", stage.Sealed: ""})
		}, "extra rank directory \"rank-2\""},
		{"malformed-rank", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", "rank-1/a": "x", "rank-01/a": "x", stage.Sealed: ""})
		}, "extra directory \"rank-01\""},
		{"empty-rank", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", stage.Sealed: ""})
			if err := os.MkdirAll(filepath.Join(dir, "rank-1", "empty-subdir"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "rank directory rank-1 is empty"},
		{"symlink", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", "rank-1/a": "x", stage.Sealed: ""})
			if err := os.Symlink("/etc/passwd", filepath.Join(dir, "rank-1", "link")); err != nil {
				t.Fatal(err)
			}
		}, "symlink"},
		{"fifo", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", "rank-1/a": "x", stage.Sealed: ""})
			if err := syscall.Mkfifo(filepath.Join(dir, "rank-0", "pipe"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "rank-0/pipe is a fifo"},
		{"nested-fifo", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", "rank-1/sub/a": "x", stage.Sealed: ""})
			if err := syscall.Mkfifo(filepath.Join(dir, "rank-1", "sub", "pipe"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, "rank-1/sub/pipe is a fifo"},
		{"symlinked-rank", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", "elsewhere/a": "x", stage.Sealed: ""})
			if err := os.Symlink("elsewhere", filepath.Join(dir, "rank-1")); err != nil {
				t.Fatal(err)
			}
		}, "rank-1 is a symlink: a rank directory must be a real directory"},
		{"writers-reason", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", "rank-1/a": "x", stage.Reason: "the writer's own", stage.Sealed: ""})
		}, "_REASON at the top of a batch is reserved"},
		{"device", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", "rank-1/a": "x", stage.Sealed: ""})
			// /dev/null's numbers: 1,3.
			if err := syscall.Mknod(filepath.Join(dir, "rank-0", "null"), syscall.S_IFCHR|0o644, 1<<8|3); err != nil {
				t.Fatalf("mknod (the tests run as root): %v", err)
			}
		}, "rank-0/null is a device"},
		{"rank-file", func(t *testing.T, dir string) {
			write(t, dir, map[string]string{"rank-0/a": "x", "rank-1/a": "x", "rank-9": "x", stage.Sealed: ""})
		}, "rank-9 is a file, not a directory"},
	}
	e := newEnv(t)
	for _, c := range cases {
		c.make(t, filepath.Join(e.staging, c.name))
	}
	batch(t, e.staging, "zz-valid")
	rejected := e.run(t, "p")

	for _, c := range cases {
		reason, ok := rejected[c.name]
		if !ok {
			t.Errorf("%s: not rejected", c.name)
			continue
		}
		if !strings.Contains(reason, c.reason) {
			t.Errorf("%s: reason %q does not say %q", c.name, reason, c.reason)
		}
		// Moved whole, with the reason, never deleted; a writer's own
		// _REASON is kept and ours goes beside it.
		dir := filepath.Join(e.staging, stage.RejectedDir, c.name)
		reasonFile := stage.Reason
		if c.name == "writers-reason" {
			reasonFile += ".1"
			if b, err := os.ReadFile(filepath.Join(dir, stage.Reason)); string(b) != "the writer's own" {
				t.Errorf("the writer's %s was overwritten: %q %v", stage.Reason, b, err)
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, reasonFile))
		if err != nil || !strings.Contains(string(b), c.reason) {
			t.Errorf("%s: %s: %q %v", c.name, stage.Reason, b, err)
		}
		if _, err := os.Lstat(filepath.Join(dir, stage.Sealed)); err != nil {
			t.Errorf("%s: rejected batch lost files: %v", c.name, err)
		}
		if _, err := os.Lstat(filepath.Join(e.staging, c.name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: still in the staging tree", c.name)
		}
	}
	// The producer went on: the valid batch is the one step.
	steps := e.steps(t)
	if len(steps) != 1 || steps["zz-valid"] != 0 {
		t.Fatalf("committed %v, want only zz-valid as step 0", steps)
	}
}

func TestBelowCursorRejected(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b002")
	e.run(t, "p")
	// A batch sorting before the committed cursor appears later: committing
	// it would break name order, so it is rejected, not committed.
	batch(t, e.staging, "b001")
	batch(t, e.staging, "b003")
	rejected := e.run(t, "p")
	if r := rejected["b001"]; !strings.Contains(r, "at or below this producer's cursor") {
		t.Fatalf("b001: %q", r)
	}
	if steps := e.steps(t); len(steps) != 2 || steps["b002"] != 0 || steps["b003"] != 1 {
		t.Fatalf("steps %v", steps)
	}
}

// logGate holds every create under _log/ once data was uploaded, until
// open is closed: an appended batch stays in flight.
type logGate struct {
	store.Store
	uploaded, held atomic.Bool
	open           chan struct{}
}

func (s *logGate) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.HasPrefix(key, "data/") {
		defer s.uploaded.Store(true)
	}
	if strings.HasPrefix(key, "_log/") && s.uploaded.Load() {
		s.held.Store(true)
		select {
		case <-s.open:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Store.Create(ctx, key, r, size)
}

func (s *logGate) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.HasPrefix(key, "data/") {
		defer s.uploaded.Store(true)
	}
	return s.Store.Put(ctx, key, r, size)
}

// TestBatchCommittedWhileListedNotRejected (found by the simulation,
// seeds 1004352 and 1007544): a pass lists a batch still in flight; its
// commit lands and the cleaner removes it before the pass reaches it.
// The pass must pass over it: before, it found the batch neither in
// flight nor among those committed at start, at the cursor, and reported
// it rejected as "never committed" (a rejected event, a warning) though
// it was committed once.
func TestBatchCommittedWhileListedNotRejected(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b000")
	gate := &logGate{Store: e.store, open: make(chan struct{})}
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	committed := make(chan struct{})
	var once sync.Once
	var raced atomic.Bool
	var scansAfter atomic.Int64
	stage.SetCrashPoints(tree, func(point string) {
		if point != "scanned" {
			return
		}
		if raced.Load() {
			scansAfter.Add(1)
			return
		}
		if !gate.held.Load() {
			return
		}
		// This pass listed b000 while its commit is held: let the commit
		// land and the cleaner remove b000 before the pass goes on.
		raced.Store(true)
		close(gate.open)
		select {
		case <-committed:
		case <-time.After(30 * time.Second):
			t.Error("b000's commit never landed")
		}
	})
	var mu sync.Mutex
	var rejected []string
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(ctx, stage.RunOptions{
			Store: gate, Log: &txn.Log{Store: gate, Config: e.log.Config}, Tree: tree, ProducerID: "p", Poll: 5 * time.Millisecond,
			OnBatch: func(b stage.BatchEvent) {
				switch {
				case b.Rejected != "":
					mu.Lock()
					rejected = append(rejected, b.Name+": "+b.Rejected)
					mu.Unlock()
				case b.Name == "b000" && b.Step >= 0:
					once.Do(func() { close(committed) })
				}
			},
		})
	}()
	eventually(t, "two passes after the one that listed b000 in flight", func() bool { return scansAfter.Load() >= 2 })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(rejected) != 0 {
		t.Fatalf("a batch committed while its pass ran was reported rejected: %v", rejected)
	}
	if steps := e.steps(t); len(steps) != 1 || steps["b000"] != 0 {
		t.Fatalf("steps %v; want b000 once, at step 0", steps)
	}
	if _, err := os.Stat(filepath.Join(e.staging, stage.RejectedDir, "b000")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("b000 in %s: %v", stage.RejectedDir, err)
	}
}

// TestCommittedBatchRemovedNotRecommitted: the crash window between a
// durable commit and the batch's removal. The batch reappearing under its
// name (as it would after such a crash) is removed, not committed again.
func TestCommittedBatchRemovedNotRecommitted(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b001")
	batch(t, e.staging, "b002")
	e.run(t, "p")
	batch(t, e.staging, "b002") // "not yet removed"
	batch(t, e.staging, "b003")
	// A Remove interrupted after its rename leaves a dot directory.
	write(t, filepath.Join(e.staging, ".b001.done"), map[string]string{"rank-0/a": "x"})
	if rejected := e.run(t, "p"); len(rejected) != 0 {
		t.Fatalf("rejected %v", rejected)
	}
	if steps := e.steps(t); len(steps) != 3 || steps["b003"] != 2 {
		t.Fatalf("steps %v", steps)
	}
	left, _ := os.ReadDir(e.staging)
	if len(left) != 1 || left[0].Name() != stage.LockFile {
		t.Fatalf("staging not empty: %v", left)
	}
}

func TestUnsealedUntouched(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b001")
	write(t, filepath.Join(e.staging, "b002"), map[string]string{"rank-0/a": "partial", "rank-1/a": "x"})
	batch(t, e.staging, "b003")
	write(t, filepath.Join(e.staging, "_private"), map[string]string{"rank-0/a": "x", stage.Sealed: ""})
	write(t, filepath.Join(e.staging, ".hidden"), map[string]string{"rank-0/a": "x", stage.Sealed: ""})
	e.run(t, "p")
	if steps := e.steps(t); len(steps) != 2 {
		t.Fatalf("steps %v", steps)
	}
	for _, p := range []string{"b002/rank-0/a", "_private/rank-0/a", ".hidden/rank-0/a"} {
		if _, err := os.Stat(filepath.Join(e.staging, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(e.staging, "b002/rank-0/a")); string(b) != "partial" {
		t.Fatalf("unsealed batch changed: %q", b)
	}
}

func TestStagedBytesCommitted(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b001")
	e.run(t, "p")
	st, err := e.log.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tgb := st.Steps[0]
	want := map[string]string{"rank-0/a.bin": "b001/0/a", "rank-0/sub/b.bin": "b001/0/b", "rank-1/a.bin": "b001/1/a", "meta.json": `{"batch":"b001"}`}
	got := map[string]string{}
	ranks, shared, err := e.log.Packs(context.Background(), tgb)
	if err != nil {
		t.Fatal(err)
	}
	read := func(prefix string, p *txn.Pack) {
		data, err := e.store.GetRange(context.Background(), p.Key, p.Off, p.Size)
		if err != nil {
			t.Fatal(err)
		}
		if err := txn.VerifyPack(p, data, e.log.Config.ChunkSize); err != nil {
			t.Fatal(err)
		}
		for _, f := range p.Files {
			got[prefix+f.Name] = string(data[f.Off : f.Off+f.Size])
		}
	}
	read("rank-0/", ranks[0])
	read("rank-1/", ranks[1])
	read("", shared)
	if len(got) != len(want) {
		t.Fatalf("files %v", got)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q", k, got[k], v)
		}
	}
}

// TestBackPressure: with --max-lead 2 and a consumer that has read step 0,
// the producer commits up to step 2, holds, says why, and goes on by itself
// once the consumer moves.
func TestBackPressure(t *testing.T) {
	e := newEnv(t)
	for _, b := range []string{"b1", "b2", "b3", "b4", "b5", "b6"} {
		batch(t, e.staging, b)
	}
	beat := func(step int64) {
		hb, _ := json.Marshal(txn.Heartbeat{NodeID: "n1", Step: &step, Time: time.Now()})
		if err := store.PutBytes(t.Context(), e.store, txn.HeartbeatKey("n1"), hb); err != nil {
			t.Fatal(err)
		}
	}
	beat(0)
	tree, _ := stage.Open(e.staging)
	waiting := make(chan string, 100)
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(t.Context(), stage.RunOptions{
			Store: e.store, Log: e.log, Tree: tree, ProducerID: "p", Once: true, MaxLead: 2, Poll: 10 * time.Millisecond,
			OnBatch: func(b stage.BatchEvent) {
				if b.Waiting != "" {
					select {
					case waiting <- b.Waiting:
					default:
					}
				}
			},
		})
	}()
	why := <-waiting
	if !strings.Contains(why, "consumer n1") || !strings.Contains(why, "--max-lead 2") {
		t.Fatalf("waiting reason %q", why)
	}
	// What was appended before holding gets committed, and nothing past
	// the lead.
	var st *txn.State
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if st, _ = e.log.Load(t.Context()); st.NextStep() >= 3 {
			break
		}
	}
	time.Sleep(100 * time.Millisecond) // a producer ignoring the lead would commit more meanwhile
	if st, _ = e.log.Load(t.Context()); st.NextStep() != 3 {
		t.Fatalf("held back at next step %d, want 3 (steps 0-2 within the lead of 2 past step 0)", st.NextStep())
	}
	beat(10)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if steps := e.steps(t); len(steps) != 6 {
		t.Fatalf("steps %v", steps)
	}
}

// TestFlakyStore: a store failing 20% of calls and losing 10% of create
// and put responses after applying them: run retries, nothing is lost or
// committed twice, and the staging tree ends empty.
func TestFlakyStore(t *testing.T) {
	e := newEnv(t)
	faulty := store.NewFaulty(e.store, 3)
	faulty.Set(store.Fault{ErrRate: 0.2})
	faulty.Set(store.Fault{ErrRate: 0.2, LostRate: 0.1}, store.OpCreate, store.OpPut)
	var names []string
	for i := range 30 {
		names = append(names, fmt.Sprintf("b%03d", i))
		batch(t, e.staging, names[i])
	}
	tree, _ := stage.Open(e.staging)
	l := &txn.Log{Store: faulty, Config: e.log.Config}
	err := stage.Run(t.Context(), stage.RunOptions{Store: faulty, Log: l, Tree: tree, ProducerID: "p", Once: true, MaxLead: 1000})
	if err != nil {
		t.Fatal(err)
	}
	steps := e.steps(t)
	for i, n := range names {
		if s, ok := steps[n]; !ok || s != int64(i) {
			t.Fatalf("batch %s: step %d %v; all %v", n, s, ok, steps)
		}
	}
	if left, _ := os.ReadDir(e.staging); len(left) != 1 || left[0].Name() != stage.LockFile {
		t.Fatalf("staging holds %v, want only the lock file", left)
	}
	if faulty.Injected(store.OpCreate)+faulty.Injected(store.OpPut) == 0 {
		t.Fatal("no faults injected")
	}
}

// TestLargeBatchBoundedMemory: a 1 GiB batch is streamed from the staging
// files to the store, never held in memory. The files are sparse, so the
// test costs disk bandwidth, not space in the staging tree.
func TestLargeBatchBoundedMemory(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.staging, "big")
	for r, sizes := range [][]int64{{300 << 20, 212 << 20}, {512 << 20}} {
		for i, n := range sizes {
			p := filepath.Join(dir, fmt.Sprintf("rank-%d", r), fmt.Sprintf("f%d.bin", i))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("head"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(p, n); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(t, dir, map[string]string{stage.Sealed: ""})

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	e.run(t, "p")
	close(stop)
	<-sampled
	if steps := e.steps(t); len(steps) != 1 {
		t.Fatalf("steps %v", steps)
	}
	grew := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("1 GiB batch: heap in use grew by at most %d MiB", grew>>20)
	if grew > 128<<20 {
		t.Fatalf("uploading a 1 GiB batch grew the heap by %d MiB: data is being buffered", grew>>20)
	}
}

// TestReusedNameWithNewContentRejected: a writer that restarts its numbering
// seals new data under a committed name. The new data is never deleted: it
// moves to _rejected with a reason; only the committed content is removed.
func TestReusedNameWithNewContentRejected(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b001")
	batch(t, e.staging, "b002")
	e.run(t, "p")
	write(t, filepath.Join(e.staging, "b001"), map[string]string{
		"rank-0/a.bin": "new data", "rank-1/a.bin": "new", stage.Sealed: "",
	})
	batch(t, e.staging, "b002")                                                                    // same content
	write(t, filepath.Join(e.staging, "b002"), map[string]string{"meta.json": `{"batch":"b00X"}`}) // same size, other bytes
	rejected := e.run(t, "p")
	for _, n := range []string{"b001", "b002"} {
		if !strings.Contains(rejected[n], "already committed as step") {
			t.Fatalf("%s: reason %q", n, rejected[n])
		}
	}
	if !strings.Contains(rejected["b002"], "CRC32C") {
		t.Fatalf("b002: reason %q does not name the CRC", rejected["b002"])
	}
	b, err := os.ReadFile(filepath.Join(e.staging, stage.RejectedDir, "b001", "rank-0", "a.bin"))
	if err != nil || string(b) != "new data" {
		t.Fatalf("new data lost: %q %v", b, err)
	}
	if steps := e.steps(t); len(steps) != 2 {
		t.Fatalf("steps %v", steps)
	}
}

// TestSecondProducerRefused: a staging directory belongs to one producer;
// a second one (another id) is refused, naming the holder, and commits
// nothing.
func TestSecondProducerRefused(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b001")
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := tree.Lock("first")
	if err != nil {
		t.Fatal(err)
	}
	err = stage.Run(t.Context(), stage.RunOptions{Store: e.store, Log: e.log, Tree: tree, ProducerID: "second", Once: true})
	want := fmt.Sprintf("producer first (pid %d)", os.Getpid())
	if !errors.Is(err, stage.ErrLocked) || !strings.Contains(err.Error(), want) {
		t.Fatalf("second producer: %v, want ErrLocked naming %q", err, want)
	}
	if steps := e.steps(t); len(steps) != 0 {
		t.Fatalf("the refused producer committed %v", steps)
	}
	unlock()
	e.run(t, "second")
	if steps := e.steps(t); len(steps) != 1 {
		t.Fatalf("after the holder left: steps %v", steps)
	}
}

// TestNamesFORMATAllows: what docs/FORMAT.md allows is committed: a nested
// path over 255 bytes in all (each element within 255), ".." inside a
// name; a directory named _SEALED does not seal a batch.
func TestNamesFORMATAllows(t *testing.T) {
	e := newEnv(t)
	nested := strings.Repeat("d", 200) + "/" + strings.Repeat("e", 200) + "/f.bin"
	write(t, filepath.Join(e.staging, "b001"), map[string]string{
		"rank-0/" + nested: "x", "rank-1/v1..v2.txt": "y", stage.Sealed: "",
	})
	write(t, filepath.Join(e.staging, "b002"), map[string]string{"rank-0/a": "x", "rank-1/a": "y", stage.Sealed + "/oops": ""})
	if rejected := e.run(t, "p"); len(rejected) != 0 {
		t.Fatalf("rejected %v", rejected)
	}
	if steps := e.steps(t); len(steps) != 1 || steps["b001"] != 0 {
		t.Fatalf("steps %v, want only b001 (b002 is not sealed)", steps)
	}
	if _, err := os.Stat(filepath.Join(e.staging, "b002", "rank-0", "a")); err != nil {
		t.Fatalf("the unsealed batch was touched: %v", err)
	}
}

// sharedNames lists the step-level file names committed as step.
func (e *env) sharedNames(t *testing.T, step int64) []string {
	t.Helper()
	st, err := e.log.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.log.Pack(t.Context(), st.Steps[step-st.LiveFrom], -1)
	if err != nil || p == nil {
		t.Fatalf("step %d's step-level pack: %v %v", step, p, err)
	}
	var names []string
	for _, f := range p.Files {
		names = append(names, f.Name)
	}
	return names
}

// TestUnderscoreNamesCommitted: step-level names beginning with '_' are
// data, committed like any other; only the top-level _SEALED is not.
// Before, _meta.json and _extra/f were dropped and the batch deleted.
func TestUnderscoreNamesCommitted(t *testing.T) {
	e := newEnv(t)
	write(t, filepath.Join(e.staging, "b1"), map[string]string{
		"rank-0/x": "0", "rank-1/_x": "1", "shared.txt": "s", "_meta.json": "{}", "_extra/f": "f", stage.Sealed: "",
	})
	if rejected := e.run(t, "p"); len(rejected) != 0 {
		t.Fatalf("rejected %v", rejected)
	}
	got := strings.Join(e.sharedNames(t, 0), " ")
	if got != "_extra/f _meta.json shared.txt" {
		t.Fatalf("step-level files committed: %q, want _extra/f _meta.json shared.txt", got)
	}
}

// TestSkippedEntriesReported: a sealed batch that is a symlink, or whose
// name begins with '_' or '.', is never picked up and never touched, and
// the run says so once per entry (it used to say nothing).
func TestSkippedEntriesReported(t *testing.T) {
	e := newEnv(t)
	elsewhere := t.TempDir()
	batch(t, elsewhere, "real")
	if err := os.Symlink(filepath.Join(elsewhere, "real"), filepath.Join(e.staging, "linked")); err != nil {
		t.Fatal(err)
	}
	batch(t, e.staging, "_under")
	batch(t, e.staging, ".dot")
	batch(t, e.staging, "b1")
	// Issue 32 item 17: a directory _SEALED was never picked up, silently.
	batch(t, e.staging, "dirseal")
	if err := os.Remove(filepath.Join(e.staging, "dirseal", stage.Sealed)); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(e.staging, "dirseal", stage.Sealed), 0o755); err != nil {
		t.Fatal(err)
	}
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	skipped := map[string]string{}
	err = stage.Run(t.Context(), stage.RunOptions{
		Store: e.store, Log: e.log, Tree: tree, ProducerID: "p", Once: true,
		OnBatch: func(b stage.BatchEvent) {
			if b.Skipped != "" {
				skipped[b.Name] += b.Skipped
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"linked": "is a symlink", "_under": "beginning with '.' or '_'", ".dot": "beginning with '.' or '_'",
		"dirseal": "its _SEALED is a directory, not a regular file"}
	for n, says := range want {
		if !strings.Contains(skipped[n], says) {
			t.Errorf("%s: reported %q, want it to say %q", n, skipped[n], says)
		}
		if _, err := os.Stat(filepath.Join(e.staging, n, "rank-0", "a.bin")); err != nil {
			t.Errorf("%s was touched: %v", n, err)
		}
	}
	if len(skipped) != len(want) {
		t.Errorf("reported %v, want exactly %v", skipped, want)
	}
	if steps := e.steps(t); len(steps) != 1 || steps["b1"] != 0 {
		t.Fatalf("steps %v, want only b1", steps)
	}
}

// tmpfs mounts a small tmpfs (the tests run as root) and unmounts it when
// the test ends.
func tmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatalf("mount tmpfs (the tests run as root): %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill takes every free block (and with inodes every free inode) of the
// filesystem holding dir, in files named fill-*, so that any write (and
// any new file) fails with ENOSPC.
func fill(t *testing.T, dir string, inodes bool) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, "fill-blocks"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 64<<10)
	for err == nil {
		_, err = f.Write(chunk)
	}
	f.Close()
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("filling %s: %v", dir, err)
	}
	for i := 0; inodes; i++ {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("fill-%d", i)))
		if errors.Is(err, syscall.ENOSPC) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
}

// TestFullStagingDiskNoInodeFirstStart: with no inode free the first run
// cannot create _lock; it still takes its lock (on the directory) and
// commits, and a second producer is still refused (issue 32 item 15:
// before, "_lock: no space left on device" stopped it).
func TestFullStagingDiskNoInodeFirstStart(t *testing.T) {
	e := newEnv(t)
	e.staging = tmpfs(t, "size=1m,nr_inodes=64")
	batch(t, e.staging, "b1")
	fill(t, e.staging, true)
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := tree.Lock("first")
	if err != nil {
		t.Fatalf("lock with no inode free: %v", err)
	}
	if _, err := tree.Lock("second"); !errors.Is(err, stage.ErrLocked) {
		t.Fatalf("a second producer: %v; want ErrLocked", err)
	}
	unlock()
	if rejected := e.run(t, "p"); len(rejected) != 0 {
		t.Fatalf("rejected %v", rejected)
	}
	if steps := e.steps(t); len(steps) != 1 || steps["b1"] != 0 {
		t.Fatalf("steps %v, want b1", steps)
	}
}

// TestFullStagingDisk: on a full staging filesystem (no block, no inode
// free) the producer still takes its lock and commits every valid batch,
// which is what frees the space; an invalid batch that cannot be moved to
// _rejected stays staged, whole, and later batches still commit. Once
// space is free, the next run moves it with its original reason. Before,
// run failed writing _lock, or stopped at writing b2/_REASON.
func TestFullStagingDisk(t *testing.T) {
	e := newEnv(t)
	e.staging = tmpfs(t, "size=1m,nr_inodes=64")
	// The invalid batch sorts first: it is rejected before any commit,
	// whose cleanup frees inodes, so its rejection cannot move it.
	batch(t, e.staging, "b1")
	write(t, filepath.Join(e.staging, "a2"), map[string]string{"rank-0/a": "only rank 0", stage.Sealed: ""})
	batch(t, e.staging, "b3")
	write(t, e.staging, map[string]string{stage.LockFile: ""}) // left by an earlier run
	fill(t, e.staging, true)

	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	var unmoved []string
	err = stage.Run(t.Context(), stage.RunOptions{
		Store: e.store, Log: e.log, Tree: tree, ProducerID: "p", Once: true,
		OnBatch: func(b stage.BatchEvent) {
			if b.Unmoved != "" {
				unmoved = append(unmoved, b.Name)
			}
		},
	})
	if err != nil {
		t.Fatalf("run on a full staging disk: %v", err)
	}
	if steps := e.steps(t); len(steps) != 2 || steps["b1"] != 0 || steps["b3"] != 1 {
		t.Fatalf("steps %v, want b1 and b3", steps)
	}
	if fmt.Sprint(unmoved) != "[a2]" {
		t.Fatalf("reported unmoved %v, want [a2]", unmoved)
	}
	if b, err := os.ReadFile(filepath.Join(e.staging, "a2", "rank-0", "a")); string(b) != "only rank 0" {
		t.Fatalf("the unmovable batch was touched: %q %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(e.staging, "a2", stage.Reason)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a partial %s was left in the staged batch: %v", stage.Reason, err)
	}

	ents, _ := os.ReadDir(e.staging)
	for _, ent := range ents {
		if strings.HasPrefix(ent.Name(), "fill-") {
			os.Remove(filepath.Join(e.staging, ent.Name()))
		}
	}
	rejected := e.run(t, "p")
	if !strings.Contains(rejected["a2"], "missing rank directory rank-1") {
		t.Fatalf("a2 once space is free: %q, want its own reason, not the cursor's", rejected["a2"])
	}
	b, err := os.ReadFile(filepath.Join(e.staging, stage.RejectedDir, "a2", stage.Reason))
	if err != nil || !strings.Contains(string(b), "missing rank directory") {
		t.Fatalf("a2's %s: %q %v", stage.Reason, b, err)
	}
}

// TestFullStagingDiskFirstStart: the first run on a staging filesystem
// whose blocks are all taken (the lock file does not exist yet) takes the
// lock and commits. Before, it exited 1 writing _lock.
func TestFullStagingDiskFirstStart(t *testing.T) {
	e := newEnv(t)
	e.staging = tmpfs(t, "size=1m")
	batch(t, e.staging, "b1")
	fill(t, e.staging, false)
	if rejected := e.run(t, "p"); len(rejected) != 0 {
		t.Fatalf("rejected %v", rejected)
	}
	if steps := e.steps(t); len(steps) != 1 || steps["b1"] != 0 {
		t.Fatalf("steps %v, want b1", steps)
	}
	if _, err := os.Stat(filepath.Join(e.staging, stage.LockFile)); err != nil {
		t.Fatalf("the lock file: %v", err)
	}
}

// TestBatchMovedAwayWhileRead: a writer that moves a sealed batch away
// while run reads it (here: while run is held back, after it listed the
// batch) costs that batch only: run says so and goes on; before, it exited
// 1 (issue 32 item 17).
func TestBatchMovedAwayWhileRead(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b1")
	batch(t, e.staging, "b2")
	if rejected := e.run(t, "p"); len(rejected) != 0 {
		t.Fatal(rejected)
	}
	heartbeat := func(step int64) {
		b, err := json.Marshal(txn.Heartbeat{NodeID: "c", Step: &step, Time: time.Now().UTC()})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.PutBytes(t.Context(), e.store, txn.HeartbeatKey("c"), b); err != nil {
			t.Fatal(err)
		}
	}
	heartbeat(0) // next step 2 is 2 ahead: held with --max-lead 1
	batch(t, e.staging, "b3")
	batch(t, e.staging, "b4")
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	elsewhere := filepath.Join(t.TempDir(), "b3")
	moved := false
	events := map[string]stage.BatchEvent{}
	err = stage.Run(t.Context(), stage.RunOptions{
		Store: e.store, Log: e.log, Tree: tree, ProducerID: "p", Once: true, MaxLead: 1, Poll: 10 * time.Millisecond,
		OnBatch: func(b stage.BatchEvent) {
			if b.Waiting != "" && !moved {
				moved = true
				if err := os.Rename(filepath.Join(e.staging, "b3"), elsewhere); err != nil {
					t.Error(err)
				}
				heartbeat(10)
				return
			}
			events[b.Name] = b
		},
	})
	if err != nil {
		t.Fatalf("run with a batch moved away mid-read: %v", err)
	}
	if !moved || !strings.Contains(events["b3"].Skipped, "moved or removed while it was read") {
		t.Fatalf("b3: %+v (moved %v); want it reported as gone", events["b3"], moved)
	}
	if steps := e.steps(t); len(steps) != 3 || steps["b4"] != 2 {
		t.Fatalf("steps %v; want b1, b2 and b4", steps)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, stage.Sealed)); err != nil {
		t.Fatalf("the moved batch: %v", err)
	}
}

// TestReclaimedBatchRecognised: a batch committed (by this producer or by
// another that included it) and reclaimed by gc while its producer was
// down, before its staging directory was removed, is recognised by
// content from its object's self-description while gc keeps the object
// (the grace period), and removed, not rejected; one reusing the name
// with other content is still rejected, and so is one whose object gc
// has deleted (its content cannot be compared any more).
func TestReclaimedBatchRecognised(t *testing.T) {
	ctx := t.Context()
	e := newEnv(t)
	var err error
	if e.store, err = store.NewFile(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if e.log, err = txn.Create(ctx, e.store, txn.CreateOptions{Ranks: 2, RetainCheckpoints: 1}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b001", "b002", "b003", "b004"} {
		batch(t, e.staging, n)
	}
	e.run(t, "p")
	// Killed before removing: b002, b003 and b004 are staged again; b004
	// with other bytes.
	batch(t, e.staging, "b002")
	batch(t, e.staging, "b003")
	batch(t, e.staging, "b004")
	write(t, filepath.Join(e.staging, "b004"), map[string]string{"rank-1/a.bin": "b004/1/X"})
	if _, err := txn.RecordCheckpoint(ctx, e.log, 3, nil); err != nil {
		t.Fatal(err)
	}
	gc := func(grace time.Duration) {
		if _, err := txn.GC(ctx, e.log, txn.GCOptions{Grace: grace, Now: time.Now}); err != nil {
			t.Fatal(err)
		}
	}
	gc(time.Hour) // reclaims steps 0-3, keeps their objects an hour
	if st, _ := e.log.Load(ctx); st.LiveFrom != 4 {
		t.Fatalf("live from %d after gc; want every step reclaimed", st.LiveFrom)
	}
	rejected := e.run(t, "p")
	if len(rejected) != 1 || !strings.Contains(rejected["b004"], "as a step since reclaimed with other content") {
		t.Fatalf("rejected %v; want only b004, for its other content", rejected)
	}
	for _, n := range []string{"b002", "b003"} {
		if _, err := os.Stat(filepath.Join(e.staging, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s, committed and reclaimed, is still staged (%v)", n, err)
		}
	}
	// Once gc deleted the objects, the print the producer state keeps of
	// each recent batch still proves a leftover committed (the soak found
	// such leftovers rejected: committed, the producer killed before it
	// removed them, the step reclaimed and deleted while it was down), and
	// still tells a reused name with other bytes.
	batch(t, e.staging, "b003")
	batch(t, e.staging, "b001")
	write(t, filepath.Join(e.staging, "b001"), map[string]string{"rank-0/a.bin": "b001/0/Y"})
	gc(0)
	if n := countData(t, e.store); n != 0 {
		t.Fatalf("%d data objects left after gc; the test needs them deleted", n)
	}
	rejected = e.run(t, "p")
	if len(rejected) != 1 || !strings.Contains(rejected["b001"], "as a step since reclaimed with other content") {
		t.Fatalf("rejected %v; want only b001, for its other content", rejected)
	}
	if _, err := os.Stat(filepath.Join(e.staging, "b003")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("b003, committed and its object deleted, is still staged (%v)", err)
	}
	if st, _ := e.log.Load(ctx); st.NextStep() != 4 {
		t.Errorf("next step %d; want 4: nothing committed twice", st.NextStep())
	}
}

// countData counts the stream's data objects.
func countData(t *testing.T, s store.Store) int {
	t.Helper()
	n := 0
	if err := store.Walk(t.Context(), s, "data/", "", func(store.Info) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestRejectKillAtAnyPoint: at every point a kill could interrupt Reject,
// the batch is either staged exactly as the writer left it (no _REASON of
// ours in it) or moved whole under _rejected, and no _REASON anywhere is
// empty or partial: a kill between writing the reason and moving the
// batch once left a valid batch rejected with an empty _REASON.
func TestRejectKillAtAnyPoint(t *testing.T) {
	dir := t.TempDir()
	tree, err := stage.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	const reason = "missing rank directory rank-1"
	write(t, filepath.Join(dir, "b1"), map[string]string{"rank-0/a": "x", stage.Sealed: ""})
	var points []string
	stage.SetCrashPoints(tree, func(point string) {
		points = append(points, point)
		staged := filepath.Join(dir, "b1")
		if _, err := os.Lstat(staged); err == nil {
			if _, err := os.Lstat(filepath.Join(staged, stage.Reason)); err == nil {
				t.Errorf("killed at %q: the staged batch holds a _REASON; on restart it would be rejected as the writer's", point)
			}
		}
		matches, _ := filepath.Glob(filepath.Join(dir, stage.RejectedDir, "*", stage.Reason+"*"))
		for _, m := range matches {
			if b, err := os.ReadFile(m); err != nil || string(b) != reason+"\n" {
				t.Errorf("killed at %q: %s holds %q (%v), want the whole reason", point, m, b, err)
			}
		}
	})
	dst, err := tree.Reject("b1", reason)
	if err != nil {
		t.Fatal(err)
	}
	if len(points) < 3 {
		t.Fatalf("crash points %q; want the move, the reason's write and its link", points)
	}
	if b, err := os.ReadFile(filepath.Join(dst, stage.Reason)); err != nil || string(b) != reason+"\n" {
		t.Errorf("rejected batch's _REASON: %q, %v", b, err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(dir, stage.RejectedDir, ".reason-*")); len(tmps) > 0 {
		t.Error("the reason's temporary file was left behind")
	}
}

// TestRunWaitsForLock: with WaitForLock, a run that finds the staging
// directory held waits until it is released, then commits; past its
// StartDeadline it fails with ErrLocked; without it, it fails at once.
func TestRunWaitsForLock(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b1")
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := tree.Lock("stopped")
	if err != nil {
		t.Fatal(err)
	}
	opts := stage.RunOptions{Store: e.store, Log: e.log, Tree: tree, ProducerID: "p", Once: true,
		Logger: slog.New(slog.DiscardHandler)}
	if err := stage.Run(t.Context(), opts); !errors.Is(err, stage.ErrLocked) {
		t.Fatalf("without WaitForLock: %v; want ErrLocked at once", err)
	}
	deadlined := opts
	deadlined.WaitForLock, deadlined.StartDeadline = true, time.Now().Add(300*time.Millisecond)
	if err := stage.Run(t.Context(), deadlined); !errors.Is(err, stage.ErrLocked) {
		t.Fatalf("past the start deadline: %v; want ErrLocked", err)
	}
	waiting := opts
	waiting.WaitForLock = true
	done := make(chan error, 1)
	go func() { done <- stage.Run(t.Context(), waiting) }()
	select {
	case err := <-done:
		t.Fatalf("run returned %v while the directory was held", err)
	case <-time.After(time.Second):
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatalf("run after the release: %v", err)
	}
	if steps := e.steps(t); len(steps) != 1 || steps["b1"] != 0 {
		t.Fatalf("steps %v, want b1", steps)
	}
}

// TestFencedWhileHeldBack: a producer held back by --max-lead when a new
// incarnation of its id registers (a rescheduled pod, while this one was
// partitioned) stops with ErrFenced within a few of its back-pressure
// checks. It used to go on holding, with nothing to commit, so its
// committer never learned it was fenced and it kept the staging lock from
// the next incarnation while the consumer stood still (the soak found it).
func TestFencedWhileHeldBack(t *testing.T) {
	e := newEnv(t)
	for _, b := range []string{"b1", "b2", "b3", "b4", "b5"} {
		batch(t, e.staging, b)
	}
	step := int64(0)
	hb, _ := json.Marshal(txn.Heartbeat{NodeID: "n1", Step: &step, Time: time.Now()})
	if err := store.PutBytes(t.Context(), e.store, txn.HeartbeatKey("n1"), hb); err != nil {
		t.Fatal(err)
	}
	tree, _ := stage.Open(e.staging)
	held := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(ctx, stage.RunOptions{
			Store: e.store, Log: e.log, Tree: tree, ProducerID: "p", MaxLead: 1, Poll: 10 * time.Millisecond,
			OnBatch: func(b stage.BatchEvent) {
				if b.Waiting != "" {
					once.Do(func() { close(held) })
				}
			},
		})
	}()
	<-held
	// Held, with its commits done: then a new incarnation registers.
	newer, err := txn.OpenProducer(t.Context(), e.log, txn.ProducerOptions{ID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close(context.Background())
	fenced := time.Now()
	err = <-done
	if !errors.Is(err, txn.ErrFenced) {
		t.Fatalf("run held back, then fenced: %v after %s; want ErrFenced", err, time.Since(fenced).Round(time.Millisecond))
	}
	t.Logf("held back, then fenced: stopped %s after the new incarnation registered: %v", time.Since(fenced).Round(time.Millisecond), err)
}

// TestFencedWhileIdle: a run with nothing staged when a new incarnation of
// its id registers stops with ErrFenced within its idle fence check
// (10 s). Its committer, with nothing to commit, never learned it, so it
// went on polling an empty directory and kept the staging lock from the
// next incarnation (the chaos run's rescheduled zombie found it).
func TestFencedWhileIdle(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b1")
	tree, _ := stage.Open(e.staging)
	committed := make(chan struct{})
	var once sync.Once
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(ctx, stage.RunOptions{
			Store: e.store, Log: e.log, Tree: tree, ProducerID: "p", Poll: 10 * time.Millisecond,
			OnBatch: func(b stage.BatchEvent) {
				if b.Name == "b1" && b.Step >= 0 && b.Rejected == "" {
					once.Do(func() { close(committed) })
				}
			},
		})
	}()
	<-committed
	newer, err := txn.OpenProducer(t.Context(), e.log, txn.ProducerOptions{ID: "p"})
	if err != nil {
		t.Fatal(err)
	}
	defer newer.Close(context.Background())
	fenced := time.Now()
	if err := <-done; !errors.Is(err, txn.ErrFenced) {
		t.Fatalf("an idle run, then fenced: %v after %s; want ErrFenced", err, time.Since(fenced).Round(time.Millisecond))
	}
	t.Logf("idle, then fenced: stopped %s after the new incarnation registered", time.Since(fenced).Round(time.Millisecond))
}
