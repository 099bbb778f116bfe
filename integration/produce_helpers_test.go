package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/stage"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Helpers of the lakefs-produce process tests (produce_crash_test.go): the
// binaries, an external writer process, and checks of what was committed
// against what the writer wrote.

// prdCmdTimeout bounds every child process that is expected to finish.
const prdCmdTimeout = 3 * time.Minute

var prdBuild struct {
	once            sync.Once
	produce, writer string
	err             error
}

// prdBins builds lakefs-produce and the test writer once per test binary
// run. They go to a directory named after this process, so concurrent test
// runs do not clash; directories of processes that are gone are removed.
func prdBins(t testing.TB) (produce, writer string) {
	t.Helper()
	prdBuild.once.Do(func() {
		prdSweepStaleBins()
		dir := filepath.Join(os.TempDir(), fmt.Sprintf("lakestream-prd-bin-%d", os.Getpid()))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			prdBuild.err = err
			return
		}
		_, file, _, _ := runtime.Caller(0)
		prdBuild.produce = filepath.Join(dir, "lakefs-produce")
		prdBuild.writer = filepath.Join(dir, "writer")
		for bin, pkg := range map[string]string{
			prdBuild.produce: "github.com/lakestream/lakestream/cmd/lakefs-produce",
			prdBuild.writer:  "./testdata/writer",
		} {
			cmd := exec.Command("go", "build", "-o", bin, pkg)
			cmd.Dir = filepath.Dir(file)
			if out, err := cmd.CombinedOutput(); err != nil {
				prdBuild.err = fmt.Errorf("go build %s: %w\n%s", pkg, err, out)
				return
			}
		}
	})
	if prdBuild.err != nil {
		t.Fatal(prdBuild.err)
	}
	return prdBuild.produce, prdBuild.writer
}

// prdSweepStaleBins removes the binary directories of earlier test runs
// whose process no longer exists.
func prdSweepStaleBins() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "lakestream-prd-bin-*"))
	for _, d := range dirs {
		pid, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(d), "lakestream-prd-bin-"))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			_ = os.RemoveAll(d)
		}
	}
}

// prdCommand is a child process with its output captured; it dies with the
// test process.
func prdCommand(ctx context.Context, bin string, args ...string) (*exec.Cmd, *prdOutput, *prdOutput) {
	cmd := exec.CommandContext(ctx, bin, args...)
	stdout, stderr := &prdOutput{}, &prdOutput{}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd, stdout, stderr
}

// prdOutput collects a child's output; it can be read, and waited on for
// a string to appear, while the child runs.
type prdOutput struct {
	mu    sync.Mutex
	buf   bytes.Buffer             // GUARDED_BY(mu)
	waits map[string]chan struct{} // GUARDED_BY(mu): closed when the key appears
}

func (o *prdOutput) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf.Write(p)
	for s, ch := range o.waits {
		if bytes.Contains(o.buf.Bytes(), []byte(s)) {
			close(ch)
			delete(o.waits, s)
		}
	}
	return len(p), nil
}

// when returns a channel closed once s has been written.
func (o *prdOutput) when(s string) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ch, ok := o.waits[s]; ok {
		return ch
	}
	ch := make(chan struct{})
	if bytes.Contains(o.buf.Bytes(), []byte(s)) {
		close(ch)
		return ch
	}
	if o.waits == nil {
		o.waits = map[string]chan struct{}{}
	}
	o.waits[s] = ch
	return ch
}

func (o *prdOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// prdStaging makes a staging directory in a fresh temp dir (root) and
// names the writer's manifest beside it.
func prdStaging(t testing.TB) (root, staging, manifest string) {
	t.Helper()
	root = t.TempDir()
	staging = filepath.Join(root, "staging")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	return root, staging, filepath.Join(root, "manifest.jsonl")
}

// prdExec runs bin to completion (bounded by prdCmdTimeout) and returns
// its output and exit status.
func prdExec(t testing.TB, bin string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	stdout, stderr, code, err := prdExecCtx(t.Context(), bin, args...)
	if err != nil {
		t.Fatalf("%s %s: %v\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), err, stderr)
	}
	return stdout, stderr, code
}

// prdExecCtx runs bin to completion under ctx, bounded by prdCmdTimeout,
// and returns its exit status; err is a failure to run it or to finish in
// time (code -1). It never fails the test, so goroutines may call it.
func prdExecCtx(ctx context.Context, bin string, args ...string) (stdout, stderr string, code int, err error) {
	ctx, cancel := context.WithTimeout(ctx, prdCmdTimeout)
	defer cancel()
	cmd, out, errb := prdCommand(ctx, bin, args...)
	runErr := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		code, err = -1, fmt.Errorf("did not finish in %s: %w", prdCmdTimeout, ctx.Err())
	case errors.As(runErr, &ee):
		code = ee.ExitCode()
	case runErr != nil:
		code, err = -1, runErr
	}
	return out.String(), errb.String(), code, err
}

// prdMust runs bin and fails the test unless it exits 0.
func prdMust(t testing.TB, bin string, args ...string) string {
	t.Helper()
	out, errs, code := prdExec(t, bin, args...)
	if code != 0 {
		t.Fatalf("%s %s: exit %d\nstdout:\n%s\nstderr:\n%s", filepath.Base(bin), strings.Join(args, " "), code, out, errs)
	}
	return out
}

// prdProc is a running `lakefs-produce run`.
type prdProc struct {
	cmd    *exec.Cmd
	stderr *prdOutput
	done   chan struct{}
	err    error // valid after done
}

// prdStart starts `lakefs-produce run`. The caller kills it (or waits for
// it) before the test ends.
func prdStart(bin, url, staging, id string, extra ...string) (*prdProc, error) {
	args := append([]string{"run", "--store", url, "--staging", staging, "--producer-id", id, "--progress", "log"}, extra...)
	cmd, _, stderr := prdCommand(context.Background(), bin, args...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting lakefs-produce run: %w", err)
	}
	p := &prdProc{cmd: cmd, stderr: stderr, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// tail is the end of the process's stderr.
func (p *prdProc) tail() string {
	b := p.stderr.String()
	return b[max(0, len(b)-3000):]
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *prdProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// exited reports whether the process has ended.
func (p *prdProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// code is the exit status after done (-1: killed by a signal).
func (p *prdProc) code() int {
	if p.err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	return -1
}

// prdFile is one written file (rank -1: step-level), as the writer's
// manifest records it.
type prdFile struct {
	Rank   int    `json:"rank"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// prdRecord is one batch the writer wrote.
type prdRecord struct {
	Producer string    `json:"producer"`
	Batch    string    `json:"batch"`
	Sealed   bool      `json:"sealed"`
	Files    []prdFile `json:"files"`
	WaitedMS int64     `json:"waited_ms"` // time the writer waited on a full staging disk
}

func prdKey(producer, batch string) string { return producer + "/" + batch }

// prdWrite runs the writer process to completion: count batches from
// number from into each of dirs (producer id -> staging dir).
func prdWrite(t testing.TB, writer, manifest string, dirs map[string]string, from, count int, extra ...string) {
	t.Helper()
	prdMust(t, writer, prdWriterArgs(manifest, dirs, from, count, extra...)...)
}

func prdWriterArgs(manifest string, dirs map[string]string, from, count int, extra ...string) []string {
	args := []string{"-manifest", manifest, "-ranks", "2", "-from", strconv.Itoa(from), "-count", strconv.Itoa(count)}
	for id, dir := range dirs {
		args = append(args, "-dir", id+"="+dir)
	}
	return append(args, extra...)
}

// prdReadManifest reads the writer's manifest, by prdKey.
func prdReadManifest(t testing.TB, path string) map[string]prdRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]prdRecord{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r prdRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("manifest %s: %v", path, err)
		}
		k := prdKey(r.Producer, r.Batch)
		if _, dup := out[k]; dup {
			t.Fatalf("manifest %s: batch %s written twice", path, k)
		}
		out[k] = r
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// prdSealedOnly keeps the sealed batches of a manifest.
func prdSealedOnly(m map[string]prdRecord) map[string]prdRecord {
	out := map[string]prdRecord{}
	for k, r := range m {
		if r.Sealed {
			out[k] = r
		}
	}
	return out
}

// prdSealed lists the sealed batches a producer would pick up in dir.
func prdSealed(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		n := e.Name()
		if strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_") || !e.IsDir() {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, n, "_SEALED")); err == nil {
			names = append(names, n)
		}
	}
	return names, nil
}

// prdCheckStagingEmpty fails unless dir holds nothing at all: every batch
// committed and removed, nothing rejected, no leftovers of a removal.
func prdCheckStagingEmpty(t testing.TB, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if e.Name() == stage.LockFile {
			continue // the producer's lock file stays, by design
		}
		if e.Name() != "_rejected" {
			t.Errorf("staging %s: %s left behind", dir, e.Name())
			continue
		}
		rej, err := os.ReadDir(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rej {
			reason, _ := os.ReadFile(filepath.Join(dir, e.Name(), r.Name(), "_REASON"))
			t.Errorf("staging %s: valid batch %s was rejected: %s", dir, r.Name(), strings.TrimSpace(string(reason)))
		}
	}
}

// prdOpen opens the stream at url in this process (the S3 credentials are
// in the environment s3test.Start set).
func prdOpen(t testing.TB, url string) (store.Store, *txn.Log) {
	t.Helper()
	s, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	l, err := txn.Open(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	return s, l
}

// prdLoad loads the stream's newest state.
func prdLoad(t testing.TB, l *txn.Log) *txn.State {
	t.Helper()
	st, err := l.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// prdStatus is the part of `status --json` the tests read.
type prdStatus struct {
	Head      *int64 `json:"head"`
	FirstStep int64  `json:"first_step"`
	Version   uint64 `json:"version"`
	Ranks     int    `json:"ranks"`
	Live      struct {
		From  *int64 `json:"from"`
		To    *int64 `json:"to"`
		Count int64  `json:"count"`
	} `json:"live"`
	Producers []struct {
		ID     string `json:"id"`
		Epoch  uint64 `json:"epoch"`
		Seq    uint64 `json:"seq"`
		Cursor string `json:"cursor"`
	} `json:"producers"`
	DataBytes int64 `json:"data_bytes"`
}

func prdGetStatus(t testing.TB, bin, url string) prdStatus {
	t.Helper()
	out := prdMust(t, bin, "status", "--store", url, "--json")
	var s prdStatus
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return s
}

// prdCheckStatus checks `status --json` against a stream holding n steps
// from step 0 and, per producer, the seq and cursor its batches give.
func prdCheckStatus(t testing.TB, bin, url string, n int64, producers map[string][]string) {
	t.Helper()
	s := prdGetStatus(t, bin, url)
	if s.Head == nil || *s.Head != n-1 || s.FirstStep != 0 || s.Live.Count != n {
		head := "null"
		if s.Head != nil {
			head = strconv.FormatInt(*s.Head, 10)
		}
		t.Errorf("status: head %s, first step %d, %d live steps; want head %d, first 0, %d live", head, s.FirstStep, s.Live.Count, n-1, n)
	}
	for _, p := range s.Producers {
		batches, ok := producers[p.ID]
		if !ok {
			t.Errorf("status: unknown producer %s", p.ID)
			continue
		}
		if want := slices.Max(batches); p.Seq != uint64(len(batches)) || p.Cursor != want {
			t.Errorf("status: producer %s seq %d cursor %q; want seq %d cursor %q", p.ID, p.Seq, p.Cursor, len(batches), want)
		}
	}
	if len(s.Producers) != len(producers) {
		t.Errorf("status: %d producers, want %d", len(s.Producers), len(producers))
	}
}

// prdCheckCommitted checks the stream's steps against want (by prdKey):
// steps contiguous from the first step; every wanted batch exactly one
// step and nothing else committed; each producer's batches in name order;
// and every file's bytes, read from its pack at the offsets the manifest
// records, identical to what the writer wrote. It returns each
// producer's committed batch names in step order.
func prdCheckCommitted(t testing.TB, s store.Store, st *txn.State, want map[string]prdRecord) map[string][]string {
	t.Helper()
	if st.LiveFrom != st.Config.FirstStep {
		t.Errorf("live steps start at %d, the stream's first step is %d (nothing was reclaimed)", st.LiveFrom, st.Config.FirstStep)
	}
	seen := map[string]int64{}
	order := map[string][]string{}
	for i, tgb := range st.Steps {
		if wantStep := st.LiveFrom + int64(i); tgb.Step != wantStep {
			t.Errorf("steps not contiguous: position %d holds step %d, want %d", i, tgb.Step, wantStep)
		}
		k := prdKey(tgb.Producer, tgb.Batch)
		if prev, dup := seen[k]; dup {
			t.Errorf("batch %s committed twice: steps %d and %d", k, prev, tgb.Step)
			continue
		}
		seen[k] = tgb.Step
		if _, ok := want[k]; !ok {
			t.Errorf("step %d holds batch %s, which was never sealed", tgb.Step, k)
			continue
		}
		if o := order[tgb.Producer]; len(o) > 0 && o[len(o)-1] >= tgb.Batch {
			t.Errorf("producer %s: batch %s committed at step %d after %s", tgb.Producer, tgb.Batch, tgb.Step, o[len(o)-1])
		}
		order[tgb.Producer] = append(order[tgb.Producer], tgb.Batch)
	}
	for k := range want {
		if _, ok := seen[k]; !ok {
			t.Errorf("sealed batch %s was never committed", k)
		}
	}
	if t.Failed() {
		return order
	}
	l := &txn.Log{Store: s, Config: st.Config}
	g, ctx := errgroup.WithContext(t.Context())
	g.SetLimit(8)
	for _, tgb := range st.Steps {
		g.Go(func() error { return prdCheckStep(ctx, l, tgb, want[prdKey(tgb.Producer, tgb.Batch)]) })
	}
	if err := g.Wait(); err != nil {
		t.Error(err)
	}
	return order
}

// prdCheckStep reads a step's packs and compares every file with the
// writer's record.
func prdCheckStep(ctx context.Context, l *txn.Log, tgb *txn.TGB, rec prdRecord) error {
	type fileKey struct {
		rank int
		name string
	}
	left := map[fileKey]prdFile{}
	for _, f := range rec.Files {
		left[fileKey{f.Rank, f.Name}] = f
	}
	ranks, shared, err := l.Packs(ctx, tgb)
	if err != nil {
		return fmt.Errorf("step %d (%s/%s): %w", tgb.Step, tgb.Producer, tgb.Batch, err)
	}
	packs := map[int]*txn.Pack{-1: shared}
	for r, p := range ranks {
		packs[r] = p
	}
	for rank, p := range packs {
		if p == nil {
			continue
		}
		data, err := l.Store.GetRange(ctx, p.Key, p.Off, p.Size)
		if err != nil {
			return fmt.Errorf("step %d (%s/%s): %w", tgb.Step, tgb.Producer, tgb.Batch, err)
		}
		if int64(len(data)) != p.Size {
			return fmt.Errorf("step %d: pack %s is %d bytes, the manifest says %d", tgb.Step, p.Key, len(data), p.Size)
		}
		for _, f := range p.Files {
			w, ok := left[fileKey{rank, f.Name}]
			if !ok {
				return fmt.Errorf("step %d (%s/%s) rank %d holds %s, which the writer did not write there", tgb.Step, tgb.Producer, tgb.Batch, rank, f.Name)
			}
			delete(left, fileKey{rank, f.Name})
			if f.Size != w.Size || f.Off < 0 || f.Off+f.Size > p.Size {
				return fmt.Errorf("step %d rank %d %s: %d bytes at %d in a %d-byte pack; the writer wrote %d bytes", tgb.Step, rank, f.Name, f.Size, f.Off, p.Size, w.Size)
			}
			sum := sha256.Sum256(data[f.Off : f.Off+f.Size])
			if hex.EncodeToString(sum[:]) != w.SHA256 {
				return fmt.Errorf("step %d (%s/%s) rank %d %s: bytes differ from what the writer wrote", tgb.Step, tgb.Producer, tgb.Batch, rank, f.Name)
			}
		}
	}
	if len(left) > 0 {
		var missing []string
		for k := range left {
			missing = append(missing, fmt.Sprintf("rank %d %s", k.rank, k.name))
		}
		slices.Sort(missing)
		return fmt.Errorf("step %d (%s/%s): files the writer wrote are missing: %s", tgb.Step, tgb.Producer, tgb.Batch, strings.Join(missing, ", "))
	}
	return nil
}

// prdTreeSum is a directory tree's content: relative path -> mode, size
// and SHA-256 (directories by mode only).
func prdTreeSum(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			out[rel] = fi.Mode().String()
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		out[rel] = fmt.Sprintf("%s %d %x", fi.Mode(), len(b), sha256.Sum256(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// prdCheckFenced reads versions 1..head of the log: once an incarnation
// newer than epoch registered, no TGB of epoch or older may be committed.
func prdCheckFenced(t testing.TB, l *txn.Log, head, epoch uint64) {
	t.Helper()
	var fencedAt, newer uint64
	for v := uint64(1); v <= head; v++ {
		ver, err := l.ReadVersion(t.Context(), v)
		if err != nil {
			t.Fatal(err)
		}
		if ver.Register != nil && ver.Writer.Epoch > epoch && fencedAt == 0 {
			fencedAt, newer = v, ver.Writer.Epoch
		}
		for _, tgb := range ver.TGBs {
			if fencedAt != 0 && tgb.Epoch <= epoch {
				t.Errorf("version %d commits batch %s of epoch %d after epoch %d registered at version %d", v, tgb.Batch, tgb.Epoch, newer, fencedAt)
			}
		}
	}
	if fencedAt == 0 {
		t.Errorf("no incarnation newer than epoch %d registered", epoch)
	}
}
