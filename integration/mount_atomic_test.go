package integration

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// TestMountAtomicUnderLoad: while two producers commit, readers on two
// mounts list and read continuously. No reader ever sees a step missing a
// rank or a file, a file of the wrong size, or bytes other than those
// produced; both mounts serve identical bytes for every step.
func TestMountAtomicUnderLoad(t *testing.T) {
	mntRequireFUSE(t)
	for _, b := range mntBackends(t) {
		t.Run(b.name, func(t *testing.T) {
			mntTestAtomicUnderLoad(t, b.url(t))
		})
	}
}

func mntTestAtomicUnderLoad(t *testing.T, url string) {
	const ranks, perProducer = 4, 30
	l := newStream(t, url, txn.CreateOptions{Ranks: ranks, ChunkSize: 16 << 10, SnapshotEvery: 10})
	producers := map[string]*mntProducer{
		"p1": mntNewProducer(t, l, "p1", 40<<10, 1),
		"p2": mntNewProducer(t, l, "p2", 40<<10, 2),
	}
	var mnts []string
	for i := range 2 {
		// Small caches and prefetching on, so eviction and prefetch run
		// under the readers too.
		mnt, _ := mntMountInProcess(t, mount.Options{Store: url, NodeID: fmt.Sprintf("node-%d", i),
			PrefetchSteps: 2, CacheSize: 2 << 20, PollInterval: 5 * time.Millisecond})
		mnts = append(mnts, mnt)
	}

	v := &mntVerifier{producers: producers, ranks: ranks, digests: map[int64][32]byte{}}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	readers, rctx := errgroup.WithContext(ctx)
	for i, mnt := range mnts {
		for k := range 2 {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(k)))
			readers.Go(func() error {
				for rctx.Err() == nil {
					if err := v.pass(mnt, rng); err != nil {
						return fmt.Errorf("mount %d reader %d: %w", i, k, err)
					}
				}
				return nil
			})
		}
	}
	var prod errgroup.Group
	for _, p := range producers {
		prod.Go(func() error {
			// Appends do not wait for commits, so commits group and race.
			var waits []func() (int64, error)
			for i := range perProducer {
				w, err := p.append(ctx, i)
				if err != nil {
					return err
				}
				waits = append(waits, w)
			}
			for _, w := range waits {
				if _, err := w(); err != nil {
					return err
				}
			}
			return nil
		})
	}
	perr := prod.Wait()
	// Let the readers see the last steps, then stop them.
	waitFor(t, 10*time.Second, "both mounts to show every step", func() bool {
		for _, mnt := range mnts {
			b, _ := os.ReadFile(filepath.Join(mnt, "head"))
			if string(b) != strconv.Itoa(2*perProducer-1)+"\n" {
				return false
			}
		}
		return true
	})
	time.Sleep(200 * time.Millisecond)
	stop()
	if err := readers.Wait(); err != nil {
		t.Fatal(err)
	}
	if perr != nil {
		t.Fatal(perr)
	}
	// A last full pass over every step on both mounts.
	for _, mnt := range mnts {
		if err := v.all(mnt); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(v.digests); n != 2*perProducer {
		t.Fatalf("verified %d steps, want %d", n, 2*perProducer)
	}
	t.Logf("%d step reads verified, %d compared across readers", v.reads.Load(), v.compared.Load())
}

// mntVerifier checks steps read through mounts against what producers made.
type mntVerifier struct {
	producers map[string]*mntProducer
	ranks     int
	reads     atomic.Int64
	compared  atomic.Int64

	mu      sync.Mutex
	digests map[int64][32]byte // GUARDED_BY(mu): step -> digest of all its bytes
}

// pass lists steps/ and checks the newest step and a random one.
func (v *mntVerifier) pass(mnt string, rng *rand.Rand) error {
	steps, err := mntListSteps(mnt)
	if err != nil || len(steps) == 0 {
		return err
	}
	for _, s := range []int64{steps[len(steps)-1], steps[rng.IntN(len(steps))]} {
		if err := v.step(mnt, s); err != nil {
			return err
		}
	}
	return nil
}

func (v *mntVerifier) all(mnt string) error {
	steps, err := mntListSteps(mnt)
	if err != nil {
		return err
	}
	for _, s := range steps {
		if err := v.step(mnt, s); err != nil {
			return err
		}
	}
	return nil
}

// mntListSteps lists steps/ and checks it is numeric, ascending and gapless.
func mntListSteps(mnt string) ([]int64, error) {
	f, err := os.Open(filepath.Join(mnt, "steps"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, err
	}
	steps := make([]int64, len(names))
	for i, n := range names {
		if steps[i], err = strconv.ParseInt(n, 10, 64); err != nil {
			return nil, fmt.Errorf("steps/ lists %q", n)
		}
		if i > 0 && steps[i] != steps[i-1]+1 {
			return nil, fmt.Errorf("steps/ lists %v: not contiguous ascending", names)
		}
	}
	return steps, nil
}

// step checks one step completely and records its digest.
func (v *mntVerifier) step(mnt string, s int64) error {
	dir := filepath.Join(mnt, "steps", strconv.FormatInt(s, 10))
	meta, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return fmt.Errorf("step %d: %w", s, err)
	}
	batch, err := mntCheckContent(meta, -1, "meta.json")
	if err != nil {
		return fmt.Errorf("step %d: %w", s, err)
	}
	p := v.producers[strings.SplitN(batch, "-", 2)[0]]
	if p == nil {
		return fmt.Errorf("step %d holds batch %q of no producer", s, batch)
	}
	spec, ok := p.spec(batch)
	if !ok {
		return fmt.Errorf("step %d holds batch %q, never produced", s, batch)
	}
	// Walk the step: exactly the produced files, with their sizes and
	// bytes.
	h := sha256.New()
	seen := map[int]map[string]bool{}
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rank, name := -1, rel
		if r, rest, ok := strings.Cut(rel, "/"); ok && strings.HasPrefix(r, "rank-") {
			rank, name = mntAtoi(strings.TrimPrefix(r, "rank-")), rest
		}
		want, ok := spec.files[rank][name]
		if !ok {
			return fmt.Errorf("step %d (%s): unexpected file %s", s, batch, rel)
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Size() != int64(want) {
			return fmt.Errorf("step %d: %s has size %d, produced %d", s, rel, fi.Size(), want)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if got, err := mntCheckContent(b, rank, name); err != nil || got != batch {
			return fmt.Errorf("step %d: %s: batch %q, %v", s, rel, got, err)
		}
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		if seen[rank] == nil {
			seen[rank] = map[string]bool{}
		}
		seen[rank][name] = true
		return nil
	})
	if err != nil {
		return err
	}
	for r := -1; r < v.ranks; r++ {
		if len(seen[r]) != len(spec.files[r]) {
			var missing []string
			for n := range spec.files[r] {
				if !seen[r][n] {
					missing = append(missing, n)
				}
			}
			sort.Strings(missing)
			return fmt.Errorf("step %d rank %d: files %v missing", s, r, missing)
		}
	}
	var d [32]byte
	copy(d[:], h.Sum(nil))
	v.reads.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	if old, ok := v.digests[s]; ok {
		v.compared.Add(1)
		if old != d {
			return errors.New("step " + strconv.FormatInt(s, 10) + ": two reads (two mounts or two readers) got different bytes")
		}
	}
	v.digests[s] = d
	return nil
}

// mntBackend is a store for tests that run on every kind.
type mntBackend struct {
	name string
	url  func(t testing.TB) string
}

func mntBackends(t testing.TB) []mntBackend {
	bs := []mntBackend{{"file", func(t testing.TB) string { u, _ := mntFileURL(t); return u }}}
	bs = append(bs, mntServerBackends()...)
	return slices.Clip(bs)
}
