// Package scale is the engine of `lakefs-produce bench scale`: it measures
// what a stream costs as ranks, files and nodes grow. It builds a stream of
// R ranks x F files x N steps with the real producer, pads its log to V
// versions, copies it to the store under test, and reports:
//
//   - the log: bytes of a step's version record and of its share of a
//     snapshot, the object and index bytes, the store writes per step;
//   - a new reader: Open+Load time of the V-version log, and a real
//     lakefs-mount's time to show the head;
//   - one node: a lakefs-mount's peak RSS after reading one rank of every
//     step, `ls` of a rank directory, and a `find` of one rank;
//   - many nodes: store requests per second per mount of K idle mounts and
//     of K mounts whose readers follow the head while a producer commits,
//     counted by a proxy in front of the S3 endpoint (s3:// stores), and
//     how soon a waiting reader sees each new step.
//
// With Cost it measures instead what a million steps cost in S3 requests,
// split by role and kind, side by side with another build (cost.go).
//
// Everything runs on loopback; every loop is bounded by the options.
package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/bench"
	"github.com/lakestream/lakestream/internal/procstat"
	"github.com/lakestream/lakestream/mount/proc"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Options configure Run. Zero fields take the defaults named.
type Options struct {
	// StoreURL is where each stream is built: a fresh prefix under it per
	// rank count (file:///abs/dir or s3://bucket/prefix?endpoint=...).
	StoreURL string
	Ranks    []int // rank counts to measure (default 64, 1024)
	Files    int   // files per rank per step (default 16)
	FileSize int   // bytes per file (default 64)
	Steps    int   // live steps N (default 100)
	Versions int   // log length V (default 10,000; at least Steps+1)
	// ReadRanks is how many ranks the one-node measurement reads, every
	// file of ranks 0..ReadRanks-1 of every step in step order, as a node
	// serving that many GPUs does (default 1).
	ReadRanks int
	// Mounts are the node counts K for the request-rate rows (default 10;
	// none with an empty, non-nil slice).
	Mounts []int
	// Window is how long each request-rate row is measured (default 20s).
	Window time.Duration
	// MountBin is the lakefs-mount executable (default: next to this
	// executable, else on PATH).
	MountBin string
	JSON     bool
	Keep     bool // keep the streams
	Logger   *slog.Logger
	// PadParallel bounds the log writes in flight while padding (default
	// 32).
	PadParallel int
	// GC runs gc once at the end (in a child process, as if two hours
	// later: every padding version reclaimable) and prints a "gc" row.
	GC bool

	// Cost runs the cost measurement (cost.go) instead of the rows above,
	// once per rank count; it needs an s3:// store with endpoint=.
	Cost bool
	// CompareMountBin, if set, is another build's lakefs-mount, run side
	// by side with MountBin in the cost run.
	CompareMountBin string
	CostNodes       int           // mounts per build (default 8)
	CostRanks       int           // adjacent ranks per mount (default 8)
	CostDeployNodes int           // nodes the cost is priced for (default 128)
	CostSettle      time.Duration // before the window (default 10s)
	StepInterval    time.Duration // between the cost run's commits (default 1s)
}

// Row is one line of output. Kind "stream" rows describe a stream and one
// node reading it; "idle" and "follow" rows the request rates of K mounts.
type Row struct {
	Kind     string `json:"kind"`
	Ranks    int    `json:"ranks"`
	Files    int    `json:"files_per_rank"`
	Steps    int    `json:"steps"`
	Versions int    `json:"versions"`

	BuildS float64 `json:"build_s,omitempty"` // building the stream (not measured)
	PadS   float64 `json:"pad_s,omitempty"`   // of which padding the log

	RecordBytes   int `json:"record_bytes,omitempty"`   // version record of one step
	SnapshotBytes int `json:"snapshot_bytes,omitempty"` // a step's share of a snapshot
	SnapshotTotal int `json:"snapshot_total,omitempty"` // the newest snapshot
	// LogBytesPerStep: the record plus its share of the snapshots (one
	// every SnapshotEvery versions, each holding the live window).
	LogBytesPerStep float64 `json:"log_bytes_per_step,omitempty"`
	ObjectBytes     int64   `json:"object_bytes,omitempty"`    // one step's data object
	IndexBytes      int64   `json:"index_bytes,omitempty"`     // its index
	WritesPerStep   float64 `json:"writes_per_step,omitempty"` // PUTs + creates
	LoadMs          float64 `json:"load_ms,omitempty"`         // Open + Load of the log
	LoadRequests    int64   `json:"load_requests,omitempty"`   // its store requests
	MountHeadMs     float64 `json:"mount_head_ms,omitempty"`   // lakefs-mount start -> head shown
	MountRSSMiB     float64 `json:"mount_rss_mib,omitempty"`   // peak RSS after reading one rank
	LsMsP50         float64 `json:"ls_ms_p50,omitempty"`       // ls of a rank directory, first time
	LsMsMax         float64 `json:"ls_ms_max,omitempty"`       //
	FindMs          float64 `json:"find_ms,omitempty"`         // find of one rank over all steps
	ReadRanks       int     `json:"read_ranks,omitempty"`      // ranks read for the RSS figure
	ReadMBytes      float64 `json:"read_mbytes,omitempty"`     // bytes read for the RSS figure

	StatusMs             float64 `json:"status_ms,omitempty"`
	StatusRequests       int64   `json:"status_requests,omitempty"`
	VerifyMs             float64 `json:"verify_ms,omitempty"` // of the live steps
	VerifyRequests       int64   `json:"verify_requests,omitempty"`
	ProducerOpenMs       float64 `json:"producer_open_ms,omitempty"` // restart: load + register
	ProducerOpenRequests int64   `json:"producer_open_requests,omitempty"`
	ProducerCommitMs     float64 `json:"producer_commit_ms,omitempty"` // restart -> its first step visible
	NodeRanks            int     `json:"node_ranks,omitempty"`         // a mount with --ranks 0-7
	NodeHeadMs           float64 `json:"node_head_ms,omitempty"`
	NodeRSSMiB           float64 `json:"node_rss_mib,omitempty"` // after stat of every file of its ranks

	GC *GCResult `json:"gc,omitempty"`

	Mounts          int     `json:"mounts,omitempty"`
	ReqPerSec       float64 `json:"requests_per_s_per_mount,omitempty"`
	GetPerSec       float64 `json:"gets_per_s_per_mount,omitempty"`
	KiBPerSec       float64 `json:"kib_per_s_per_mount,omitempty"` // response bytes
	SeenP50Ms       float64 `json:"seen_p50_ms,omitempty"`         // commit -> a waiting reader has it
	SeenMaxMs       float64 `json:"seen_max_ms,omitempty"`
	RequestsCounted bool    `json:"requests_counted"`
}

func (o *Options) defaults() error {
	if o.StoreURL == "" {
		return errors.New("bench scale: no store URL")
	}
	if strings.HasPrefix(o.StoreURL, "mem://") {
		return errors.New("bench scale: a mem:// store cannot be mounted by other processes; use file:// or s3://")
	}
	if len(o.Ranks) == 0 {
		o.Ranks = []int{64, 1024}
	}
	if o.Files == 0 {
		o.Files = 16
	}
	if o.FileSize == 0 {
		o.FileSize = 64
	}
	if o.Steps == 0 {
		o.Steps = 100
	}
	if o.ReadRanks == 0 {
		o.ReadRanks = 1
	}
	if o.Versions == 0 {
		o.Versions = 10_000
	}
	o.Versions = max(o.Versions, o.Steps+1)
	if o.Mounts == nil {
		o.Mounts = []int{10}
	}
	if o.Window == 0 {
		o.Window = 20 * time.Second
	}
	if o.PadParallel == 0 {
		o.PadParallel = 32
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	for _, r := range o.Ranks {
		if r < 1 || r > txn.MaxRanks {
			return fmt.Errorf("bench scale: %d ranks out of range [1,%d]", r, txn.MaxRanks)
		}
	}
	if o.Files < 1 || o.FileSize < 1 || o.Steps < 1 {
		return errors.New("bench scale: files, file size and steps must be at least 1")
	}
	if o.MountBin == "" {
		o.MountBin = proc.FindBin()
	}
	o.costDefaults()
	return nil
}

func (o *Options) costDefaults() {
	if o.CostNodes == 0 {
		o.CostNodes = 8
	}
	if o.CostRanks == 0 {
		o.CostRanks = 8
	}
	if o.CostDeployNodes == 0 {
		o.CostDeployNodes = 128
	}
	if o.CostSettle == 0 {
		o.CostSettle = 10 * time.Second
	}
	if o.StepInterval == 0 {
		o.StepInterval = time.Second
	}
}

// Run measures each rank count and prints a row per measurement.
func Run(ctx context.Context, o Options, w io.Writer) error {
	if err := o.defaults(); err != nil {
		return err
	}
	if o.MountBin == "" {
		return errors.New("bench scale: lakefs-mount not found next to this executable or on PATH; build it (make build) or pass --mount-bin")
	}
	out := newPrinter(w, o.JSON)
	defer out.flush()
	for _, r := range o.Ranks {
		if o.Cost {
			if err := runCost(ctx, o, r, w); err != nil {
				return fmt.Errorf("%d ranks: %w", r, err)
			}
			continue
		}
		if err := runRanks(ctx, o, r, out); err != nil {
			return fmt.Errorf("%d ranks: %w", r, err)
		}
	}
	return nil
}

// countingStore counts the writes a producer makes.
type countingStore struct {
	store.Store
	writes atomic.Int64
}

func (c *countingStore) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	c.writes.Add(1)
	return c.Store.Put(ctx, key, r, size)
}

func (c *countingStore) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	c.writes.Add(1)
	return c.Store.Create(ctx, key, r, size)
}

func runRanks(ctx context.Context, o Options, ranks int, out *printer) error {
	run := fmt.Sprintf("scale-%d-%d", ranks, time.Now().UnixNano())
	dst, url, done, err := bench.OpenRun(ctx, o.StoreURL, run, o.Keep, o.Logger)
	if err != nil {
		return err
	}
	defer done()
	row := Row{Kind: "stream", Ranks: ranks, Files: o.Files, Steps: o.Steps, Versions: o.Versions}
	l, err := build(ctx, o, dst, ranks, &row)
	if err != nil {
		return err
	}

	start := time.Now()
	counted := store.NewFaulty(dst, 1)
	dl, err := txn.Open(ctx, counted)
	if err != nil {
		return err
	}
	st, err := dl.Load(ctx)
	if err != nil {
		return err
	}
	row.LoadMs, row.LoadRequests = ms(time.Since(start)), requests(counted)
	if st.Version != uint64(o.Versions) {
		return fmt.Errorf("log has %d versions, built %d", st.Version, o.Versions)
	}
	if err := measureMount(ctx, o, url, st, &row); err != nil {
		return err
	}
	if err := measureStarts(ctx, o, l, url, &row); err != nil {
		return err
	}
	out.row(row)

	for _, k := range o.Mounts {
		for _, mode := range []string{"idle", "follow"} {
			r, err := measureMounts(ctx, o, url, l, k, mode)
			if err != nil {
				return fmt.Errorf("%d %s mounts: %w", k, mode, err)
			}
			r.Ranks, r.Files, r.Steps, r.Versions = ranks, o.Files, o.Steps, o.Versions
			out.row(r)
		}
	}
	if o.GC {
		r, err := measureGC(ctx, o, url)
		if err != nil {
			return fmt.Errorf("gc: %w", err)
		}
		r.Ranks, r.Files, r.Steps, r.Versions = ranks, o.Files, o.Steps, o.Versions
		out.row(r)
	}
	return nil
}

// mountProc is one lakefs-mount child process, served and ready.
type mountProc struct{ *proc.Proc }

// startMount starts lakefs-mount on a fresh directory and waits until it
// serves the view (its state loaded: the head the caller committed).
func startMount(ctx context.Context, o Options, storeURL, node string, extra ...string) (*mountProc, error) {
	dir, err := os.MkdirTemp("", "lakefs-scale-")
	if err != nil {
		return nil, err
	}
	args := append([]string{"--store", storeURL, "--node-id", node, "--cache-size", "64MiB", "--wait", "30s"}, extra...)
	p, err := proc.Start(ctx, proc.Config{Bin: o.MountBin, Args: append(args, dir)})
	if err != nil {
		os.Remove(dir)
		return nil, err
	}
	return &mountProc{p}, nil
}

func (m *mountProc) stop() {
	_ = m.Stop()
	os.Remove(m.Mountpoint())
}

// measureMount starts one lakefs-mount (all ranks shown, default flags),
// times it to the head, lists rank directories, finds one rank over every
// step and reads every file of ReadRanks ranks, then takes its peak RSS.
func measureMount(ctx context.Context, o Options, storeURL string, st *txn.State, row *Row) error {
	start := time.Now()
	m, err := startMount(ctx, o, storeURL, "scale-one")
	if err != nil {
		return err
	}
	defer m.stop()
	row.MountHeadMs = ms(time.Since(start))

	// ls of a rank directory of steps nobody listed before.
	var lss []float64
	for i := range min(20, len(st.Steps)) {
		n := st.Steps[len(st.Steps)-1-i].Step
		t0 := time.Now()
		if _, err := os.ReadDir(filepath.Join(m.Mountpoint(), "steps", strconv.FormatInt(n, 10), "rank-1")); err != nil {
			return err
		}
		lss = append(lss, ms(time.Since(t0)))
	}
	slices.Sort(lss)
	row.LsMsP50, row.LsMsMax = lss[len(lss)/2], lss[len(lss)-1]

	// find of one rank over every step.
	t0 := time.Now()
	var files int
	for _, t := range st.Steps {
		err := filepath.WalkDir(filepath.Join(m.Mountpoint(), "steps", strconv.FormatInt(t.Step, 10), "rank-0"), func(p string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				files++
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	row.FindMs = ms(time.Since(t0))
	if files != len(st.Steps)*o.Files {
		return fmt.Errorf("find saw %d files of rank 0, want %d", files, len(st.Steps)*o.Files)
	}
	// Read every file of ranks 0..ReadRanks-1, step by step.
	var n int64
	for _, t := range st.Steps {
		for r := range min(o.ReadRanks, row.Ranks) {
			dir := filepath.Join(m.Mountpoint(), "steps", strconv.FormatInt(t.Step, 10), "rank-"+strconv.Itoa(r))
			ents, err := os.ReadDir(dir)
			if err != nil {
				return err
			}
			for _, e := range ents {
				b, err := os.ReadFile(filepath.Join(dir, e.Name()))
				if err != nil {
					return err
				}
				n += int64(len(b))
			}
		}
	}
	row.ReadRanks, row.ReadMBytes = min(o.ReadRanks, row.Ranks), float64(n)/1e6
	row.MountRSSMiB = procstat.PeakRSS(m.Pid())
	return nil
}

// measureMounts runs k lakefs-mount processes for o.Window. idle: nobody
// reads. follow: a producer commits a step every second, and a reader per
// mount opens each new step's first file of rank 0 as soon as it can (a
// --wait lookup), as a trainer at the head does.
func measureMounts(ctx context.Context, o Options, storeURL string, l *txn.Log, k int, mode string) (Row, error) {
	row := Row{Kind: mode, Mounts: k}
	mountURL, proxy, err := viaProxy(storeURL)
	if err != nil {
		return row, err
	}
	if proxy != nil {
		defer proxy.srv.Close()
		row.RequestsCounted = true
	}
	st, err := l.Load(ctx)
	if err != nil {
		return row, err
	}
	head, _ := st.Head()
	mounts, err := startMounts(ctx, o, mountURL, mode, k)
	defer stopMounts(mounts)
	if err != nil {
		return row, err
	}
	// Settle: start-up reads (snapshot, versions, first heartbeat) are not
	// the steady state.
	time.Sleep(2 * time.Second)
	var reqs0, gets0, sent0 int64
	if proxy != nil {
		reqs0, gets0 = proxy.totals()
		sent0 = proxy.sent.Load()
	}
	seen, err := runWindow(ctx, o, l, mounts, head, mode)
	if err != nil {
		return row, err
	}
	if proxy != nil {
		secs := o.Window.Seconds() * float64(k)
		reqs, gets := proxy.totals()
		row.ReqPerSec = float64(reqs-reqs0) / secs
		row.GetPerSec = float64(gets-gets0) / secs
		row.KiBPerSec = float64(proxy.sent.Load()-sent0) / 1024 / secs
	}
	if len(seen) > 0 {
		slices.Sort(seen)
		row.SeenP50Ms, row.SeenMaxMs = seen[len(seen)/2], seen[len(seen)-1]
	}
	return row, nil
}

// startMounts starts k mounts of rank 0 in parallel and waits until each
// serves the view. The mounts it returns, even with an error, are for
// stopMounts.
func startMounts(ctx context.Context, o Options, url, mode string, k int) ([]*mountProc, error) {
	mounts := make([]*mountProc, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			mounts[i], errs[i] = startMount(ctx, o, url, fmt.Sprintf("scale-%s-%d", mode, i), "--ranks", "0")
		})
	}
	wg.Wait()
	return slices.DeleteFunc(mounts, func(m *mountProc) bool { return m == nil }), errors.Join(errs...)
}

func stopMounts(mounts []*mountProc) {
	var wg sync.WaitGroup
	for _, m := range mounts {
		wg.Go(m.stop)
	}
	wg.Wait()
}

// runWindow lets o.Window pass. In follow mode a producer commits and a
// reader per mount follows the head; it returns how long after each
// commit a reader saw the step, in ms.
func runWindow(ctx context.Context, o Options, l *txn.Log, mounts []*mountProc, head int64, mode string) ([]float64, error) {
	wctx, cancel := context.WithTimeout(ctx, o.Window)
	defer cancel()
	var seen []float64
	var seenMu sync.Mutex
	g, gctx := errgroup.WithContext(wctx)
	if mode == "follow" {
		committed := make(map[int64]time.Time)
		var cmu sync.Mutex
		g.Go(func() error { return followProducer(gctx, l, o, committed, &cmu) })
		for _, m := range mounts {
			g.Go(func() error {
				return followReader(gctx, m, head, func(n int64) {
					cmu.Lock()
					at, ok := committed[n]
					cmu.Unlock()
					if ok {
						seenMu.Lock()
						seen = append(seen, ms(time.Since(at)))
						seenMu.Unlock()
					}
				})
			})
		}
	}
	<-wctx.Done()
	if err := g.Wait(); err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	return seen, nil
}

// followReader opens each step's first file of rank 0 after head as soon
// as the mount shows it (a --wait lookup), as a trainer at the head does,
// and calls saw with the step; it returns nil when ctx ends.
func followReader(ctx context.Context, m *mountProc, head int64, saw func(step int64)) error {
	for n := head + 1; ; n++ {
		f := filepath.Join(m.Mountpoint(), "steps", strconv.FormatInt(n, 10), "rank-0", "sample-000.bin")
		_, err := os.ReadFile(f)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reader of %s: %w", m.Mountpoint(), err)
		}
		saw(n)
	}
}

// followProducer commits one small step a second and records when each
// became visible (its commit returned).
func followProducer(ctx context.Context, l *txn.Log, o Options, committed map[int64]time.Time, mu *sync.Mutex) error {
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: fmt.Sprintf("scale-follow-%d", time.Now().UnixNano()), Logger: o.Logger})
	if err != nil {
		return nil // the window ended first
	}
	defer p.Close(context.WithoutCancel(ctx))
	data := make([]byte, o.FileSize)
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		b := txn.Batch{Ranks: make([][]txn.FileSource, l.Config.Ranks)}
		for r := range b.Ranks {
			b.Ranks[r] = []txn.FileSource{txn.BytesFile("sample-000.bin", data)}
		}
		pd, err := p.Append(ctx, b)
		if err != nil {
			return nil
		}
		step, err := pd.Wait(ctx)
		if err != nil {
			return nil
		}
		mu.Lock()
		committed[step] = time.Now()
		mu.Unlock()
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

type printer struct {
	json bool
	w    io.Writer
	tw   *tabwriter.Writer
	hdr  map[string]bool
}

func newPrinter(w io.Writer, asJSON bool) *printer {
	return &printer{json: asJSON, w: w, tw: tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight), hdr: map[string]bool{}}
}

func (p *printer) row(r Row) {
	if p.json {
		b, _ := json.Marshal(r)
		fmt.Fprintln(p.w, string(b))
		return
	}
	switch r.Kind {
	case "stream":
		p.header("stream", "ranks\tfiles/rank\tsteps\tversions\tbuild s\trecord B\tlog B/step\tsnapshot B\tobject B\tindex B\twrites/step\tload ms (req)\tmount head ms\tls ms p50/max\tfind ms\tmount RSS MiB (ranks read)\tstatus ms (req)\tverify ms\trestart open (req) / commit ms\tnode of %d ranks: head ms, RSS MiB\t", nodeRanks)
		fmt.Fprintf(p.tw, "%d\t%d\t%d\t%d\t%.0f\t%d\t%.0f\t%d\t%d\t%d\t%.1f\t%.1f (%d)\t%.1f\t%.1f/%.1f\t%.0f\t%.1f (%d)\t%.1f (%d)\t%.0f\t%.1f (%d) / %.1f\t%.0f, %.1f\t\n",
			r.Ranks, r.Files, r.Steps, r.Versions, r.BuildS, r.RecordBytes, r.LogBytesPerStep, r.SnapshotTotal, r.ObjectBytes, r.IndexBytes,
			r.WritesPerStep, r.LoadMs, r.LoadRequests, r.MountHeadMs, r.LsMsP50, r.LsMsMax, r.FindMs, r.MountRSSMiB, r.ReadRanks,
			r.StatusMs, r.StatusRequests, r.VerifyMs, r.ProducerOpenMs, r.ProducerOpenRequests, r.ProducerCommitMs, r.NodeHeadMs, r.NodeRSSMiB)
	case "gc":
		p.header("gc", "\nranks\tversions\tgc ms\tlog objects deleted\tLIST pages\tlistings of the whole log\tdelete calls\trequests\tpeak RSS MiB\t")
		g := r.GC
		fmt.Fprintf(p.tw, "%d\t%d\t%.0f\t%d\t%d\t%d\t%d\t%d\t%.1f\t\n", r.Ranks, r.Versions, g.Ms, g.LogDeleted, g.Lists, g.LogWalks, g.Deletes, g.Requests, g.PeakRSSMiB)
	default:
		p.header("mounts", "\nranks\tmode\tmounts\trequests/s/mount\tGETs/s/mount\tKiB/s/mount\tseen p50 ms\tseen max ms\t")
		req, get, kib := "n/a (file://)", "n/a", "n/a"
		if r.RequestsCounted {
			req, get, kib = fmt.Sprintf("%.3f", r.ReqPerSec), fmt.Sprintf("%.3f", r.GetPerSec), fmt.Sprintf("%.1f", r.KiBPerSec)
		}
		fmt.Fprintf(p.tw, "%d\t%s\t%d\t%s\t%s\t%s\t%.0f\t%.0f\t\n", r.Ranks, r.Kind, r.Mounts, req, get, kib, r.SeenP50Ms, r.SeenMaxMs)
	}
}

// header prints a table's header once; a new table flushes the last.
func (p *printer) header(kind, format string, args ...any) {
	if p.hdr[kind] {
		return
	}
	if len(p.hdr) > 0 {
		p.tw.Flush()
	}
	fmt.Fprintf(p.tw, format+"\n", args...)
	p.hdr[kind] = true
}

func (p *printer) flush() { p.tw.Flush() }
