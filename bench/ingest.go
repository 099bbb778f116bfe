// Package bench is the engine of `lakefs-produce bench ingest` and of
// `bench read` (read.go). bench ingest runs producers against a store for
// a while and reports the throughput and commit latency each commit
// strategy reaches, next to baselines that write the same bytes with no
// commits (raw-put: the store's Put; plain-put: the SDK or the file
// system with no store layer of ours) and broker peers (the nats and
// nats-fsync strategies, nats.go).
//
// Every combination of strategy, producer count and payload runs on a
// fresh stream under its own prefix of the store (a subdirectory for
// file://, a sub-prefix for s3://, a new store for mem://), which is
// deleted afterwards unless Keep is set, so runs neither interfere nor
// fill the disk.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// RawPut is the baseline strategy: the same bytes written with plain Puts,
// at the same concurrency, with no manifest and no commits.
const RawPut = "raw-put"

// baseline tells the strategies that write bytes without commits.
func baseline(strategy string) bool { return strategy == RawPut || strategy == PlainPut }

// IngestOptions configure Ingest. Zero fields take the defaults named.
type IngestOptions struct {
	// StoreURL is the store to benchmark (file:///abs/dir, s3://bucket/prefix
	// or mem://name). Each run uses a fresh prefix under it.
	StoreURL string
	// NewStore, if set, replaces StoreURL: it returns a fresh, empty store
	// for the run named run. Everything in it is deleted after the run
	// unless Keep is set. Not usable with Processes.
	NewStore func(ctx context.Context, run string) (store.Store, error)

	Producers []int   // producer counts to run (default 1, 4, 16)
	Payloads  []int64 // bytes per TGB, split evenly across Ranks files (default 1 MiB)
	Ranks     int     // ranks of the stream (default 2)
	// Duration is how long each run measures (default 5s). In long-run mode
	// (Versions > 0) it is the length of one reporting window.
	Duration time.Duration
	// Warmup runs each point unmeasured before its first window, so the
	// first window does not pay for cold connections and empty queues.
	Warmup time.Duration
	// Windows is how many back-to-back windows of Duration each point
	// measures, one row each (default 1; not in long-run mode).
	Windows int
	// Strategies to run: dac (the combining commit, what `run` does), naive
	// (each producer commits its own TGBs, one per version, retrying at
	// once) and the baselines raw-put and plain-put (the default is all
	// four), and the broker peers nats and nats-fsync.
	Strategies []string
	// StoreLatency is added to every store operation (a store.Faulty
	// wrapper), to stand for a remote object store.
	StoreLatency time.Duration
	// JSON prints one JSON object per row instead of a table.
	JSON bool
	// Versions > 0 selects long-run mode: each combination runs until its log
	// has this many versions, printing a row per Duration window, while a
	// checkpoint and a gc after every window keep the live window bounded
	// as in a real job. raw-put makes no versions and is skipped.
	Versions uint64
	// MaxQueued bounds the TGBs a producer has uploaded but not yet seen
	// committed; Append waits beyond it, as a producer with bounded staging
	// space would (default txn.DefaultMaxGroup). It keeps a strategy that
	// commits slower than data arrives from queueing without limit.
	MaxQueued int
	// Drain bounds how long producers may take to commit what they queued
	// before the end of a run (default Duration). Those commits fall
	// outside the measured window either way; what is left uncommitted is
	// deleted with the run's prefix.
	Drain time.Duration
	// Processes runs each producer as a separate OS process: WorkerCommand
	// re-executed with the worker protocol on its stdin and stdout (see
	// Worker). It needs a store URL other processes can open (not mem://).
	Processes bool
	// WorkerCommand is the command line of a worker process (default: this
	// executable with the argument "ingest-worker", which the CLI
	// must route to Worker).
	WorkerCommand []string
	// Keep leaves each run's stream in the store.
	Keep bool
	// Logger receives the producers' logs (default: warnings and errors on
	// stderr).
	Logger *slog.Logger
}

// DefaultWorkerArgs are the arguments after the executable that make the
// CLI run Worker.
var DefaultWorkerArgs = []string{"ingest-worker"}

func (o *IngestOptions) defaults() error {
	if len(o.Producers) == 0 {
		o.Producers = []int{1, 4, 16}
	}
	if len(o.Payloads) == 0 {
		o.Payloads = []int64{1 << 20}
	}
	if o.Ranks == 0 {
		o.Ranks = 2
	}
	if o.Duration == 0 {
		o.Duration = 5 * time.Second
	}
	if o.Windows == 0 {
		o.Windows = 1
	}
	if len(o.Strategies) == 0 {
		o.Strategies = []string{"dac", "naive", RawPut, PlainPut}
	}
	if o.MaxQueued == 0 {
		o.MaxQueued = txn.DefaultMaxGroup
	}
	if o.Drain == 0 {
		o.Drain = o.Duration
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	switch {
	case o.StoreURL == "" && o.NewStore == nil:
		return errors.New("bench: no store; pass a store URL")
	case o.Ranks < 1:
		return fmt.Errorf("bench: %d ranks; use at least 1", o.Ranks)
	case o.Duration < 0 || o.Drain < 0 || o.StoreLatency < 0 || o.Warmup < 0 || o.MaxQueued < 1 || o.Windows < 1:
		return errors.New("bench: durations must not be negative, max-queued and windows must be at least 1")
	case o.Processes && (o.NewStore != nil || strings.HasPrefix(o.StoreURL, "mem:")):
		return errors.New("bench: separate processes need a store they can all open; use file:// or s3://, not mem://")
	}
	for _, n := range o.Producers {
		if n < 1 {
			return fmt.Errorf("bench: %d producers; use at least 1", n)
		}
	}
	for _, b := range o.Payloads {
		if b < int64(o.Ranks) {
			return fmt.Errorf("bench: payload of %d bytes cannot fill %d ranks; use at least one byte per rank", b, o.Ranks)
		}
	}
	for _, s := range o.Strategies {
		if isNATS(s) {
			continue // a broker peer (nats.go), not a commit strategy
		}
		if err := checkStrategy(s); err != nil {
			return err
		}
	}
	return nil
}

// Ingest runs every combination of o.Strategies, o.Producers and o.Payloads
// in that nesting order and writes one row per run (per window in long-run
// mode) to out as it finishes.
func Ingest(ctx context.Context, o IngestOptions, out io.Writer) error {
	if err := o.defaults(); err != nil {
		return err
	}
	pr := newPrinter(out, o.JSON, o.Versions > 0, o.Strategies)
	defer pr.flush()
	stamp := time.Now().UTC().Format("20060102T150405") + "-" + randomHex(3)
	for _, strategy := range o.Strategies {
		if o.Versions > 0 && (baseline(strategy) || isNATS(strategy)) {
			o.Logger.Info(strategy + " makes no versions; skipped in long-run mode")
			continue
		}
		for _, n := range o.Producers {
			for _, payload := range o.Payloads {
				name := fmt.Sprintf("bench-%s/%s-p%d-b%d", stamp, slug(strategy), n, payload)
				c := combo{strategy: strategy, producers: n, payload: payload, load1: Load1()}
				run := func() error { return runOne(ctx, &o, name, c, pr) }
				if isNATS(strategy) {
					run = func() error { return runNATS(ctx, &o, c, pr) }
				}
				if err := run(); err != nil {
					return fmt.Errorf("bench %s, %d producers, %d-byte payload: %w", strategy, n, payload, err)
				}
			}
		}
	}
	return nil
}

// combo is one run's variables.
type combo struct {
	strategy  string
	producers int
	payload   int64
	load1     float64 // the 1-minute load average when the point started
}

// Load1 is the 1-minute load average (0 where /proc/loadavg is missing):
// a point that starts on a busy machine is marked in the report.
func Load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	if _, err := fmt.Sscanf(string(b), "%f", &l); err != nil {
		return 0
	}
	return l
}

// target is the fresh store of one run.
type target struct {
	url   string // for worker processes; "" when only the Store value exists
	store store.Store
	clean func(ctx context.Context) error
}

// openTarget opens the fresh prefix name under the configured store.
func openTarget(ctx context.Context, o *IngestOptions, name string) (*target, error) {
	var t target
	switch {
	case o.NewStore != nil:
		s, err := o.NewStore(ctx, name)
		if err != nil {
			return nil, err
		}
		t.store = s
	case strings.HasPrefix(o.StoreURL, "mem:"):
		// Opening a mem:// URL gives a new, empty store: the fresh prefix.
		s, err := store.Open(ctx, o.StoreURL)
		if err != nil {
			return nil, err
		}
		t.store = s
		t.clean = func(context.Context) error { return nil } // garbage once dropped
	default:
		u, err := store.SubURL(o.StoreURL, name)
		if err != nil {
			return nil, err
		}
		s, err := store.Open(ctx, u)
		if err != nil {
			return nil, err
		}
		t.url, t.store = u, s
		if pu, err := url.Parse(u); err == nil && pu.Scheme == "file" {
			dir := filepath.FromSlash(pu.Path)
			// Faster than deleting object by object, and takes the
			// directories and the store's temporary files with it.
			t.clean = func(context.Context) error {
				if err := os.RemoveAll(dir); err != nil {
					return err
				}
				// The directory of this Ingest's runs goes with its last
				// run; before that it is not empty and stays.
				_ = os.Remove(filepath.Dir(dir))
				return nil
			}
		}
	}
	if t.clean == nil {
		s := t.store
		t.clean = func(ctx context.Context) error { return store.DeleteAll(ctx, s) }
	}
	return &t, nil
}

// instrument wraps s so that every operation takes d longer and is
// counted (requests by kind per TGB).
func instrument(s store.Store, d time.Duration) *store.Faulty {
	f := store.NewFaulty(s, 1)
	if d > 0 {
		f.Set(store.Fault{Latency: d})
	}
	return f
}

// runOne runs one combination on a fresh stream and prints its rows: the
// workers start, register, are released together, and are measured for
// o.Duration or, with o.Versions, window by window until the log is that
// long.
func runOne(ctx context.Context, o *IngestOptions, name string, c combo, pr *printer) (err error) {
	t, err := openTarget(ctx, o, name)
	if err != nil {
		return err
	}
	if !o.Keep {
		defer func() {
			// Clean up even when the run was interrupted.
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
			defer cancel()
			if cerr := t.clean(cctx); cerr != nil && err == nil {
				err = fmt.Errorf("cleaning up %s: %w", name, cerr)
			}
		}()
	}
	s := instrument(t.store, o.StoreLatency)
	var l *txn.Log
	if !baseline(c.strategy) {
		l, err = txn.Create(ctx, s, txn.CreateOptions{Ranks: o.Ranks})
		if err != nil {
			return err
		}
	}

	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := newRecorder(o.Versions)
	if !o.Processes {
		rec.counts = func() requests { return countRequests(s) }
	}
	f := startFleet(rctx, o, c, t.url, s, l, rec)
	// Whatever happens, stop the workers and wait for them before the
	// store is cleaned up.
	defer func() {
		f.halt()
		cancelLater := time.AfterFunc(o.Drain+time.Minute, cancel)
		defer cancelLater.Stop()
		if werr := f.wait(); werr != nil && err == nil {
			err = werr
		}
	}()
	// All producers are registered before the clock starts: registration
	// is a commit too, and it is not what is measured.
	if err := f.registered(ctx, c.producers); err != nil {
		return err
	}
	start := time.Now()
	rec.begin(start, o.Versions == 0, o.Warmup+time.Duration(o.Windows)*o.Duration)
	close(f.start)
	row := func(w window) Row { return w.row(c, o) }
	if o.Versions == 0 {
		return shortRun(ctx, o, rec, f, pr, row, start, c.producers)
	}
	return longRun(ctx, o, l, rec, f, pr, row)
}

// startFleet starts c.producers workers, as processes or goroutines,
// waiting for f.start.
func startFleet(ctx context.Context, o *IngestOptions, c combo, url string, s store.Store, l *txn.Log, rec *recorder) *fleet {
	f := &fleet{start: make(chan struct{}), stop: make(chan struct{}), ready: make(chan struct{}, c.producers), errs: make(chan error, c.producers)}
	for i := range c.producers {
		sp := spec{
			StoreURL: url, StoreLatency: o.StoreLatency,
			ID: fmt.Sprintf("bench-%03d", i), Strategy: c.strategy,
			Payload: c.payload, Ranks: o.Ranks, MaxQueued: o.MaxQueued, Drain: o.Drain,
		}
		if o.Processes {
			f.spawn(ctx, o, sp, rec)
		} else {
			f.goroutine(ctx, s, l, sp, rec, o.Logger)
		}
	}
	return f
}

// shortRun prints one row per window of o.Duration after the warm-up
// that follows start.
func shortRun(ctx context.Context, o *IngestOptions, rec *recorder, f *fleet, pr *printer, row func(window) Row, start time.Time, producers int) error {
	last := func() {
		f.halt()
		if o.Processes {
			rec.waitStops(producers, 10*time.Second)
		}
	}
	return measureWindows(ctx, o, rec, start, f.errs, last, func(w window) { pr.print(row(w)) })
}

// measureWindows cuts rec at the end of the warm-up (that window is
// dropped) and of each of o.Windows windows after it, handing each
// measured one to emit; before the last cut it calls last (stop the
// producers). Windows are back to back: a TGB is counted in the window
// its step became visible in.
func measureWindows(ctx context.Context, o *IngestOptions, rec *recorder, start time.Time, errs <-chan error, last func(), emit func(window)) error {
	ends := make([]time.Time, 0, o.Windows+1)
	if o.Warmup > 0 {
		ends = append(ends, start.Add(o.Warmup))
	}
	for i := range o.Windows {
		ends = append(ends, start.Add(o.Warmup+time.Duration(i+1)*o.Duration))
	}
	for i, end := range ends {
		timer := time.NewTimer(time.Until(end))
		select {
		case <-timer.C:
		case err := <-errs:
			timer.Stop()
			return err
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		if i == len(ends)-1 {
			last()
		}
		w := rec.cut(end)
		if o.Warmup > 0 && i == 0 {
			continue
		}
		w.n = i + 1
		if o.Warmup > 0 {
			w.n = i
		}
		emit(w)
	}
	return nil
}

// longRun prints a row per window until the log reaches o.Versions
// versions, checkpointing and collecting garbage after every window.
func longRun(ctx context.Context, o *IngestOptions, l *txn.Log, rec *recorder, f *fleet, pr *printer, row func(window) Row) error {
	ticker := time.NewTicker(o.Duration)
	defer ticker.Stop()
	var admin sync.WaitGroup
	defer admin.Wait()
	busy := false
	var mu sync.Mutex
	for {
		done := false
		select {
		case <-ticker.C:
		case <-rec.reached:
			done = true
		case err := <-f.errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
		if done {
			f.halt()
		}
		pr.print(row(rec.cut(time.Now())))
		if done {
			return nil
		}
		mu.Lock()
		if !busy {
			busy = true
			admin.Add(1)
			go func() {
				defer admin.Done()
				if err := collect(ctx, l, o.Logger); err != nil && ctx.Err() == nil {
					o.Logger.Warn("checkpoint and gc failed; the live window grows until the next one succeeds", "err", err)
				}
				mu.Lock()
				busy = false
				mu.Unlock()
			}()
		}
		mu.Unlock()
	}
}

// collect records a checkpoint at the head and runs gc without a grace
// period (nothing reads the stream), as a training job and its gc would.
func collect(ctx context.Context, l *txn.Log, logger *slog.Logger) error {
	st, err := l.Load(ctx)
	if err != nil {
		return err
	}
	head, ok := st.Head()
	if !ok {
		return nil
	}
	if _, err := txn.RecordCheckpoint(ctx, l, head, logger); err != nil {
		return err
	}
	_, err = txn.GC(ctx, l, txn.GCOptions{Grace: 0, Now: time.Now, Logger: logger})
	return err
}

// fleet is the workers of one run and the signals they share.
type fleet struct {
	start, stop chan struct{} // closed to start and to stop every worker
	ready       chan struct{} // one send per worker, once registered
	errs        chan error    // buffered; a worker's failure
	wg          sync.WaitGroup
	halted      sync.Once // closes stop
}

// halt tells every worker to stop (once; later calls do nothing).
func (f *fleet) halt() { f.halted.Do(func() { close(f.stop) }) }

// registered waits until n workers have registered, or one failed.
func (f *fleet) registered(ctx context.Context, n int) error {
	for range n {
		select {
		case <-f.ready:
		case err := <-f.errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// goroutine starts one in-process worker.
func (f *fleet) goroutine(ctx context.Context, s store.Store, l *txn.Log, sp spec, rec *recorder, logger *slog.Logger) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		err := produce(ctx, s, l, sp, logger, f.start, f.stop, func() { f.ready <- struct{}{} }, rec.add)
		if err != nil {
			f.errs <- fmt.Errorf("%s: %w", sp.ID, err)
		}
	}()
}

// wait waits for every worker and returns the first failure not yet
// returned.
func (f *fleet) wait() error {
	f.wg.Wait()
	select {
	case err := <-f.errs:
		return err
	default:
		return nil
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand documents it)
	return hex.EncodeToString(b)
}

// slug makes a strategy spec usable in a key.
func slug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, s)
}
