package integration

// Benchmarks of the mount. They move gigabytes and print numbers instead
// of asserting times; each runs its measurement once:
//
//	go test -run XXX -bench BenchmarkMount -benchtime 1x -v -timeout 30m ./integration/

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// mntPatternFile is a FileSource of size bytes generated on the fly (cheap:
// these benchmarks are about moving bytes, not about their values).
func mntPatternFile(name string, size int64, seed uint64) txn.FileSource {
	return txn.FileSource{Name: name, Size: size, Open: func() (io.ReadCloser, error) {
		return io.NopCloser(io.LimitReader(&mntPatternReader{x: seed}, size)), nil
	}}
}

type mntPatternReader struct{ x uint64 }

func (r *mntPatternReader) Read(p []byte) (int, error) {
	for i := range p {
		if i%8 == 0 {
			r.x = r.x*6364136223846793005 + 1442695040888963407
		}
		p[i] = byte(r.x >> (8 * (i % 8)))
	}
	return len(p), nil
}

// mntBenchStream makes a 2-rank stream of steps whose rank 0 holds stepBytes
// in files (the first tiny, so the others start off chunk boundaries) and
// whose rank 1 is one small file.
func mntBenchStream(t testing.TB, url string, steps int, stepBytes int64) *txn.Log {
	t.Helper()
	start := time.Now()
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: txn.DefaultChunkSize, SnapshotEvery: 10})
	p, err := txn.OpenProducer(context.Background(), l, txn.ProducerOptions{ID: "bench", Logger: testLogger(t, slog.LevelInfo)})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	const nfiles = 8
	var waits []*txn.Pending
	for s := range steps {
		files := []txn.FileSource{mntPatternFile("a-first.bin", 1000, uint64(s))}
		each := (stepBytes - 1000) / (nfiles - 1)
		for i := 1; i < nfiles; i++ {
			size := each
			if i == nfiles-1 {
				size = stepBytes - 1000 - each*(nfiles-2)
			}
			files = append(files, mntPatternFile(fmt.Sprintf("f%02d.bin", i), size, uint64(s*100+i)))
		}
		pd, err := p.Append(context.Background(), txn.Batch{Name: fmt.Sprintf("b%06d", s),
			Ranks: [][]txn.FileSource{files, {mntPatternFile("small.bin", 4096, 1)}}})
		if err != nil {
			t.Fatal(err)
		}
		waits = append(waits, pd)
	}
	for _, pd := range waits {
		if _, err := pd.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("produced %d steps of %d MiB (rank 0) in %s", steps, stepBytes>>20, time.Since(start).Round(time.Millisecond))
	// Let writeback finish now rather than during the measurements.
	syscall.Sync()
	return l
}

func mntMbps(bytes int64, d time.Duration) float64 { return float64(bytes) / d.Seconds() / 1e6 }

// mntDirectRead reads the rank-0 packs of every step with the store client:
// one GET per pack streamed (get), or 1 MiB ranged GETs, 8 in parallel,
// each chunk checked against its CRC32C as the mount does (ranged).
func mntDirectRead(t testing.TB, l *txn.Log, ranged bool) (int64, time.Duration) {
	t.Helper()
	ctx := context.Background()
	st, err := l.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	start := time.Now()
	for _, tgb := range st.Steps {
		pk, err := l.Pack(ctx, tgb, 0)
		if err != nil {
			t.Fatal(err)
		}
		total += pk.Size
		if !ranged {
			if _, err := l.Store.GetRange(ctx, pk.Key, pk.Off, pk.Size); err != nil {
				t.Fatal(err)
			}
			continue
		}
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(8)
		for i := range pk.Chunks {
			g.Go(func() error {
				off := int64(i) * l.Config.ChunkSize
				b, err := l.Store.GetRange(gctx, pk.Key, pk.Off+off, min(l.Config.ChunkSize, pk.Size-off))
				if err != nil {
					return err
				}
				if txn.CRC32C(b) != pk.Chunks[i] {
					return fmt.Errorf("%s chunk %d: CRC mismatch", pk.Key, i)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	return total, time.Since(start)
}

// mntMountRun is one measured pass through a lakefs-mount process.
type mntMountRun struct {
	bytes     int64
	elapsed   time.Duration
	stepTimes []time.Duration
	fetched   float64
	served    float64
	peakRSS   int64 // VmHWM of the mount process, bytes
}

// mntReadThroughMount starts lakefs-mount with extra flags, reads every rank-0
// file of every step in order with 1 MiB reads (like cat or a dataloader),
// sleeping gap between steps (the training step's compute), and stops it.
func mntReadThroughMount(t testing.TB, bin, url string, steps int, gap time.Duration, flags ...string) mntMountRun {
	t.Helper()
	mnt := t.TempDir()
	addr := freeAddr(t)
	args := append([]string{"--store", url, "--ranks", "0", "--metrics-addr", addr, "--node-id", "bench"}, flags...)
	pr := mntStartMount(t, bin, append(args, mnt)...)
	mntWaitMounted(t, pr, mnt)
	buf := make([]byte, 1<<20)
	var run mntMountRun
	start := time.Now()
	for s := range steps {
		stepStart := time.Now()
		dir := filepath.Join(mnt, "steps", strconv.Itoa(s), "rank-0")
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			f, err := os.Open(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			for {
				n, err := f.Read(buf)
				run.bytes += int64(n)
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			f.Close()
		}
		run.stepTimes = append(run.stepTimes, time.Since(stepStart))
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	run.elapsed = time.Since(start)
	m := scrapeValues(t, addr)
	run.fetched, run.served = m["lakefs_mount_bytes_fetched_total"], m["lakefs_mount_bytes_served_total"]
	run.peakRSS = mntProcStatus(t, pr.cmd.Process.Pid, "VmHWM")
	pr.cmd.Process.Signal(os.Interrupt)
	if code := pr.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("lakefs-mount exit %d:\n%s", code, pr.stderr)
	}
	return run
}

// mntProcStatus returns a kB field of /proc/<pid>/status, in bytes.
func mntProcStatus(t testing.TB, pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

func mntP95(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)*95+99)/100-1]
}

// BenchmarkMountThroughput prints sequential read throughput of one
// rank's steps through the mount next to reading the same packs with the
// store client, the read amplification, and the p95 time to read a whole
// step with prefetching on and off (with a training-like pause between
// steps, during which prefetching can work). It runs on file://, on
// file:// with 20 ms added to every GET (a remote store), and on S3.
func BenchmarkMountThroughput(b *testing.B) {
	mntRequireFUSE(b)
	bin := mntBuildMount(b)
	for _, be := range mntBackends(b) {
		b.Run(be.name, func(b *testing.B) { mntBenchThroughput(b, bin, be.url(b), 0) })
		if be.name == "file" {
			b.Run(be.name+"+20ms", func(b *testing.B) { mntBenchThroughput(b, bin, be.url(b), 20*time.Millisecond) })
		}
	}
}

func mntBenchThroughput(t testing.TB, bin, url string, latency time.Duration) {
	const steps, stepBytes, cacheSize = 48, 32 << 20, "256MiB"
	l := mntBenchStream(t, url, steps, stepBytes)
	if latency > 0 {
		f := store.NewFaulty(l.Store, 1)
		f.Set(store.Fault{Latency: latency}, store.OpGetRange, store.OpGet)
		l = &txn.Log{Store: f, Config: l.Config}
	}
	flags := []string{"--cache-size", cacheSize, "--store-latency", latency.String()}
	// Warm up: the page cache of file://, connections of S3, and this VM's
	// memory, whose first touch is slow (a mount fills the page cache with
	// what it serves). Then take the better of two runs for each way of
	// reading.
	mntDirectRead(t, l, false)
	mntReadThroughMount(t, bin, url, steps, 0, flags...)
	best := func(f func() (int64, time.Duration)) (int64, time.Duration) {
		n, d := f()
		if n2, d2 := f(); d2 < d {
			n, d = n2, d2
		}
		return n, d
	}
	n, dGet := best(func() (int64, time.Duration) { return mntDirectRead(t, l, false) })
	_, dRanged := best(func() (int64, time.Duration) { return mntDirectRead(t, l, true) })
	var on mntMountRun
	for range 2 {
		r := mntReadThroughMount(t, bin, url, steps, 0, append(flags, "--prefetch-steps", "2")...)
		if on.elapsed == 0 || r.elapsed < on.elapsed {
			on = r
		}
	}
	off := mntReadThroughMount(t, bin, url, steps, 0, append(flags, "--prefetch-steps", "0")...)
	if on.bytes != n || off.bytes != n {
		t.Fatalf("read %d and %d bytes through the mount, the packs hold %d", on.bytes, off.bytes, n)
	}
	direct := max(mntMbps(n, dGet), mntMbps(n, dRanged))
	t.Logf("%s, %s added per GET: %d MiB of rank 0 in %d steps, --cache-size %s", url[:strings.Index(url, ":")], latency, n>>20, steps, cacheSize)
	t.Logf("  direct, one GET per pack:          %7.0f MB/s", mntMbps(n, dGet))
	t.Logf("  direct, 8 x 1 MiB ranged + CRC:    %7.0f MB/s", mntMbps(n, dRanged))
	t.Logf("  mount, prefetch 2:                 %7.0f MB/s (%.0f%% of the better direct), fetched/served %.4f",
		mntMbps(on.bytes, on.elapsed), 100*mntMbps(on.bytes, on.elapsed)/direct, on.fetched/on.served)
	t.Logf("  mount, prefetch 0:                 %7.0f MB/s (%.0f%% of the better direct), fetched/served %.4f",
		mntMbps(off.bytes, off.elapsed), 100*mntMbps(off.bytes, off.elapsed)/direct, off.fetched/off.served)

	// Step latency with a compute pause between steps. The first step is
	// left out: nothing can prefetch it.
	gap := 100 * time.Millisecond
	gOn := mntReadThroughMount(t, bin, url, steps, gap, append(flags, "--prefetch-steps", "2")...)
	gOff := mntReadThroughMount(t, bin, url, steps, gap, append(flags, "--prefetch-steps", "0")...)
	t.Logf("  time to read a whole step (%d MiB), %s pause between steps: p95 %s with prefetch 2, %s with prefetch 0 (median %s / %s)",
		stepBytes>>20, gap, mntP95(gOn.stepTimes[1:]).Round(100*time.Microsecond), mntP95(gOff.stepTimes[1:]).Round(100*time.Microsecond),
		mntMedian(gOn.stepTimes[1:]).Round(100*time.Microsecond), mntMedian(gOff.stepTimes[1:]).Round(100*time.Microsecond))
}

func mntMedian(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkMountMemory reads 4 GiB through a mount with --cache-size
// 256MiB and reports the mount process's peak RSS; it must stay under
// 256 MiB + 128 MiB.
func BenchmarkMountMemory(b *testing.B) {
	var t testing.TB = b
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	url, _ := mntFileURL(t)
	const steps, stepBytes = 128, 32 << 20
	mntBenchStream(t, url, steps, stepBytes)
	// VmHWM, the kernel's record of the peak, is read before the mount
	// stops.
	run := mntReadThroughMount(t, bin, url, steps, 0, "--cache-size", "256MiB", "--prefetch-steps", "2")
	limit := int64(256+128) << 20
	t.Logf("read %d MiB through the mount at %.0f MB/s with --cache-size 256MiB: peak RSS %d MiB (limit %d MiB), fetched/served %.4f",
		run.bytes>>20, mntMbps(run.bytes, run.elapsed), run.peakRSS>>20, limit>>20, run.fetched/run.served)
	if run.peakRSS > limit {
		t.Errorf("peak RSS %d MiB exceeds %d MiB", run.peakRSS>>20, limit>>20)
	}
}
