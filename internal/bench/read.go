package bench

// `lakefs-produce bench read`: how close a kernel mount comes to reading the
// same bytes straight from the store. It commits Steps TGBs of Ranks x one
// file of Size bytes to a fresh stream, then for each reader count N reads
// ranks 0..N-1 (one reader per rank, each rank's steps in order) twice in
// the same run: through a lakefs-mount child process with its default flags
// (the page cache dropped after mounting), and directly with the store
// client (one ranged GET per file, the bytes a mount reader gets). Every
// file is read to EOF with 1 MiB reads and its CRC32C checked.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lakestream/lakestream/internal/listen"
	"github.com/lakestream/lakestream/internal/procstat"
	"github.com/lakestream/lakestream/mount/proc"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// ReadOptions configure Read. Zero fields take the defaults named.
type ReadOptions struct {
	// StoreURL is where the stream is built, under a fresh prefix
	// (file:///abs/dir or s3://bucket/prefix?endpoint=...).
	StoreURL string
	Steps    int   // steps committed (default 100)
	Ranks    int   // ranks of the stream (default 4)
	Size     int64 // bytes of each rank's one file per step (default 4 MiB)
	Readers  []int // reader counts, each <= Ranks (default 1, 4)
	Runs     int   // runs of each row; the row with the median MB/s is printed (default 1)
	// MountBin is the lakefs-mount executable (default: next to this
	// executable, else on PATH).
	MountBin string
	// MountArgs are extra lakefs-mount flags (default none: default flags).
	MountArgs []string
	JSON      bool
	Keep      bool // keep the stream
	Logger    *slog.Logger
}

// ReadRow is one line of output: one system read by N readers.
type ReadRow struct {
	System       string  `json:"system"` // "mount" or "direct"
	Readers      int     `json:"readers"`
	Files        int     `json:"files"`
	MBPerS       float64 `json:"mb_per_s"`
	P50Ms        float64 `json:"p50_ms"` // per file: open to EOF
	P95Ms        float64 `json:"p95_ms"`
	FetchedBytes int64   `json:"fetched_bytes"` // from the store
	ServedBytes  int64   `json:"served_bytes"`  // to the readers
	RSSMiB       float64 `json:"rss_mib"`       // the mount's peak RSS (0 for direct)
	CPUSPerGB    float64 `json:"cpu_s_per_gb"`  // reader + mount process CPU per GB served
}

const readBuf = 1 << 20 // what the reader asks read(2) for

func (o *ReadOptions) defaults() error {
	if o.StoreURL == "" {
		return errors.New("bench read: no store URL")
	}
	if strings.HasPrefix(o.StoreURL, "mem://") {
		return errors.New("bench read: a mem:// store cannot be mounted by another process; use file:// or s3://")
	}
	if o.Steps == 0 {
		o.Steps = 100
	}
	if o.Ranks == 0 {
		o.Ranks = 4
	}
	if o.Size == 0 {
		o.Size = 4 << 20
	}
	if len(o.Readers) == 0 {
		o.Readers = []int{1, 4}
	}
	if o.Runs == 0 {
		o.Runs = 1
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Steps < 1 || o.Size < 1 || o.Runs < 1 || o.Ranks < 1 || o.Ranks > txn.MaxRanks {
		return fmt.Errorf("bench read: steps, size and runs must be at least 1 and ranks in [1,%d]", txn.MaxRanks)
	}
	for _, n := range o.Readers {
		if n < 1 || n > o.Ranks {
			return fmt.Errorf("bench read: %d readers: each reader reads its own rank, so use 1..%d (or more --ranks)", n, o.Ranks)
		}
	}
	if o.MountBin == "" {
		o.MountBin = proc.FindBin()
	}
	if o.MountBin == "" {
		return errors.New("bench read: lakefs-mount not found next to this executable or on PATH; build it (make build) or pass --mount-bin")
	}
	return nil
}

// OpenRun opens prefix name under the store URL base for one run. done
// deletes everything under it, unless keep, and logs a failure to: a
// leftover prefix is worth a warning, not a failed run.
func OpenRun(ctx context.Context, base, name string, keep bool, logger *slog.Logger) (s store.Store, url string, done func(), err error) {
	url, err = store.SubURL(base, name)
	if err != nil {
		return nil, "", nil, err
	}
	s, err = store.Open(ctx, url)
	if err != nil {
		return nil, "", nil, err
	}
	done = func() {
		if keep {
			return
		}
		if err := store.DeleteAll(context.WithoutCancel(ctx), s); err != nil {
			logger.Warn("bench: cleaning up the run's prefix", "store", store.Redact(url), "err", err)
		}
	}
	return s, url, done, nil
}

// Read builds the stream, measures each (system, readers) row and prints it.
func Read(ctx context.Context, o ReadOptions, out io.Writer) error {
	if err := o.defaults(); err != nil {
		return err
	}
	s, url, done, err := OpenRun(ctx, o.StoreURL, "bench-read-"+randomHex(6), o.Keep, o.Logger)
	if err != nil {
		return err
	}
	defer done()
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: o.Ranks})
	if err != nil {
		return err
	}
	files, err := writeSteps(ctx, l, &o)
	if err != nil {
		return err
	}
	pr := &readPrinter{out: out, json: o.JSON}
	for _, n := range o.Readers {
		for _, system := range []string{"direct", "mount"} {
			var rows []ReadRow
			for range o.Runs {
				var r ReadRow
				var err error
				if system == "mount" {
					r, err = readMount(ctx, &o, url, files, n)
				} else {
					r, err = readDirect(ctx, &o, s, files, n)
				}
				if err != nil {
					return fmt.Errorf("%s, %d readers: %w", system, n, err)
				}
				rows = append(rows, r)
			}
			slices.SortFunc(rows, func(a, b ReadRow) int { return cmpFloat(a.MBPerS, b.MBPerS) })
			pr.row(rows[len(rows)/2])
		}
	}
	return nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// benchFile is one file of the stream as both systems read it.
type benchFile struct {
	step int64
	rank int
	path string // in the mount, relative to its root
	key  string // in the store: the bytes at [off, off+size) of key
	off  int64
	size int64
	crc  uint32
}

// writeSteps commits o.Steps TGBs of random bytes and returns, per rank,
// its files in step order, located through the log as a reader would.
func writeSteps(ctx context.Context, l *txn.Log, o *ReadOptions) ([][]benchFile, error) {
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "bench-read", Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	rng := rand.NewChaCha8([32]byte{1})
	data := make([][]byte, o.Ranks)
	for s := range o.Steps {
		b := txn.Batch{Name: fmt.Sprintf("b%08d", s), Cursor: fmt.Sprintf("b%08d", s), Ranks: make([][]txn.FileSource, o.Ranks)}
		for r := range b.Ranks {
			if data[r] == nil {
				data[r] = make([]byte, o.Size)
			}
			_, _ = rng.Read(data[r]) // never fails
			b.Ranks[r] = []txn.FileSource{txn.BytesFile("sample.bin", data[r])}
		}
		pd, err := p.Append(ctx, b)
		if err != nil {
			return nil, err
		}
		// One TGB in flight: the buffers are reused for the next.
		if _, err := pd.Wait(ctx); err != nil {
			return nil, err
		}
	}
	if err := p.Close(ctx); err != nil {
		return nil, err
	}
	st, err := l.Load(ctx)
	if err != nil {
		return nil, err
	}
	files := make([][]benchFile, o.Ranks)
	for _, t := range st.Steps {
		for r := range o.Ranks {
			pk, err := l.Pack(ctx, t, r)
			if err != nil {
				return nil, fmt.Errorf("step %d rank %d: %w", t.Step, r, err)
			}
			for _, f := range pk.Files {
				files[r] = append(files[r], benchFile{
					step: t.Step, rank: r,
					path: filepath.Join("steps", strconv.FormatInt(t.Step, 10), "rank-"+strconv.Itoa(r), filepath.FromSlash(f.Name)),
					key:  pk.Key, off: pk.Off + f.Off, size: f.Size, crc: f.CRC,
				})
			}
		}
	}
	return files, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// readAll runs one reader per rank 0..n-1 over its files in order and
// returns the per-file times, the bytes read and the wall time.
func readAll(ctx context.Context, files [][]benchFile, n int, read func(context.Context, benchFile, []byte) error) ([]float64, int64, time.Duration, error) {
	var (
		mu    sync.Mutex
		times []float64
		bytes int64
		first error
		wg    sync.WaitGroup
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, readBuf)
			for _, f := range files[r] {
				t0 := time.Now()
				err := read(ctx, f, buf)
				d := time.Since(t0)
				mu.Lock()
				if err != nil {
					if first == nil {
						first = err
						cancel()
					}
					mu.Unlock()
					return
				}
				times = append(times, ms(d))
				bytes += f.size
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return times, bytes, time.Since(start), first
}

// readDirect reads the files with ranged GETs of the store client.
func readDirect(ctx context.Context, o *ReadOptions, s store.Store, files [][]benchFile, n int) (ReadRow, error) {
	dropCaches(o.Logger)
	cpu0 := procstat.SelfCPU()
	times, bytes, wall, err := readAll(ctx, files, n, func(ctx context.Context, f benchFile, _ []byte) error {
		b, err := s.GetRange(ctx, f.key, f.off, f.size)
		if err != nil {
			return err
		}
		if got := crc32.Checksum(b, castagnoli); got != f.crc {
			return fmt.Errorf("%s: CRC32C %08x, want %08x", f.path, got, f.crc)
		}
		return nil
	})
	if err != nil {
		return ReadRow{}, err
	}
	return row("direct", n, times, bytes, wall, bytes, bytes, 0, procstat.SelfCPU()-cpu0), nil
}

// readMount reads the files through a fresh lakefs-mount child process.
func readMount(ctx context.Context, o *ReadOptions, url string, files [][]benchFile, n int) (ReadRow, error) {
	m, err := startMount(ctx, o, url)
	if err != nil {
		return ReadRow{}, err
	}
	defer m.stop(o.Logger)
	dropCaches(o.Logger)
	cpu0, mcpu0 := procstat.SelfCPU(), procstat.CPU(m.Pid())
	times, bytes, wall, err := readAll(ctx, files, n, func(ctx context.Context, f benchFile, buf []byte) error {
		return readFile(filepath.Join(m.Mountpoint(), f.path), f, buf)
	})
	if err != nil {
		return ReadRow{}, err
	}
	cpu := procstat.SelfCPU() - cpu0 + procstat.CPU(m.Pid()) - mcpu0
	rss := procstat.PeakRSS(m.Pid())
	fetched, served, err := m.counters(ctx)
	if err != nil {
		return ReadRow{}, err
	}
	return row("mount", n, times, bytes, wall, fetched, served, rss, cpu), nil
}

// readFile reads a file to EOF with buf-sized reads and checks its CRC32C.
func readFile(path string, f benchFile, buf []byte) error {
	fd, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fd.Close()
	var crc uint32
	var n int64
	for {
		k, err := fd.Read(buf)
		crc = crc32.Update(crc, castagnoli, buf[:k])
		n += int64(k)
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	if n != f.size || crc != f.crc {
		return fmt.Errorf("%s: %d bytes with CRC32C %08x, want %d bytes with %08x", path, n, crc, f.size, f.crc)
	}
	return nil
}

func row(system string, n int, times []float64, bytes int64, wall time.Duration, fetched, served int64, rss float64, cpu time.Duration) ReadRow {
	return ReadRow{
		System: system, Readers: n, Files: len(times),
		MBPerS: round(float64(bytes)/1e6/wall.Seconds(), 1),
		P50Ms:  round(percentile(times, 50), 2), P95Ms: round(percentile(times, 95), 2),
		FetchedBytes: fetched, ServedBytes: served, RSSMiB: round(rss, 1),
		CPUSPerGB: round(cpu.Seconds()/(float64(bytes)/1e9), 3),
	}
}

// dropCaches empties the page cache, so file:// reads and the mount's
// kernel cache start cold. It needs root; without it the numbers include
// whatever the cache holds, so say so.
func dropCaches(logger *slog.Logger) {
	if err := procstat.DropCaches(); err != nil {
		logger.Warn("bench read: cannot drop the page cache; reads may be served from it", "err", err)
	}
}

// mountProc is one lakefs-mount child process, served and ready.
type mountProc struct {
	*proc.Proc
	metrics string
}

// startMount starts lakefs-mount on a fresh directory and waits until it
// serves the view.
func startMount(ctx context.Context, o *ReadOptions, url string) (*mountProc, error) {
	dir, err := os.MkdirTemp("", "lakefs-bench-read-")
	if err != nil {
		return nil, err
	}
	// The counters come from the mount's metrics: on the address the
	// caller gave (e.g. to profile with --pprof), else on a free port.
	var addr string
	for i, a := range o.MountArgs {
		if v, ok := strings.CutPrefix(a, "--metrics-addr="); ok {
			addr = v
		} else if a == "--metrics-addr" && i+1 < len(o.MountArgs) {
			addr = o.MountArgs[i+1]
		}
	}
	args := []string{"--store", url, "--node-id", "bench-read"}
	if addr == "" {
		if addr, err = listen.FreeAddr(); err != nil {
			return nil, err
		}
		args = append(args, "--metrics-addr", addr)
	}
	args = append(append(args, o.MountArgs...), dir)
	p, err := proc.Start(ctx, proc.Config{Bin: o.MountBin, Args: args})
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &mountProc{Proc: p, metrics: "http://" + addr + "/metrics"}, nil
}

// counters scrapes the mount's bytes fetched and served.
func (m *mountProc) counters(ctx context.Context) (fetched, served int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.metrics, nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("scraping the mount's metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch name {
		case "lakefs_mount_bytes_fetched_total":
			fetched = int64(f)
		case "lakefs_mount_bytes_served_total":
			served = int64(f)
		}
	}
	return fetched, served, sc.Err()
}

func (m *mountProc) stop(logger *slog.Logger) {
	if err := m.Stop(); err != nil {
		logger.Warn("bench read: lakefs-mount did not stop cleanly", "dir", m.Mountpoint(), "err", err)
	}
	os.Remove(m.Mountpoint())
}

// readPrinter writes rows as fixed-width columns (each row as soon as it
// is known: a run takes a while) or as JSON lines.
type readPrinter struct {
	out    io.Writer
	json   bool
	header bool
}

func (p *readPrinter) row(r ReadRow) {
	if p.json {
		b, _ := json.Marshal(r)
		fmt.Fprintf(p.out, "%s\n", b)
		return
	}
	if !p.header {
		fmt.Fprintf(p.out, "%-7s %7s %6s %8s %8s %8s %11s %10s %8s %9s\n",
			"system", "readers", "files", "MB/s", "p50 ms", "p95 ms", "fetched MB", "served MB", "RSS MiB", "CPU s/GB")
		p.header = true
	}
	fmt.Fprintf(p.out, "%-7s %7d %6d %8.1f %8.2f %8.2f %11.1f %10.1f %8.1f %9.3f\n", r.System, r.Readers, r.Files, r.MBPerS,
		r.P50Ms, r.P95Ms, float64(r.FetchedBytes)/1e6, float64(r.ServedBytes)/1e6, r.RSSMiB, r.CPUSPerGB)
}
