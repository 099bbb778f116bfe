// Command writer fills staging directories the way any external writer
// would: for each batch it creates the rank directories and files, then
// _SEALED last (no fsync: the producer must cope with whatever a reader of
// the directory sees). The integration tests run it as a separate process.
//
// Each file's content is derived from (producer, batch, rank, name) and its
// size, and each batch is recorded in a JSON-lines manifest (outside the
// staging tree, before _SEALED) with every file's size and SHA-256, so a
// test can check what was committed without trusting the staging tree.
//
// Usage:
//
//	writer -dir p0=/staging/0 -dir p1=/staging/1 -ranks 2 -from 0 -count 200 \
//	       -seed 1 -manifest /tmp/m.jsonl [-pause 30ms] [-unsealed 3,7]
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// File is one written file in the manifest; Rank -1 is a step-level file.
type File struct {
	Rank   int    `json:"rank"`
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Record is one manifest line: one batch.
type Record struct {
	Producer string `json:"producer"`
	Batch    string `json:"batch"`
	Sealed   bool   `json:"sealed"`
	Files    []File `json:"files"`
	// WaitedMS is how long the batch waited for space on a full staging
	// disk (ENOSPC): the writer waits and retries rather than failing.
	WaitedMS int64 `json:"waited_ms,omitempty"`
}

type dirsFlag map[string]string

func (d dirsFlag) String() string { return fmt.Sprint(map[string]string(d)) }

func (d dirsFlag) Set(s string) error {
	id, dir, ok := strings.Cut(s, "=")
	if !ok || id == "" || dir == "" {
		return fmt.Errorf("-dir %q: want PRODUCER=DIR", s)
	}
	d[id] = dir
	return nil
}

func main() {
	dirs := dirsFlag{}
	flag.Var(dirs, "dir", "PRODUCER=DIR: a staging directory to fill (repeatable; filled concurrently)")
	ranks := flag.Int("ranks", 2, "rank directories per batch")
	from := flag.Int("from", 0, "number of the first batch (names are b%06d)")
	count := flag.Int("count", 1, "batches per directory")
	seed := flag.Uint64("seed", 1, "seed of sizes and file counts")
	manifest := flag.String("manifest", "", "JSON-lines file the batches are appended to (required)")
	pause := flag.Duration("pause", 0, "sleep a random time up to this between batches")
	unsealed := flag.String("unsealed", "", "comma-separated batch numbers left without _SEALED")
	flag.Parse()
	if len(dirs) == 0 || *manifest == "" || *ranks < 1 || *count < 0 {
		fmt.Fprintln(os.Stderr, "writer: need -dir, -manifest, -ranks >= 1 and -count >= 0")
		os.Exit(2)
	}
	skip := map[int]bool{}
	for s := range strings.SplitSeq(*unsealed, ",") {
		if s == "" {
			continue
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			fmt.Fprintf(os.Stderr, "writer: -unsealed %q: %v\n", *unsealed, err)
			os.Exit(2)
		}
		skip[n] = true
	}
	m, err := os.OpenFile(*manifest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(1)
	}
	w := &writer{ranks: *ranks, seed: *seed, manifest: m}
	var wg sync.WaitGroup
	errs := make(chan error, len(dirs))
	for id, dir := range dirs {
		wg.Go(func() {
			for i := *from; i < *from+*count; i++ {
				if err := w.batch(id, dir, i, !skip[i]); err != nil {
					errs <- err
					return
				}
				if *pause > 0 {
					time.Sleep(rand.N(*pause))
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	failed := false
	for err := range errs {
		fmt.Fprintln(os.Stderr, "writer:", err)
		failed = true
	}
	if err := m.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		failed = true
	}
	if failed {
		os.Exit(1)
	}
}

type writer struct {
	ranks int
	seed  uint64

	mu       sync.Mutex
	manifest *os.File // GUARDED_BY(mu)
}

// batch writes batch number i of producer id into dir, recording it in the
// manifest before sealing it.
func (w *writer) batch(id, dir string, i int, seal bool) error {
	name := fmt.Sprintf("b%06d", i)
	rng := rand.New(rand.NewPCG(w.seed, hashOf(id, name)))
	bdir := filepath.Join(dir, name)
	rec := Record{Producer: id, Batch: name, Sealed: seal}
	for r := range w.ranks {
		for k := range 1 + rng.IntN(3) {
			fname := fmt.Sprintf("f%d.bin", k)
			if k == 1 {
				fname = "sub/" + fname // nested directories are allowed
			}
			f, err := writeFile(filepath.Join(bdir, fmt.Sprintf("rank-%d", r), fname), id, name, r, fname, logSize(rng, 2<<10, 300<<10), &rec.WaitedMS)
			if err != nil {
				return err
			}
			rec.Files = append(rec.Files, f)
		}
	}
	if rng.IntN(2) == 0 {
		f, err := writeFile(filepath.Join(bdir, "meta.json"), id, name, -1, "meta.json", 64+rng.Int64N(2000), &rec.WaitedMS)
		if err != nil {
			return err
		}
		rec.Files = append(rec.Files, f)
	}
	line, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	w.mu.Lock()
	_, err = w.manifest.Write(append(line, '\n'))
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	if !seal {
		return nil
	}
	return retryFull(&rec.WaitedMS, func() error { return os.WriteFile(filepath.Join(bdir, "_SEALED"), nil, 0o644) })
}

// retryFull runs op until it does not fail with ENOSPC (a full staging
// disk: the producer frees space as it commits), adding the time waited
// to *waitedMS.
func retryFull(waitedMS *int64, op func() error) error {
	for {
		err := op()
		if !errors.Is(err, syscall.ENOSPC) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
		*waitedMS += 50
	}
}

// logSize is log-uniform in [lo, hi): mostly small files, a few large.
func logSize(rng *rand.Rand, lo, hi float64) int64 {
	return int64(math.Exp(math.Log(lo) + rng.Float64()*(math.Log(hi)-math.Log(lo))))
}

func hashOf(parts ...string) uint64 {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return h.Sum64()
}

// writeFile writes size bytes determined by (id, batch, rank, name, size).
func writeFile(path, id, batch string, rank int, name string, size int64, waitedMS *int64) (File, error) {
	b := make([]byte, size)
	hdr := fmt.Sprintf("writer producer=%s batch=%s rank=%d name=%s size=%d\n", id, batch, rank, name, size)
	n := copy(b, hdr)
	rng := rand.New(rand.NewPCG(hashOf(hdr), uint64(size)))
	for i := n; i < len(b); i += 8 {
		v := rng.Uint64()
		for k := 0; k < 8 && i+k < len(b); k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	err := retryFull(waitedMS, func() error {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, b, 0o644)
	})
	if err != nil {
		return File{}, err
	}
	sum := sha256.Sum256(b)
	return File{Rank: rank, Name: name, Size: size, SHA256: hex.EncodeToString(sum[:])}, nil
}
