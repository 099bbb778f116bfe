package txn_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// The benchmarks measure what must not grow with the age of a stream
// (docs/ARCHITECTURE.md, the path of a commit): the cost of one commit, of
// a mount's start-up (open + Load) and of a mount's Refresh, on the file
// store, at log lengths of 100, 10,000 and 100,000 versions:
//
//	go test -run XXX -bench . -benchtime 20x ./txn/
//
// The logs are real streams in steady state: one producer commits small
// TGBs (benchRanks ranks of one benchFileSize-byte file) one per version;
// every benchCheckpointEvery steps a checkpoint is recorded, the steps the
// checkpoints allow are reclaimed, and the reclaimed packs of the previous
// round are deleted and purged, as gc does after its grace period. So the
// live window stays bounded (between 20 and 40 steps with the default
// retention of two checkpoints) and snapshots (every 100 versions) stay
// small, while the version objects accumulate as in a stream younger than
// txn.LogRetention.
//
// Writing 100,000 versions on the file store costs several fsyncs each
// (minutes), so the log is built with the same Producer and Log.Commit code
// on a mem store and its objects are then copied, key for key and byte for
// byte, into a directory that store.NewFile opens: the file store finds
// exactly what it would have written itself. A log is built once per
// process (the 100,000-version build passes 100 and 10,000 on the way);
// benchmarks that append work on a hard-linked fork, which is safe because
// the file store never changes a file in place (Put renames a new file
// over the old name, Create links, Delete unlinks).
const (
	benchRanks           = 4
	benchFileSize        = 256
	benchCheckpointEvery = 20
)

var benchLengths = []uint64{100, 10_000, 100_000}

// TestMain removes the benchmark logs cached for the process (plain `go
// test` builds none).
func TestMain(m *testing.M) {
	code := m.Run()
	benchCache.cleanup()
	os.Exit(code)
}

// BenchmarkCommit: one small TGB appended and committed by a producer at
// the head of a log of the given length. ns/op is Append (upload of the
// rank packs) plus the commit; commit-ns/op is from the data being durable
// to the version being created (Producer's CommitStats).
func BenchmarkCommit(b *testing.B) {
	for _, n := range benchLengths {
		b.Run(fmt.Sprintf("versions=%d", n), func(b *testing.B) {
			ctx := b.Context()
			l := benchOpen(b, benchFork(b, n))
			var commitNs, commits atomic.Int64
			p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{
				ID: "p", Solo: true, Logger: benchLogger,
				Observe: func(cs txn.CommitStats) {
					for _, u := range cs.Uploaded {
						commitNs.Add(int64(cs.Committed.Sub(u)))
						commits.Add(1)
					}
				},
			})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.WithoutCancel(ctx)) //nolint:errcheck // Flush after the loop reported errors
			i := 0
			for b.Loop() {
				benchAppend(b, p, i)
				i++
			}
			if err := p.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(commitNs.Load())/float64(max(commits.Load(), 1)), "commit-ns/op")
		})
	}
}

// BenchmarkLoad: what a mount or a producer does at start-up: open the
// stream and load its newest state (snapshot through the hint, then the
// versions after it, here none: the head is a snapshot version).
func BenchmarkLoad(b *testing.B) {
	for _, n := range benchLengths {
		b.Run(fmt.Sprintf("versions=%d", n), func(b *testing.B) {
			ctx := b.Context()
			dir := benchLog(b, n)
			var st *txn.State
			for b.Loop() {
				st = txntest.Load(b, benchOpen(b, dir))
			}
			if st.Version != n {
				b.Fatalf("loaded version %d, want %d", st.Version, n)
			}
			info, err := benchOpen(b, dir).Store.Stat(ctx, txn.SnapshotKey(n))
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(info.Size), "snapshot-bytes")
			b.ReportMetric(float64(len(st.Steps)), "live-steps")
		})
	}
}

// BenchmarkRefresh: a reader's Refresh after one new version (one TGB)
// was committed by a producer: it reads that version and finds the next
// one absent.
func BenchmarkRefresh(b *testing.B) {
	for _, n := range benchLengths {
		b.Run(fmt.Sprintf("versions=%d", n), func(b *testing.B) {
			ctx := b.Context()
			dir := benchFork(b, n)
			p, err := txn.OpenProducer(ctx, benchOpen(b, dir), txn.ProducerOptions{ID: "p", Solo: true, Logger: benchLogger})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Close(context.WithoutCancel(ctx)) //nolint:errcheck // commits were waited for
			reader := benchOpen(b, dir)
			st := txntest.Load(b, reader)
			i := 0
			for b.Loop() {
				b.StopTimer()
				benchAppend(b, p, i)
				i++
				b.StartTimer()
				got, err := reader.Refresh(ctx, st)
				if err != nil || got != 1 {
					b.Fatalf("refresh applied %d versions, err %v; want 1", got, err)
				}
			}
		})
	}
}

var benchLogger = slog.New(slog.DiscardHandler)

func benchOpen(b *testing.B, dir string) *txn.Log {
	b.Helper()
	s, err := store.NewFile(dir)
	if err != nil {
		b.Fatal(err)
	}
	l, err := txn.Open(b.Context(), s)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

var benchData = func() []byte {
	d := make([]byte, benchFileSize)
	for i := range d {
		d[i] = byte(i * 31)
	}
	return d
}()

// benchBatch is the small TGB every benchmark commits.
func benchBatch(i int) txn.Batch {
	name := fmt.Sprintf("b%09d", i)
	bt := txn.Batch{Name: name, Cursor: name, Ranks: make([][]txn.FileSource, benchRanks)}
	for r := range bt.Ranks {
		bt.Ranks[r] = []txn.FileSource{txn.BytesFile("sample.bin", benchData)}
	}
	return bt
}

func benchAppend(b *testing.B, p *txn.Producer, i int) {
	pd, err := p.Append(b.Context(), benchBatch(i))
	if err != nil {
		b.Fatal(err)
	}
	if _, err := pd.Wait(b.Context()); err != nil {
		b.Fatal(err)
	}
}

// benchCache holds, for the process, the built logs: a directory per
// length, never written to, and the builder that can extend its log.
var benchCache benchLogs

type benchLogs struct {
	mu       sync.Mutex
	root     string            // GUARDED_BY(mu): temp dir holding all logs
	builder  *benchBuilder     // GUARDED_BY(mu)
	pristine map[uint64]string // GUARDED_BY(mu): length -> directory
	forks    int               // GUARDED_BY(mu)
}

func (c *benchLogs) cleanup() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.builder != nil {
		c.builder.close(context.Background())
		c.builder = nil
	}
	if c.root != "" {
		os.RemoveAll(c.root)
		c.root = ""
	}
}

// benchLog returns the directory of a file-store stream whose head is
// version n. Callers must not write to it (see benchFork).
func benchLog(b *testing.B, n uint64) string {
	c := &benchCache
	c.mu.Lock()
	defer c.mu.Unlock()
	if dir, ok := c.pristine[n]; ok {
		return dir
	}
	if c.root == "" {
		root, err := os.MkdirTemp("", "lakestream-bench-")
		if err != nil {
			b.Fatal(err)
		}
		c.root, c.pristine = root, map[uint64]string{}
	}
	// The builder runs on context.Background: it outlives the benchmark
	// that first asked for it.
	ctx := context.Background()
	if c.builder != nil && c.builder.st.Version > n {
		c.builder.close(ctx)
		c.builder = nil
	}
	if c.builder == nil {
		bb, err := newBenchBuilder(ctx)
		if err != nil {
			b.Fatal(err)
		}
		c.builder = bb
	}
	start := time.Now()
	if err := c.builder.extend(ctx, n); err != nil {
		b.Fatal(err)
	}
	built := time.Since(start)
	dir := filepath.Join(c.root, fmt.Sprintf("log-%d", n))
	objs, err := c.builder.copyTo(ctx, dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("built a %d-version log in %v (%d objects copied to the file store in %v)", n, built.Round(time.Millisecond), objs, (time.Since(start) - built).Round(time.Millisecond))
	c.pristine[n] = dir
	if n == benchLengths[len(benchLengths)-1] {
		c.builder.close(ctx) // free its memory: nothing is longer
		c.builder = nil
	}
	return dir
}

// benchFork returns a private, writable copy of the log of length n.
func benchFork(b *testing.B, n uint64) string {
	src := benchLog(b, n)
	c := &benchCache
	c.mu.Lock()
	c.forks++
	dst := filepath.Join(c.root, fmt.Sprintf("fork-%d", c.forks))
	c.mu.Unlock()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		return os.Link(p, filepath.Join(dst, rel))
	})
	if err != nil {
		b.Fatal(err)
	}
	return dst
}

// benchBuilder grows a steady-state stream on a mem store, one version per
// step.
type benchBuilder struct {
	mem   store.Store
	log   *txn.Log
	prod  *txn.Producer
	st    *txn.State // refreshed after every step
	batch int
}

func newBenchBuilder(ctx context.Context) (*benchBuilder, error) {
	mem := store.NewMem()
	l, err := txn.Create(ctx, mem, txn.CreateOptions{Ranks: benchRanks})
	if err != nil {
		return nil, err
	}
	// One TGB per version.
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "p", Solo: true, Logger: benchLogger})
	if err != nil {
		return nil, err
	}
	st, err := l.Load(ctx)
	if err != nil {
		return nil, err
	}
	return &benchBuilder{mem: mem, log: l, prod: p, st: st}, nil
}

// extend commits versions until the head is version n.
func (bb *benchBuilder) extend(ctx context.Context, n uint64) error {
	for bb.st.Version < n {
		before := bb.st.Version
		if err := bb.step(ctx); err != nil {
			return fmt.Errorf("building version %d: %w", before+1, err)
		}
		if _, err := bb.log.Refresh(ctx, bb.st); err != nil {
			return err
		}
		if bb.st.Version != before+1 {
			return fmt.Errorf("a step took the log from version %d to %d", before, bb.st.Version)
		}
	}
	return nil
}

// step commits one version: a checkpoint every benchCheckpointEvery steps,
// then the reclamation it allows, then the purge of the previous round's
// packs (deleted first, as gc does), else one TGB.
func (bb *benchBuilder) step(ctx context.Context) error {
	st := bb.st
	last := st.Config.FirstStep - 1
	if k := len(st.Checkpoints); k > 0 {
		last = st.Checkpoints[k-1]
	}
	var v *txn.Version
	head, ok := st.Head()
	target, reclaim := txn.ReclaimTarget(st)
	switch {
	case ok && head-last >= benchCheckpointEvery:
		v = &txn.Version{Checkpoints: []int64{head}}
	case reclaim && target > st.LiveFrom:
		v = &txn.Version{Reclaim: &txn.Reclaim{Below: min(target, st.NextStep())}}
	case len(st.Pending) > 1:
		keys := st.Pending[0].Keys
		if err := bb.mem.Delete(ctx, keys...); err != nil {
			return err
		}
		v = &txn.Version{Purged: keys}
	default:
		pd, err := bb.prod.Append(ctx, benchBatch(bb.batch))
		if err != nil {
			return err
		}
		bb.batch++
		_, err = pd.Wait(ctx)
		return err
	}
	_, err := bb.log.Commit(ctx, st, func(*txn.State) (*txn.Version, error) { return v, nil }, benchLogger)
	return err
}

// copyTo writes every object of the mem store to dir as the file store
// lays it out (the object at key k is the file dir/k) and returns how many.
func (bb *benchBuilder) copyTo(ctx context.Context, dir string) (int, error) {
	// One page: the mem store sorts all its keys for every page.
	objs, more, err := bb.mem.List(ctx, "", "", 1<<30)
	if err != nil {
		return 0, err
	}
	if more {
		return 0, errors.New("mem listing was cut short")
	}
	made := map[string]bool{}
	for _, o := range objs {
		data, err := store.ReadAll(ctx, bb.mem, o.Key)
		if err != nil {
			return 0, err
		}
		p := filepath.Join(dir, filepath.FromSlash(o.Key))
		if d := filepath.Dir(p); !made[d] {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return 0, err
			}
			made[d] = true
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return 0, err
		}
	}
	return len(objs), nil
}

func (bb *benchBuilder) close(ctx context.Context) {
	_ = bb.prod.Close(ctx) // its versions were all waited for
}
