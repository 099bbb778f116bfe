package bench

// `lakefs-bench read`: how close a kernel mount comes to reading the same
// bytes straight from the store. It commits Steps TGBs of Ranks x
// FilesPerRank files of Size bytes to a fresh stream (and stores each file
// again as an object of its own under plain/), then for each reader count
// N reads ranks 0..N-1 (one reader per rank, each rank's steps in order)
// once per system: `direct` (the store client, one ranged GET per file:
// the bytes a mount reader gets), `plain-get` (one plain SDK GetObject per
// file object, or a plain file read on file://: nothing of ours in the
// path), `mount-blocks` (a lakefs-mount child process with --passthrough
// off) and `mount` (its default flags). Every file is read to EOF with
// 1 MiB reads and its CRC32C checked; the page cache is dropped before
// each pass.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/internal/procstat"
	"github.com/lakestream/lakestream/mount/proc"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// The systems bench read measures, in the order each reader count runs
// them.
const (
	SystemDirect      = "direct"
	SystemPlainGet    = "plain-get"
	SystemMountBlocks = "mount-blocks"
	SystemMount       = "mount"
)

// ReadSystems is every system, in run order.
func ReadSystems() []string {
	return []string{SystemDirect, SystemPlainGet, SystemMountBlocks, SystemMount}
}

// ReadOptions configure Read. Zero fields take the defaults named.
type ReadOptions struct {
	// StoreURL is where the stream is built, under a fresh prefix
	// (file:///abs/dir or s3://bucket/prefix?endpoint=...).
	StoreURL     string
	Steps        int   // steps committed (default 100)
	Ranks        int   // ranks of the stream (default 4)
	FilesPerRank int   // files of each rank per step (default 1)
	Size         int64 // bytes of each file (default 4 MiB)
	Readers      []int // reader counts, each <= Ranks (default 1, 4)
	Runs         int   // runs of each row; the row with the median MB/s is printed (default 1)
	// Systems are the rows measured per reader count (default
	// ReadSystems()); they run in ReadSystems' order.
	Systems []string
	// MountBin is the lakefs-mount executable (default: next to this
	// executable, else on PATH).
	MountBin string
	// MountArgs are extra lakefs-mount flags for both mount rows (default
	// none: default flags).
	MountArgs []string
	JSON      bool
	Keep      bool // keep the stream
	// Mmap: the mount rows' readers map each file and check it over the
	// mapping instead of reading it with read(2).
	Mmap bool
	// ServerPID, if set, is the store server's process (versitygw on
	// loopback): each row also reports its CPU per GB served, which is
	// what the server spends to send the row's requests.
	ServerPID int
	Logger    *slog.Logger
}

// ReadRow is one line of output: one system read by N readers.
type ReadRow struct {
	System  string `json:"system"` // one of ReadSystems
	Readers int    `json:"readers"`
	Files   int    `json:"files"`
	// Path is how the mount served the files it opened, from its
	// lakefs_mount_opens_total: passthrough, blocks or mixed ("" for the
	// systems without a mount).
	Path         string  `json:"path,omitempty"`
	MBPerS       float64 `json:"mb_per_s"`
	FilesPerS    float64 `json:"files_per_s"`
	P50Ms        float64 `json:"p50_ms"` // per file: open to EOF
	P95Ms        float64 `json:"p95_ms"`
	FetchedBytes int64   `json:"fetched_bytes"` // from the store
	ServedBytes  int64   `json:"served_bytes"`  // to the readers
	// Gets is the GETs of file data sent to the store: the mount's
	// lakefs_mount_gets_total while it was read, one per file for direct
	// and plain-get.
	Gets   int64   `json:"gets"`
	RSSMiB float64 `json:"rss_mib"` // the mount's peak RSS (0 without a mount)
	// StagedPeakMiB is the mount's peak of bytes held in memory files
	// (lakefs_mount_memfile_peak_bytes), outside its RSS.
	StagedPeakMiB float64 `json:"staged_peak_mib"`
	CPUSPerGB     float64 `json:"cpu_s_per_gb"` // reader + mount process CPU per GB served
	// ServerCPUSPerGB is the store server's CPU per GB served
	// (ReadOptions.ServerPID; 0 without it).
	ServerCPUSPerGB float64 `json:"server_cpu_s_per_gb,omitempty"`
	// VsDirect and VsPlainGet compare a mount row with the direct and
	// plain-get rows of the same reader count, when those ran.
	VsDirect   *ReadRatio `json:"vs_direct,omitempty"`
	VsPlainGet *ReadRatio `json:"vs_plain_get,omitempty"`
}

// ReadRatio is one row's figures divided by another's: above 1 is faster
// for MB/s, costlier for CPU and slower for p95.
type ReadRatio struct {
	MBPerS    float64 `json:"mb_per_s"`
	CPUSPerGB float64 `json:"cpu_s_per_gb"`
	P95Ms     float64 `json:"p95_ms"`
}

const readBuf = 1 << 20 // what the reader asks read(2) for

func (o *ReadOptions) defaults() error {
	if o.StoreURL == "" {
		return errors.New("bench read: no store URL")
	}
	if strings.HasPrefix(o.StoreURL, "mem://") {
		return errors.New("bench read: a mem:// store cannot be mounted by another process; use file:// or s3://")
	}
	setDefault(&o.Steps, 100)
	setDefault(&o.Ranks, 4)
	setDefault(&o.FilesPerRank, 1)
	setDefault(&o.Size, 4<<20)
	setDefault(&o.Runs, 1)
	if len(o.Readers) == 0 {
		o.Readers = []int{1, 4}
	}
	if len(o.Systems) == 0 {
		o.Systems = ReadSystems()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if o.Steps < 1 || o.Size < 1 || o.Runs < 1 || o.FilesPerRank < 1 || o.Ranks < 1 || o.Ranks > txn.MaxRanks {
		return fmt.Errorf("bench read: steps, files per rank, size and runs must be at least 1 and ranks in [1,%d]", txn.MaxRanks)
	}
	for _, n := range o.Readers {
		if n < 1 || n > o.Ranks {
			return fmt.Errorf("bench read: %d readers: each reader reads its own rank, so use 1..%d (or more --ranks)", n, o.Ranks)
		}
	}
	if o.ServerPID != 0 {
		if err := unix.Kill(o.ServerPID, 0); err != nil {
			return fmt.Errorf("bench read: --server-pid %d: %w; pass the pid of the store server running now", o.ServerPID, err)
		}
	}
	for _, s := range o.Systems {
		if !slices.Contains(ReadSystems(), s) {
			return fmt.Errorf("bench read: unknown system %q; use %s", s, strings.Join(ReadSystems(), ", "))
		}
	}
	if o.MountBin == "" && (slices.Contains(o.Systems, SystemMount) || slices.Contains(o.Systems, SystemMountBlocks)) {
		o.MountBin = proc.FindBin()
		if o.MountBin == "" {
			return errors.New("bench read: lakefs-mount not found next to this executable or on PATH; build it (make build) or pass --mount-bin")
		}
	}
	return nil
}

func setDefault[T int | int64](v *T, d T) {
	if *v == 0 {
		*v = d
	}
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
	r := &reader{o: &o, s: s, url: url, files: files}
	if slices.Contains(o.Systems, SystemPlainGet) {
		if r.plain, err = newPlainGet(ctx, url); err != nil {
			return err
		}
	}
	pr := &readPrinter{out: out, json: o.JSON}
	for _, n := range o.Readers {
		rows, err := r.rows(ctx, n)
		if err != nil {
			return err
		}
		pr.rows(rows)
	}
	return nil
}

// reader measures the rows of one stream.
type reader struct {
	o     *ReadOptions
	s     store.Store
	url   string
	files [][]benchFile
	plain plainGetFunc // nil unless plain-get runs
}

// rows measures every system with n readers, o.Runs times each: the runs
// interleave the systems, so a change in the machine's load during the
// measurement touches all of them alike. Each system's median run by MB/s
// is returned, in ReadSystems' order, mount rows compared with the others.
func (r *reader) rows(ctx context.Context, n int) ([]ReadRow, error) {
	runs := map[string][]ReadRow{}
	for range r.o.Runs {
		for _, system := range ReadSystems() {
			if !slices.Contains(r.o.Systems, system) {
				continue
			}
			row, err := r.one(ctx, system, n)
			if err != nil {
				return nil, fmt.Errorf("%s, %d readers: %w", system, n, err)
			}
			runs[system] = append(runs[system], row)
		}
	}
	var out []ReadRow
	for _, system := range ReadSystems() {
		rs := runs[system]
		if len(rs) == 0 {
			continue
		}
		slices.SortFunc(rs, func(a, b ReadRow) int { return cmpFloat(a.MBPerS, b.MBPerS) })
		out = append(out, rs[len(rs)/2])
	}
	byName := map[string]ReadRow{}
	for _, row := range out {
		byName[row.System] = row
	}
	for i := range out {
		if out[i].System == SystemMount || out[i].System == SystemMountBlocks {
			out[i].VsDirect = ratio(out[i], byName, SystemDirect)
			out[i].VsPlainGet = ratio(out[i], byName, SystemPlainGet)
		}
	}
	return out, nil
}

func (r *reader) one(ctx context.Context, system string, n int) (ReadRow, error) {
	switch system {
	case SystemDirect:
		return readDirect(ctx, r.o, r.s, r.files, n)
	case SystemPlainGet:
		return readPlain(ctx, r.o, r.plain, r.files, n)
	case SystemMountBlocks:
		return readMount(ctx, r.o, r.url, r.files, n, system, "--passthrough=off")
	default:
		return readMount(ctx, r.o, r.url, r.files, n, system)
	}
}

// ratio is row's figures over those of the row of system base, nil when
// that row did not run or has a zero figure.
func ratio(row ReadRow, rows map[string]ReadRow, base string) *ReadRatio {
	b, ok := rows[base]
	if !ok || b.MBPerS == 0 || b.CPUSPerGB == 0 || b.P95Ms == 0 {
		return nil
	}
	return &ReadRatio{
		MBPerS:    round(row.MBPerS/b.MBPerS, 2),
		CPUSPerGB: round(row.CPUSPerGB/b.CPUSPerGB, 2),
		P95Ms:     round(row.P95Ms/b.P95Ms, 2),
	}
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

// benchFile is one file of the stream as the systems read it.
type benchFile struct {
	step  int64
	rank  int
	path  string // in the mount, relative to its root
	key   string // in the store: the bytes at [off, off+size) of key
	off   int64
	size  int64
	crc   uint32
	plain string // the same bytes as an object of their own
}

// plainKey is the key of the object holding file name of (step, rank)
// alone, for plain-get; the mount never looks under plain/.
func plainKey(step int64, rank int, name string) string {
	return fmt.Sprintf("plain/%d/rank-%d/%s", step, rank, name)
}

// fileName is the name of a rank's i-th file per step.
func fileName(o *ReadOptions, i int) string {
	if o.FilesPerRank == 1 {
		return "sample.bin"
	}
	return fmt.Sprintf("sample-%04d.bin", i)
}

// writeSteps commits o.Steps TGBs of random bytes, stores each file again
// as a plain object, and returns, per rank, its files in step order,
// located through the log as a reader would.
func writeSteps(ctx context.Context, l *txn.Log, o *ReadOptions) ([][]benchFile, error) {
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "bench-read", Logger: o.Logger})
	if err != nil {
		return nil, err
	}
	rng := rand.NewChaCha8([32]byte{1})
	data := make([][][]byte, o.Ranks)
	for s := range o.Steps {
		b := txn.Batch{Name: fmt.Sprintf("b%08d", s), Cursor: fmt.Sprintf("b%08d", s), Ranks: make([][]txn.FileSource, o.Ranks)}
		for r := range b.Ranks {
			if data[r] == nil {
				data[r] = make([][]byte, o.FilesPerRank)
			}
			for i := range data[r] {
				if data[r][i] == nil {
					data[r][i] = make([]byte, o.Size)
				}
				_, _ = rng.Read(data[r][i]) // never fails
				b.Ranks[r] = append(b.Ranks[r], txn.BytesFile(fileName(o, i), data[r][i]))
			}
		}
		pd, err := p.Append(ctx, b)
		if err != nil {
			return nil, err
		}
		// One TGB in flight: the buffers are reused for the next.
		step, err := pd.Wait(ctx)
		if err != nil {
			return nil, err
		}
		if err := putPlain(ctx, l.Store, o, step, data); err != nil {
			return nil, err
		}
	}
	if err := p.Close(ctx); err != nil {
		return nil, err
	}
	return locate(ctx, l, o)
}

// putPlain stores each file of step as an object of its own, for
// plain-get, a few at a time.
func putPlain(ctx context.Context, s store.Store, o *ReadOptions, step int64, data [][][]byte) error {
	if !slices.Contains(o.Systems, SystemPlainGet) {
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for r := range data {
		for i, b := range data[r] {
			g.Go(func() error { return store.PutBytes(ctx, s, plainKey(step, r, fileName(o, i)), b) })
		}
	}
	return g.Wait()
}

// locate lists every file of the stream as a reader finds it.
func locate(ctx context.Context, l *txn.Log, o *ReadOptions) ([][]benchFile, error) {
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
					plain: plainKey(t.Step, r, f.Name),
				})
			}
		}
	}
	return files, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// readAll runs one reader per rank 0..n-1 over its files in order and
// returns the per-file times, the bytes read and the wall time. Each
// reader has one buffer of readBuf bytes for all its reads.
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

// readDirect reads the files with ranged GETs of the store client, each
// body read into the reader's one buffer and its CRC32C computed as it
// arrives, while the bytes are in the CPU's cache (a fresh slice per GET,
// checked after the whole file had landed, cost twice the CPU).
func readDirect(ctx context.Context, o *ReadOptions, s store.Store, files [][]benchFile, n int) (ReadRow, error) {
	dropCaches(o.Logger)
	cpu0, scpu0 := procstat.SelfCPU(), o.serverCPU()
	times, bytes, wall, err := readAll(ctx, files, n, func(ctx context.Context, f benchFile, buf []byte) error {
		rc, err := store.GetRangeStream(ctx, s, f.key, f.off, f.size)
		if err != nil {
			return err
		}
		defer rc.Close()
		return checkStream(rc, f.path, f, buf)
	})
	if err != nil {
		return ReadRow{}, err
	}
	r := row(SystemDirect, n, times, bytes, wall, procstat.SelfCPU()-cpu0)
	r.ServerCPUSPerGB = o.serverCPUPerGB(scpu0, bytes)
	r.FetchedBytes, r.ServedBytes, r.Gets = bytes, bytes, int64(len(times))
	return r, nil
}

// readPlain reads each file's own object with nothing of ours between the
// reader and the store.
func readPlain(ctx context.Context, o *ReadOptions, get plainGetFunc, files [][]benchFile, n int) (ReadRow, error) {
	dropCaches(o.Logger)
	cpu0, scpu0 := procstat.SelfCPU(), o.serverCPU()
	times, bytes, wall, err := readAll(ctx, files, n, func(ctx context.Context, f benchFile, buf []byte) error {
		return get(ctx, f, buf)
	})
	if err != nil {
		return ReadRow{}, err
	}
	r := row(SystemPlainGet, n, times, bytes, wall, procstat.SelfCPU()-cpu0)
	r.ServerCPUSPerGB = o.serverCPUPerGB(scpu0, bytes)
	r.FetchedBytes, r.ServedBytes, r.Gets = bytes, bytes, int64(len(times))
	return r, nil
}

// readFile reads a file to EOF with buf-sized reads and checks its CRC32C.
func readFile(path string, f benchFile, buf []byte) error {
	fd, err := os.Open(path)
	if err != nil {
		return err
	}
	defer fd.Close()
	return checkStream(fd, path, f, buf)
}

// checkStream reads r to EOF with buf-sized reads and checks that it holds
// f's bytes, computing the CRC32C of each read as it lands.
func checkStream(r io.Reader, name string, f benchFile, buf []byte) error {
	var crc uint32
	var n int64
	for {
		k, err := r.Read(buf)
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
		return fmt.Errorf("%s: %d bytes with CRC32C %08x, want %d bytes with %08x", name, n, crc, f.size, f.crc)
	}
	return nil
}

// serverCPU is the store server's CPU time so far (0 without ServerPID).
func (o *ReadOptions) serverCPU() time.Duration {
	if o.ServerPID == 0 {
		return 0
	}
	return procstat.CPU(o.ServerPID)
}

// serverCPUPerGB is the server's CPU since since per GB of bytes served.
func (o *ReadOptions) serverCPUPerGB(since time.Duration, bytes int64) float64 {
	if o.ServerPID == 0 || bytes == 0 {
		return 0
	}
	cpu := o.serverCPU() - since
	if cpu < 0 { // the server went away and its CPU reads 0
		return 0
	}
	return round(cpu.Seconds()/(float64(bytes)/1e9), 3)
}

// row is the figures every system has; the caller fills in the rest.
func row(system string, n int, times []float64, bytes int64, wall time.Duration, cpu time.Duration) ReadRow {
	return ReadRow{
		System: system, Readers: n, Files: len(times),
		MBPerS:    round(float64(bytes)/1e6/wall.Seconds(), 1),
		FilesPerS: round(float64(len(times))/wall.Seconds(), 1),
		P50Ms:     round(percentile(times, 50), 2), P95Ms: round(percentile(times, 95), 2),
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

// readPrinter writes rows as fixed-width columns, each mount row followed
// by its ratios to direct and plain-get, or as JSON lines.
type readPrinter struct {
	out    io.Writer
	json   bool
	header bool
}

func (p *readPrinter) rows(rows []ReadRow) {
	for _, r := range rows {
		p.row(r)
	}
}

func (p *readPrinter) row(r ReadRow) {
	if p.json {
		b, _ := json.Marshal(r) // plain fields always encode
		fmt.Fprintf(p.out, "%s\n", b)
		return
	}
	if !p.header {
		fmt.Fprintf(p.out, "%-12s %7s %6s %-11s %8s %8s %8s %8s %10s %10s %7s %8s %10s %9s %10s\n",
			"system", "readers", "files", "path", "MB/s", "files/s", "p50 ms", "p95 ms", "fetched MB", "served MB", "gets", "RSS MiB", "staged MiB", "CPU s/GB", "server s/GB")
		p.header = true
	}
	path := r.Path
	if path == "" {
		path = "-"
	}
	server := "-"
	if r.ServerCPUSPerGB > 0 {
		server = fmt.Sprintf("%.3f", r.ServerCPUSPerGB)
	}
	fmt.Fprintf(p.out, "%-12s %7d %6d %-11s %8.1f %8.1f %8.2f %8.2f %10.1f %10.1f %7d %8.1f %10.1f %9.3f %10s\n",
		r.System, r.Readers, r.Files, path, r.MBPerS, r.FilesPerS, r.P50Ms, r.P95Ms,
		float64(r.FetchedBytes)/1e6, float64(r.ServedBytes)/1e6, r.Gets, r.RSSMiB, r.StagedPeakMiB, r.CPUSPerGB, server)
	for _, c := range []struct {
		name string
		r    *ReadRatio
	}{{SystemDirect, r.VsDirect}, {SystemPlainGet, r.VsPlainGet}} {
		if c.r != nil {
			fmt.Fprintf(p.out, "  %s vs %s: MB/s %.2fx, CPU s/GB %.2fx, p95 %.2fx\n", r.System, c.name, c.r.MBPerS, c.r.CPUSPerGB, c.r.P95Ms)
		}
	}
}
