package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/lakestream/lakestream/internal/cliapp"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/internal/listen"
	"github.com/lakestream/lakestream/stage"
	"github.com/lakestream/lakestream/txn"
)

type runOptions struct {
	Store       string
	Staging     string
	ProducerID  string
	MaxLead     int64
	MetricsAddr string
	Once        bool
	// StartTimeout bounds the wait for an unreachable store at start (0:
	// wait as long as it takes; --once never waits).
	StartTimeout time.Duration
	// OnceTimeout bounds a whole --once pass (0: none): a store that
	// stops answering after the start fails the pass instead of hanging
	// a cron job.
	OnceTimeout time.Duration
	// ConsumerTimeout: how long a silent consumer holds back-pressure
	// (hidden; tests shorten it).
	ConsumerTimeout time.Duration
	// ClockOffset moves this process's clock (hidden; tests).
	ClockOffset time.Duration
	Poll        time.Duration
	GCEvery     time.Duration
	GCGrace     time.Duration
	Progress    string // auto, line, log
	Verbose     bool
}

func runCommand() *cli.Command {
	var o runOptions
	return &cli.Command{
		Name:      "run",
		Usage:     "commit sealed staging batches as steps, exactly once",
		UsageText: "lakefs-produce run --store URL --staging DIR --producer-id ID [--max-lead STEPS] [--metrics-addr HOST:PORT] [--once | --start-timeout DURATION]",
		Description: `Writers create <staging>/<batch>/rank-<r>/<files> (and optional step-level
files in <staging>/<batch>/), then <staging>/<batch>/_SEALED last. Sealed
batches are committed in name order, one step each, and removed once the
commit is durable. Invalid batches move to <staging>/_rejected/<batch>/ with
a _REASON file. Killed at any moment, run resumes where it stopped with
nothing lost and nothing committed twice.

Names: inside a batch, only the top-level _SEALED and _REASON belong to
the protocol; every other file is committed, names beginning with '_'
included (a batch holding its own _REASON is rejected). In the staging
directory, entries beginning with '_' or '.' are never batches, nor is a
symlink to one: run --once says so for each one that is sealed.

While the store is unreachable or answers that it cannot serve (HTTP 5xx,
throttling), or another process holds the staging directory, run waits with
capped backoff (0.5 s to 8 s, one log line per attempt) instead of exiting;
--start-timeout bounds that wait at start, and --once does not wait at
start; a --once pass that meets a store outage later retries within
--once-timeout (30m), then exits 1 naming the store's error. A signal
stops run within 20 s whatever the store does; what is not committed by
then stays staged for the next run.

--once commits every batch sealed at start, prints one line per batch
("NAME -> step N", "NAME rejected: REASON", or "NAME not picked up: WHY")
and exits 0, or 1 when any batch was rejected; without it, run keeps
watching until SIGINT or SIGTERM.`,
		Flags: []cli.Flag{
			storeFlag(),
			&cli.StringFlag{Name: "staging", Destination: &o.Staging, Usage: "the staging directory (required)"},
			&cli.StringFlag{Name: "producer-id", Destination: &o.ProducerID, Usage: "this producer's stable id, [A-Za-z0-9._-] (required)"},
			&cli.GenericFlag{Name: "max-lead", Value: &flagval.Int[int64]{P: &o.MaxLead}, Usage: "hold uploads while this many steps ahead of the slowest mount (or newest checkpoint); 0: off"},
			&cli.StringFlag{Name: "metrics-addr", Destination: &o.MetricsAddr, Usage: "serve Prometheus metrics at HOST:PORT/metrics (:PORT binds 127.0.0.1)"},
			&cli.BoolFlag{Name: "once", Destination: &o.Once, Usage: "commit the batches sealed at start, then exit (fails at once when the store is unreachable)"},
			&cli.DurationFlag{Name: "start-timeout", Destination: &o.StartTimeout, Usage: "exit 1 when the store is still unreachable after this long at start (0: wait as long as it takes)"},
			&cli.DurationFlag{Name: "once-timeout", Value: defaultOnceTimeout, Destination: &o.OnceTimeout,
				Usage: "with --once: exit 1 when the pass has not finished after this long (a store that stopped answering); what is not committed stays staged (0: no bound)"},
			&cli.DurationFlag{Name: "consumer-timeout", Value: txn.ConsumerTimeout, Destination: &o.ConsumerTimeout, Hidden: true,
				Usage: "a consumer whose heartbeat is older than this no longer holds --max-lead back"},
			clockOffsetFlag(&o.ClockOffset),
			&cli.DurationFlag{Name: "poll", Value: 500 * time.Millisecond, Destination: &o.Poll, Usage: "how often to look for new sealed batches"},
			&cli.DurationFlag{Name: "gc-every", Value: 10 * time.Minute, Destination: &o.GCEvery, Usage: "run gc this often while running (0: never)"},
			&cli.DurationFlag{Name: "gc-grace", Value: txn.DefaultGrace, Destination: &o.GCGrace, Usage: "gc's grace period"},
			&cli.StringFlag{Name: "progress", Value: "auto", Destination: &o.Progress, Usage: "auto (a live line on a terminal, else log lines), line or log"},
			&cli.BoolFlag{Name: "verbose", Destination: &o.Verbose, Usage: "debug logging"},
		},
		Action: func(c *cli.Context) error {
			if err := cliapp.NoArgs(c); err != nil {
				return err
			}
			o.Store = c.String("store")
			return produce(c.Context, o, c.App.Writer, c.App.ErrWriter)
		},
	}
}

// defaultOnceTimeout is --once-timeout's default: far longer than any
// healthy pass of a cron job, short enough that a hung one is noticed.
const defaultOnceTimeout = 30 * time.Minute

func produce(ctx context.Context, o runOptions, stdout, stderr io.Writer) error {
	switch {
	case o.Staging == "":
		return flagval.Usagef("--staging DIR is required")
	case o.ProducerID == "":
		return flagval.Usagef("--producer-id ID is required (a stable name for this producer, e.g. prep-0)")
	case o.MaxLead < 0:
		return flagval.Usagef("--max-lead must not be negative (got %d)", o.MaxLead)
	case o.StartTimeout < 0:
		return flagval.Usagef("--start-timeout must not be negative (got %s)", o.StartTimeout)
	case o.OnceTimeout < 0:
		return flagval.Usagef("--once-timeout must not be negative (got %s)", o.OnceTimeout)
	case o.Progress != "auto" && o.Progress != "line" && o.Progress != "log":
		return flagval.Usagef("--progress %q: use auto, line or log", o.Progress)
	}
	if err := txn.ValidateProducerID(o.ProducerID); err != nil {
		return flagval.Usagef("--producer-id: %v", err)
	}
	tree, err := stage.Open(o.Staging)
	if err != nil {
		return flagval.Usage(err)
	}
	logger := newLogger(stderr, o.Verbose)
	m := newRunMetrics()
	if o.MetricsAddr != "" {
		stop, err := serveMetrics(o.MetricsAddr, m.reg, logger)
		if err != nil {
			return err
		}
		defer stop()
	}
	var deadline time.Time
	if o.StartTimeout > 0 {
		deadline = time.Now().Add(o.StartTimeout)
	}
	s, l, err := connect(ctx, connectOptions{URL: o.Store, FailFast: o.Once, Timeout: o.StartTimeout, Logger: logger, Waiting: m.waitingForStore})
	if err != nil && ctx.Err() != nil {
		return nil // a signal while waiting for the store: a clean stop, as at any other time
	}
	if err != nil {
		return err
	}
	// Commit times, heartbeat ages (--max-lead) and gc's grace go by the
	// store's clock, measured now and every store.ClockResync.
	clock := l.UseStoreClock(ctx, o.ClockOffset, logger)
	clockCtx, stopClock := context.WithCancel(ctx)
	defer stopClock()
	go clock.Keep(clockCtx, nil)
	var passDeadline time.Time
	if o.Once && o.OnceTimeout > 0 {
		passDeadline = time.Now().Add(o.OnceTimeout)
	}
	prog := newProgress(stderr, o.Progress, logger, streamHead(ctx, l))
	defer prog.stop()
	summary := &onceSummary{out: stdout}
	err = stage.Run(ctx, stage.RunOptions{
		Store: s, Log: l, Tree: tree, ProducerID: o.ProducerID, Once: o.Once, MaxLead: o.MaxLead,
		Poll: o.Poll, GCEvery: o.GCEvery, GCGrace: o.GCGrace, Logger: logger, ConsumerTimeout: o.ConsumerTimeout,
		StoreWaiting: m.waitingForStore, WaitForLock: !o.Once, StartDeadline: deadline, PassDeadline: passDeadline,
		Observe: func(cs txn.CommitStats) { m.commit(cs); prog.commit(cs) },
		OnBatch: func(e stage.BatchEvent) {
			m.batch(e)
			prog.batch(e)
			if o.Once {
				summary.batch(e)
			}
		},
	})
	if err == nil && summary.rejected > 0 {
		return summary.err(filepath.Join(tree.Dir, stage.RejectedDir))
	}
	return runError(o, err)
}

// runError says what stopped run, for the errors that need more words
// than their own.
func runError(o runOptions, err error) error {
	switch {
	case errors.Is(err, stage.ErrPassDeadline):
		return fmt.Errorf("run --once did not finish within --once-timeout %s: %w", o.OnceTimeout, err)
	case txn.StreamChanged(err):
		return fmt.Errorf("run stopped: %w; its batches not committed stay staged, and run started again commits them to whatever stream is at --store then", err)
	case errors.Is(err, txn.ErrFenced):
		return fmt.Errorf("producer %s was fenced: another process registered the same --producer-id; stop it, or give each producer its own id: %w", o.ProducerID, err)
	}
	return err
}

type runMetrics struct {
	reg                         *prometheus.Registry
	commits, attempts, conflict prometheus.Counter
	tgbs, bytes, rejected       prometheus.Counter
	latency                     prometheus.Histogram
	group                       prometheus.Histogram
	storeWaiting                prometheus.Gauge
}

func (m *runMetrics) waitingForStore(on bool) {
	if on {
		m.storeWaiting.Set(1)
	} else {
		m.storeWaiting.Set(0)
	}
}

func newRunMetrics() *runMetrics {
	m := &runMetrics{reg: prometheus.NewRegistry()}
	c := func(name, help string) prometheus.Counter {
		x := prometheus.NewCounter(prometheus.CounterOpts{Namespace: "lakefs", Subsystem: "produce", Name: name, Help: help})
		m.reg.MustRegister(x)
		return x
	}
	m.commits = c("commits_total", "Versions committed.")
	m.attempts = c("commit_attempts_total", "Create-if-absent attempts of versions.")
	m.conflict = c("commit_conflicts_total", "Attempts that lost the race for a version.")
	m.tgbs = c("steps_total", "Steps (TGBs) committed.")
	m.bytes = c("bytes_total", "Bytes of committed batches.")
	m.rejected = c("rejected_batches_total", "Batches moved to _rejected.")
	m.latency = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "lakefs", Subsystem: "produce", Name: "commit_latency_seconds",
		Help: "From a TGB's data being durable to its step being visible.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.group = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "lakefs", Subsystem: "produce", Name: "commit_group_size",
		Help: "TGBs per committed version.", Buckets: prometheus.ExponentialBuckets(1, 2, 10)})
	m.storeWaiting = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "lakefs", Subsystem: "produce", Name: "store_waiting",
		Help: "1 while the producer waits for an unreachable or unavailable store."})
	m.reg.MustRegister(m.latency, m.group, m.storeWaiting, collectors.NewGoCollector())
	return m
}

func (m *runMetrics) commit(cs txn.CommitStats) {
	if cs.Created {
		m.commits.Inc()
		m.attempts.Add(float64(cs.Attempts))
		m.conflict.Add(float64(cs.Attempts - 1))
		m.group.Observe(float64(cs.VersionTGBs))
	}
	m.tgbs.Add(float64(cs.TGBs))
	for _, u := range cs.Uploaded {
		m.latency.Observe(cs.Committed.Sub(u).Seconds())
	}
}

func (m *runMetrics) batch(e stage.BatchEvent) {
	switch {
	case e.Rejected != "":
		m.rejected.Inc()
	case e.Step >= 0 && e.Waiting == "":
		m.bytes.Add(float64(e.Bytes))
	}
}

func serveMetrics(addr string, reg *prometheus.Registry, logger *slog.Logger) (func(), error) {
	ln, err := listen.TCP(addr)
	if err != nil {
		return nil, flagval.Usagef("--metrics-addr %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("metrics server stopped", "err", err)
		}
	}()
	logger.Info("serving metrics", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// progress shows what run does: on a terminal a live line rewritten every
// second; otherwise an slog line every 10 seconds when something happened.
type progress struct {
	out    io.Writer
	live   bool
	logger *slog.Logger
	done   chan struct{}
	wg     sync.WaitGroup

	mu                    sync.Mutex
	batches, bytes, tgbs  int64
	commits, attempts     int64
	head                  int64
	rejected              int64
	waiting               string
	lastBatches, lastByte int64
}

// streamHead is the stream's head step as run starts, -1 when there is
// none: what progress reports until this run commits more (it reported -1
// for a run that had committed nothing yet, whatever the head).
func streamHead(ctx context.Context, l *txn.Log) int64 {
	st, err := l.Load(ctx)
	if err != nil {
		return -1 // stage.Run reports the store's trouble
	}
	if h, ok := st.Head(); ok {
		return h
	}
	return -1
}

func newProgress(out io.Writer, mode string, logger *slog.Logger, head int64) *progress {
	p := &progress{out: out, logger: logger, done: make(chan struct{}), head: head}
	switch mode {
	case "line":
		p.live = true
	case "auto":
		p.live = isTerminal(out)
	}
	interval := 10 * time.Second
	if p.live {
		interval = time.Second
	}
	p.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-p.done:
				return
			case <-t.C:
				p.report(interval)
			}
		}
	})
	return p
}

func (p *progress) commit(cs txn.CommitStats) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cs.Created {
		p.commits++
		p.attempts += int64(cs.Attempts)
	}
	p.tgbs += int64(cs.TGBs)
}

func (p *progress) batch(e stage.BatchEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case e.Waiting != "":
		p.waiting = e.Waiting
		return
	case e.Rejected != "":
		p.rejected++
	case e.Step >= 0:
		p.batches++
		p.bytes += e.Bytes
		p.head = max(p.head, e.Step)
	}
	p.waiting = ""
}

func (p *progress) report(interval time.Duration) {
	p.mu.Lock()
	db, dB := p.batches-p.lastBatches, p.bytes-p.lastByte
	p.lastBatches, p.lastByte = p.batches, p.bytes
	group := 0.0
	if p.commits > 0 {
		group = float64(p.tgbs) / float64(p.commits)
	}
	batches, head, rejected, waiting := p.batches, p.head, p.rejected, p.waiting
	p.mu.Unlock()
	secs := interval.Seconds()
	if p.live {
		line := fmt.Sprintf("%d batches  %.1f batches/s  %.1f MB/s  group %.1f  head %d  rejected %d",
			batches, float64(db)/secs, float64(dB)/secs/1e6, group, head, rejected)
		if waiting != "" {
			line += "  " + waiting
		}
		fmt.Fprintf(p.out, "\r\033[K%s", line)
		return
	}
	if db > 0 || waiting != "" {
		p.logger.Info("progress", "batches", batches, "batches_per_s", round3(float64(db)/secs), "mb_per_s", round3(float64(dB)/secs/1e6),
			"mean_group", round3(group), "head", head, "rejected", rejected, "waiting", waiting)
	}
}

// round3 rounds a rate to three decimals for the log: a raw float64
// prints as 3.6000000000000003e-06.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
	if p.live {
		fmt.Fprintln(p.out)
	}
}

// onceSummary prints what run --once did with each batch, one line each:
// "name -> step N", or "name rejected: why".
type onceSummary struct {
	mu          sync.Mutex
	out         io.Writer
	n, rejected int
	unmoved     int // of rejected: left staged, _rejected could not take them
}

// err is run --once's last line when batches were rejected: where they
// are, also when _rejected could not take them.
func (s *onceSummary) err(rejectedDir string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	where := fmt.Sprintf("they are in %s with a %s file each", rejectedDir, stage.Reason)
	switch {
	case s.unmoved == s.rejected:
		where = fmt.Sprintf("they could not be moved to %s and stay staged (see the lines above); free space in the staging directory and run again", rejectedDir)
	case s.unmoved > 0:
		where = fmt.Sprintf("%d are in %s with a %s file each, %d could not be moved there and stay staged (see the lines above)",
			s.rejected-s.unmoved, rejectedDir, stage.Reason, s.unmoved)
	}
	return fmt.Errorf("%d of %d batches rejected; %s", s.rejected, s.n, where)
}

func (s *onceSummary) batch(e stage.BatchEvent) {
	if e.Waiting != "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.Skipped != "" {
		fmt.Fprintf(s.out, "%s not picked up: %s\n", e.Name, e.Skipped)
		return
	}
	s.n++
	switch {
	case e.Unmoved != "":
		s.rejected++
		s.unmoved++
		fmt.Fprintf(s.out, "%s rejected: %s (not moved to %s: %s; it stays staged)\n", e.Name, e.Rejected, stage.RejectedDir, e.Unmoved)
	case e.Rejected != "":
		s.rejected++
		fmt.Fprintf(s.out, "%s rejected: %s\n", e.Name, e.Rejected)
	case e.Already && e.Step < 0:
		fmt.Fprintf(s.out, "%s -> committed before, as a step since reclaimed (removed from staging)\n", e.Name)
	case e.Already:
		fmt.Fprintf(s.out, "%s -> step %d (committed before; removed from staging)\n", e.Name, e.Step)
	default:
		fmt.Fprintf(s.out, "%s -> step %d\n", e.Name, e.Step)
	}
}
