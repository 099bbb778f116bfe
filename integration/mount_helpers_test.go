package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// mntRequireFUSE skips (or, under CI, fails) when this process cannot mount.
func mntRequireFUSE(t testing.TB) {
	t.Helper()
	why := ""
	switch {
	case os.Geteuid() != 0:
		why = "mount tests need root (FUSE DirectMount)"
	default:
		if _, err := os.Stat("/dev/fuse"); err != nil {
			why = "mount tests need /dev/fuse"
		}
	}
	if why == "" {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// mntFileURL is a fresh file:// store in a temp dir.
func mntFileURL(t testing.TB) (string, string) {
	dir := t.TempDir()
	return "file://" + dir, dir
}

// Test data: every file starts with a header naming what it is, followed
// by bytes derived from that header, so any reader can check a file it
// finds in the mount without other knowledge, and any mix-up (a file of
// another step, rank or name, a wrong length) shows.

const mntHeaderFmt = "lakefs-test batch=%s rank=%d name=%s size=%d\n"

// mntContent is the bytes of one produced file (rank -1: step-level).
func mntContent(batch string, rank int, name string, size int) []byte {
	hdr := fmt.Sprintf(mntHeaderFmt, batch, rank, name, size)
	b := make([]byte, size)
	n := copy(b, hdr)
	h := fnv.New64a()
	h.Write([]byte(hdr))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(size)))
	for i := n; i < size; {
		v := rng.Uint64()
		for k := 0; k < 8 && i < size; k++ {
			b[i] = byte(v >> (8 * k))
			i++
		}
	}
	return b
}

var mntHeaderRE = regexp.MustCompile(`^lakefs-test batch=(\S+) rank=(-?\d+) name=(\S+) size=(\d+)\n`)

// mntCheckContent verifies a file read from the mount at rank dir rank with
// name name: that it is exactly what was produced under its header.
// It returns the batch the file belongs to.
func mntCheckContent(b []byte, rank int, name string) (string, error) {
	m := mntHeaderRE.FindSubmatch(b)
	if m == nil {
		if len(b) < 64 {
			return "", nil // too small for a header: the caller checks it by size and batch
		}
		return "", fmt.Errorf("%s: no test header in the first bytes %q", name, b[:min(len(b), 80)])
	}
	batch, r, n := string(m[1]), mntAtoi(string(m[2])), string(m[3])
	size := mntAtoi(string(m[4]))
	if r != rank || n != name {
		return batch, fmt.Errorf("%s in rank %d holds the file %s of rank %d", name, rank, n, r)
	}
	if size != len(b) {
		return batch, fmt.Errorf("%s: %d bytes, produced %d", name, len(b), size)
	}
	if !bytes.Equal(b, mntContent(batch, r, n, size)) {
		return batch, fmt.Errorf("%s: bytes differ from what was produced", name)
	}
	return batch, nil
}

func mntAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// mntBatchSpec is what a producer put in one batch: per rank (and -1 for
// step-level files), file name -> size.
type mntBatchSpec struct {
	name  string
	files map[int]map[string]int
}

// mntMakeBatch builds a batch of ranks ranks with a few files each (sizes
// from 0 to about maxSize, at least one spanning several chunks), plus a
// step-level file.
func mntMakeBatch(name string, ranks, maxSize int, rng *rand.Rand) (txn.Batch, mntBatchSpec) {
	spec := mntBatchSpec{name: name, files: map[int]map[string]int{}}
	b := txn.Batch{Name: name, Cursor: name, Ranks: make([][]txn.FileSource, ranks)}
	for r := range ranks {
		spec.files[r] = map[string]int{}
		nfiles := 2 + rng.IntN(3)
		for i := range nfiles {
			fname := fmt.Sprintf("sample-%02d.bin", i)
			if i == 1 {
				fname = "sub/dir/" + fname // nested directories
			}
			size := 100 + rng.IntN(maxSize)
			if i == 0 {
				size = maxSize // one big file per rank
			}
			spec.files[r][fname] = size
			b.Ranks[r] = append(b.Ranks[r], txn.BytesFile(fname, mntContent(name, r, fname, size)))
		}
	}
	spec.files[-1] = map[string]int{"meta.json": 300}
	b.Shared = []txn.FileSource{txn.BytesFile("meta.json", mntContent(name, -1, "meta.json", 300))}
	return b, spec
}

// mntProducer appends test batches to a stream.
type mntProducer struct {
	t      testing.TB
	p      *txn.Producer
	ranks  int
	max    int
	rng    *rand.Rand
	prefix string

	mu    sync.Mutex
	specs map[string]mntBatchSpec // GUARDED_BY(mu), by batch name
	steps map[int64]string        // GUARDED_BY(mu): committed step -> batch
}

func mntNewProducer(t testing.TB, l *txn.Log, id string, maxSize int, seed uint64) *mntProducer {
	t.Helper()
	p, err := txn.OpenProducer(context.Background(), l, txn.ProducerOptions{ID: id, Logger: testLogger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return &mntProducer{t: t, p: p, ranks: l.Config.Ranks, max: maxSize, rng: rand.New(rand.NewPCG(seed, 1)), prefix: id,
		specs: map[string]mntBatchSpec{}, steps: map[int64]string{}}
}

// add appends one batch and waits until it is committed; it returns the
// step.
func (p *mntProducer) add(ctx context.Context, i int) (int64, error) {
	wait, err := p.append(ctx, i)
	if err != nil {
		return 0, err
	}
	return wait()
}

// append appends one batch (its data is durable on return) and returns a
// function that waits for its commit.
func (p *mntProducer) append(ctx context.Context, i int) (func() (int64, error), error) {
	name := fmt.Sprintf("%s-%06d", p.prefix, i)
	p.mu.Lock()
	b, spec := mntMakeBatch(name, p.ranks, p.max, p.rng)
	p.specs[name] = spec // recorded before the step can be visible
	p.mu.Unlock()
	pd, err := p.p.Append(ctx, b)
	if err != nil {
		return nil, err
	}
	return func() (int64, error) {
		step, err := pd.Wait(ctx)
		if err != nil {
			return 0, err
		}
		p.mu.Lock()
		p.steps[step] = name
		p.mu.Unlock()
		return step, nil
	}, nil
}

func (p *mntProducer) addN(t testing.TB, n int) []int64 {
	t.Helper()
	var steps []int64
	for i := range n {
		s, err := p.add(context.Background(), i)
		if err != nil {
			t.Fatal(err)
		}
		steps = append(steps, s)
	}
	return steps
}

func (p *mntProducer) spec(batch string) (mntBatchSpec, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.specs[batch]
	return s, ok
}

// mntMountInProcess runs mount.Run on a fresh directory until the test ends.
func mntMountInProcess(t testing.TB, o mount.Options) (string, mount.Info) {
	t.Helper()
	if o.PollInterval == 0 {
		o.PollInterval = 20 * time.Millisecond
	}
	if o.NodeID == "" {
		o.NodeID = "test-node"
	}
	mnt, info, _ := mntRun(t, o)
	return mnt, info
}

// mntRun mounts in this process and returns a stop function (also run at
// cleanup) that unmounts and waits for mount.Run to return.
func mntRun(t testing.TB, o mount.Options) (string, mount.Info, func()) {
	t.Helper()
	mntRequireFUSE(t)
	if o.Mountpoint == "" {
		o.Mountpoint = t.TempDir()
	}
	if o.Logger == nil {
		o.Logger = testLogger(t, slog.LevelInfo)
	}
	if o.CacheSize == 0 {
		o.CacheSize = 64 << 20
	}
	ready := make(chan mount.Info, 1)
	o.Ready = func(i mount.Info) { ready <- i }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mount.Run(ctx, o) }()
	var info mount.Info
	select {
	case info = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("mount.Run: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		t.Fatal("mount did not become ready in 30s")
	}
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("mount.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return o.Mountpoint, info, stop
}

// mntBuildMount builds the lakefs-mount command into a temp dir.
func mntBuildMount(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lakefs-mount")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/lakestream/lakestream/cmd/lakefs-mount")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building lakefs-mount: %v\n%s", err, out)
	}
	return bin
}

// mntReadFile reads a file through the mount with plain os calls.
func mntReadFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// mntIsErrno reports whether err carries errno e.
func mntIsErrno(err error, e error) bool { return errors.Is(err, e) }
