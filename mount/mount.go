// Package mount runs a lakefs mount: it opens the stream, mounts the
// read-only view (package fs) backed by the block cache (package cache),
// tails the manifest log, writes the node's heartbeat, serves metrics and
// unmounts cleanly when its context ends.
//
// # Ownership
//
// The tailer goroutine owns the *txn.State (Load once, then polls on the
// commit cadence, cadence.go) and is the only publisher of fs snapshots; everything
// else reads the published immutable snapshot. Counters shared between
// goroutines are atomics.
//
// # Locks
//
// The package's one lock is packLoader.mu (packs.go), a leaf: no other
// lock is taken and no I/O is done while it is held.
//
// # Phases of Run
//
// setDefaults, prepareMountpoint, openStream (open, check the options
// against the stream, load the first state), newMounted (cache, view,
// prefetcher, FUSE root), serveMetrics, mountView, serve (tail, heartbeat,
// checkpoints; Ready; wait; unmount; delete the heartbeat).
package mount

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/cache"
	"github.com/lakestream/lakestream/fs"
	"github.com/lakestream/lakestream/internal/backoff"
	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/internal/listen"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Options configure a mount. Zero values take the defaults below.
type Options struct {
	Store      string // store URL
	Mountpoint string
	// Ranks shown; nil means all of the stream's ranks (of the view, with
	// ViewRanks). Whatever is shown, only what readers open is fetched.
	Ranks []int
	// ViewRanks, if > 0, shows the stream as ViewRanks ranks (it must
	// divide the stream's R): rank-r holds original ranks
	// r*(R/ViewRanks)..(r+1)*(R/ViewRanks)-1 as rank-<original>/
	// subdirectories, so a job restarted on fewer GPUs reads the same
	// global batches.
	ViewRanks int
	// CacheSize is the memory budget of the block cache in bytes.
	CacheSize int64
	// PrefetchSteps is P: opening a file of step n prefetches steps
	// n..n+P of this node's ranks; 0 disables prefetching.
	PrefetchSteps int
	// Wait is how long a lookup of a step not yet committed blocks.
	Wait time.Duration
	// PollInterval is how often the manifest log is checked for new
	// versions while someone needs them (a lookup waits for a step not
	// committed yet, or a reader has just read within a few steps of the
	// head) and the commit cadence is not known yet; once it is, the log
	// is read just after each version is due, and after a miss at most
	// 4 x PollInterval later (cadence.go). IdlePollInterval applies when
	// nobody needs new steps, so that thousands of idle or lagging nodes
	// cost the store little.
	PollInterval     time.Duration
	IdlePollInterval time.Duration
	// NodeID names this node's heartbeat, _consumers/<node-id>.json.
	NodeID            string
	HeartbeatInterval time.Duration
	// MetricsAddr, if set, serves Prometheus metrics at /metrics.
	MetricsAddr string
	// CheckpointDir, if set, is watched for training checkpoints, which
	// are recorded in the manifest.
	CheckpointDir string
	// ReadAhead is the kernel read-ahead of the mount in bytes.
	ReadAhead int64
	// Fetchers bounds concurrent prefetch GETs.
	Fetchers int
	// FillsPerRank bounds the passthrough files fetched at once per rank
	// being read; one more runs beside them (0: cache.DefaultFillsPerRank).
	FillsPerRank int
	// Passthrough is PassthroughAuto (""), PassthroughOn or
	// PassthroughOff: whether whole files are served from memfds the
	// kernel reads directly.
	Passthrough string
	// StoreLatency is added to every data GET: a stand-in for a remote
	// store in benchmarks.
	StoreLatency time.Duration
	// StoreRetry is how long a read waits out transient store errors
	// (refused or reset connections, timeouts, 5xx, throttling) before it
	// fails with EIO (0: DefaultStoreRetry). Missing or corrupt objects fail
	// at once.
	StoreRetry time.Duration
	AllowOther bool
	// ClockOffset shifts this process's clock (tests: a machine whose
	// clock is wrong). Decisions by time read the store's clock
	// (store.Clock), whose measured offset cancels it.
	ClockOffset time.Duration
	// Profiling serves Go's pprof handlers at MetricsAddr/debug/pprof/.
	Profiling bool
	Debug     bool // log every FUSE request
	Logger    *slog.Logger
	// Ready, if set, is called once the view is mounted and serving.
	Ready func(Info)
}

// Info describes a running mount.
type Info struct {
	Mountpoint  string
	MetricsAddr string // the bound address, when metrics are served
	Stats       func() cache.Stats
}

// Passthrough modes (--passthrough).
const (
	PassthroughAuto = "auto"
	PassthroughOn   = "on"
	PassthroughOff  = "off"
)

// Defaults.
const (
	DefaultCacheSize        = 2 << 30
	DefaultPrefetchSteps    = 2
	DefaultPollInterval     = 250 * time.Millisecond
	DefaultIdlePollInterval = 10 * time.Second
	// nearRecent: a read of a step within nearSteps of the head keeps
	// polling fast for this long.
	nearRecent               = 10 * time.Second
	nearSteps                = 3
	DefaultHeartbeatInterval = 10 * time.Second
	DefaultReadAhead         = 4 << 20
	// The kernel's read-ahead is at least a page; far beyond a few
	// blocks it only fetches what nobody reads.
	MinReadAhead = 4 << 10
	MaxReadAhead = 1 << 30
	// MinCacheSize is the least any stream can use (MinBlocks blocks of
	// the smallest chunk); the stream's own chunk size may need more.
	MinCacheSize = cache.MinBlocks * txn.MinChunkSize
	// MaxHeartbeatInterval keeps a heartbeat fresh: written at least every
	// interval, it is never older than a third of txn.ConsumerTimeout.
	MaxHeartbeatInterval = txn.ConsumerTimeout / 3
)

// raiseFileLimit raises the soft open-file limit to the hard one (Go's
// runtime does so too; this makes it explicit) and returns it, for the
// "mounted" line: every file served through passthrough holds a memory
// file's descriptor while it is open, so the limit bounds how many files
// readers can hold open that way (past it they are served through
// blocks).
func raiseFileLimit(log *slog.Logger) uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		log.Warn("reading the open-file limit", "err", err)
		return 0
	}
	if lim.Cur < lim.Max {
		raised := lim
		raised.Cur = lim.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &raised); err == nil {
			lim = raised
		}
	}
	return lim.Cur
}

// machineMemory is this machine's physical memory, rounded down to a MiB:
// the most --cache-size can hold (MaxSize where the kernel does not say).
func machineMemory() int64 {
	var si syscall.Sysinfo_t
	if err := syscall.Sysinfo(&si); err != nil || si.Totalram == 0 {
		return flagval.MaxSize
	}
	return min(int64(si.Totalram)*int64(si.Unit), flagval.MaxSize) &^ (1<<20 - 1)
}

func (o *Options) setDefaults() error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Store == "" {
		return flagval.Usagef("no store; pass --store URL or set LAKEFS_STORE")
	}
	if o.Mountpoint == "" {
		return flagval.Usagef("no mount point; pass it as the argument: lakefs-mount --store URL MOUNTPOINT")
	}
	abs, err := filepath.Abs(o.Mountpoint)
	if err != nil {
		return flagval.Usagef("mount point %s: %v", o.Mountpoint, err)
	}
	o.Mountpoint = abs
	if err := o.validate(); err != nil {
		return err
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.PollInterval == 0 {
		o.PollInterval = DefaultPollInterval
	}
	if o.IdlePollInterval == 0 {
		o.IdlePollInterval = max(DefaultIdlePollInterval, o.PollInterval)
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if o.ReadAhead == 0 {
		o.ReadAhead = DefaultReadAhead
	}
	if o.Passthrough == "" {
		o.Passthrough = PassthroughAuto
	}
	if o.StoreRetry == 0 {
		o.StoreRetry = DefaultStoreRetry
	}
	if o.NodeID == "" {
		id, err := defaultNodeID(o.Mountpoint)
		if err != nil {
			return err
		}
		o.NodeID = id
	}
	return checkCheckpointDir(o.CheckpointDir, o.Logger)
}

// validate checks what can be checked without the stream; a zero value
// stands for its default.
func (o *Options) validate() error {
	switch {
	case o.ViewRanks < 0:
		return flagval.Usagef("--view-ranks %d is negative; use 0 to show the stream's own ranks", o.ViewRanks)
	case o.PrefetchSteps < 0:
		return flagval.Usagef("--prefetch-steps %d is negative; use 0 to disable prefetching", o.PrefetchSteps)
	case o.Wait < 0:
		return flagval.Usagef("--wait %s is negative", o.Wait)
	case o.PollInterval != 0 && o.PollInterval < time.Millisecond:
		return flagval.Usagef("--poll-interval %s is too short; use at least 1ms", o.PollInterval)
	case o.IdlePollInterval != 0 && o.IdlePollInterval < max(o.PollInterval, time.Millisecond):
		return flagval.Usagef("--idle-poll-interval %s is shorter than --poll-interval %s", o.IdlePollInterval, o.PollInterval)
	case o.HeartbeatInterval < 0:
		return flagval.Usagef("--heartbeat-interval %s is negative", o.HeartbeatInterval)
	case o.HeartbeatInterval > MaxHeartbeatInterval:
		return flagval.Usagef("--heartbeat-interval %s is too long: a heartbeat older than %s counts as a mount gone, so gc and --max-lead would ignore this one; use at most %s",
			o.HeartbeatInterval, txn.ConsumerTimeout, MaxHeartbeatInterval)
	case o.StoreRetry < 0:
		return flagval.Usagef("--store-retry %s is negative", o.StoreRetry)
	case o.Fetchers < 0:
		return flagval.Usagef("--fetchers %d is negative; use at least 1", o.Fetchers)
	case o.FillsPerRank < 0:
		return flagval.Usagef("--fills-per-rank %d is negative; use at least 1", o.FillsPerRank)
	case o.CacheSize < 0 || o.CacheSize > flagval.MaxSize:
		return flagval.Usagef("--cache-size %d is out of range; use %s to %s", o.CacheSize, flagval.FormatSize(MinCacheSize), flagval.FormatSize(flagval.MaxSize))
	case o.CacheSize > 0 && o.CacheSize > machineMemory():
		return flagval.Usagef("--cache-size %s is more than this machine's memory (%s); use %s to %s",
			flagval.FormatSize(o.CacheSize), flagval.FormatSize(machineMemory()), flagval.FormatSize(MinCacheSize), flagval.FormatSize(machineMemory()))
	case o.ReadAhead != 0 && (o.ReadAhead < MinReadAhead || o.ReadAhead > MaxReadAhead):
		return flagval.Usagef("--read-ahead %d is out of range; use %s to %s", o.ReadAhead, flagval.FormatSize(MinReadAhead), flagval.FormatSize(MaxReadAhead))
	case o.NodeID != "":
		if err := validateNodeID(o.NodeID); err != nil {
			return err
		}
	}
	if o.MetricsAddr != "" {
		if _, err := listen.Addr(o.MetricsAddr); err != nil {
			return flagval.Usagef("--metrics-addr: %w", err)
		}
	}
	return nil
}

func validateNodeID(id string) error {
	if err := txn.ValidateNodeID(id); err != nil {
		return flagval.Usagef("--node-id: %w", err)
	}
	return nil
}

// Run mounts the stream at o.Mountpoint and serves it until ctx ends, then
// unmounts. It returns nil after a clean unmount; an error wrapping
// flagval.ErrUsage for bad options, ErrInUse for a busy mount point.
func Run(ctx context.Context, o Options) error {
	if err := o.setDefaults(); err != nil {
		return err
	}
	fileLimit := raiseFileLimit(o.Logger)
	if err := prepareMountpoint(ctx, o.Mountpoint, o.Logger); err != nil {
		return err
	}
	clock, l, state, err := openStream(ctx, o)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	m, err := newMounted(runCtx, o, l, state)
	if err != nil {
		return err
	}
	m.fileLimit = fileLimit
	m.clock = clock
	defer m.cache.Close()
	metricsAddr, closeMetrics, err := m.serveMetrics()
	if err != nil {
		return err
	}
	defer closeMetrics()
	server, served, err := m.mountView()
	if err != nil {
		return err
	}
	m.serve(ctx, runCtx, stop, server, served, metricsAddr)
	return nil
}

// openStream opens the store and the stream, measures the store's clock
// (the log's from then on: it stamps this mount's heartbeats and
// checkpoint records and judges whether a heartbeat under its node id is
// fresh; serve keeps it measured), checks the options that depend on the
// stream (view ranks, ranks, cache size, a free node id) and loads the
// first state.
func openStream(ctx context.Context, o Options) (*store.Clock, *txn.Log, *txn.State, error) {
	st, err := store.Open(ctx, o.Store)
	if err != nil {
		if errors.Is(err, store.ErrInvalid) {
			return nil, nil, nil, flagval.Usage(err)
		}
		return nil, nil, nil, err
	}
	if o.StoreLatency > 0 {
		f := store.NewFaulty(st, 1)
		f.Set(store.Fault{Latency: o.StoreLatency}, store.OpGetRange)
		st = f
	}
	l, err := txn.Open(ctx, st)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("opening the stream at %s: %w", store.Redact(o.Store), err)
	}
	shown := l.Config.Ranks
	if o.ViewRanks != 0 {
		if o.ViewRanks < 0 || o.ViewRanks > l.Config.Ranks || l.Config.Ranks%o.ViewRanks != 0 {
			return nil, nil, nil, flagval.Usagef("--view-ranks %d must divide the stream's %d ranks (e.g. %d)", o.ViewRanks, l.Config.Ranks, max(1, l.Config.Ranks/2))
		}
		shown = o.ViewRanks
	}
	clock := l.UseStoreClock(ctx, o.ClockOffset, o.Logger)
	if err := checkNodeIDFree(ctx, st, o.NodeID, clock.Now()); err != nil {
		return nil, nil, nil, err
	}
	for _, r := range o.Ranks {
		if r < 0 || r >= shown {
			return nil, nil, nil, flagval.Usagef("--ranks names rank %d, but the view has ranks 0-%d", r, shown-1)
		}
	}
	if least := cache.MinBlocks * l.Config.ChunkSize; o.CacheSize < least {
		return nil, nil, nil, flagval.Usagef("--cache-size %s holds fewer than %d of this stream's %s chunks; use at least %s",
			flagval.FormatSize(o.CacheSize), cache.MinBlocks, flagval.FormatSize(l.Config.ChunkSize), flagval.FormatSize(least))
	}
	state, err := l.Load(ctx)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("loading the stream state: %w", err)
	}
	return clock, l, state, nil
}

// newMounted builds the mount's parts over the loaded state: the block
// cache, the published view, the pack loader, the prefetcher (living as
// long as runCtx) and the FUSE root. The caller closes m.cache.
func newMounted(runCtx context.Context, o Options, l *txn.Log, state *txn.State) (*mounted, error) {
	st := l.Store
	m := &mounted{opts: o, log: o.Logger, store: st, txlog: l, state: state, src: newSources(o.Logger)}
	m.highest.Store(-1)
	m.metrics = newMetrics()
	c, err := cache.New(cache.Options{
		Store:      st,
		ChunkSize:  l.Config.ChunkSize,
		Size:       o.CacheSize,
		Fetchers:   o.Fetchers,
		Logger:     o.Logger,
		ObserveGet: m.metrics.observeGet,
		Retry:      cache.Retry{Window: o.StoreRetry, Source: m.src.block},
	})
	if err != nil {
		return nil, flagval.Usage(err)
	}
	m.cache = c
	m.view = fs.NewView(fs.NewSnapshot(state))
	m.packs = newPackLoader(indexLog(l, cache.Retry{Window: o.StoreRetry, Source: m.src.index}), func(n int64) (*txn.TGB, bool) { return m.view.Load().Step(n) }, nodeSpan(o.Ranks, o.ViewRanks, l.Config.Ranks))
	m.prefetch = c.NewPrefetcher(runCtx, cache.PrefetchOptions{
		Depth:        o.PrefetchSteps,
		FillsPerRank: o.FillsPerRank,
		Committed:    m.committed,
		Pack:         m.pack,
		Logger:       o.Logger,
	})
	m.root = fs.New(fs.Options{
		View:        m.view,
		Reader:      c,
		Packs:       m.packs,
		StreamRanks: l.Config.Ranks,
		ViewRanks:   o.ViewRanks,
		Ranks:       o.Ranks,
		Wait:        o.Wait,
		Touch:       m.prefetch.Touch,
		Served:      m.served,
		Awaited:     m.awaited,
		BlockSize:   uint32(min(l.Config.ChunkSize, fs.MaxRead)),
		Logger:      o.Logger,
	})
	m.metrics.register(m)
	m.metrics.registerDegraded(m.src)
	return m, nil
}

// serveMetrics serves /metrics and /health when --metrics-addr is set; it
// returns the bound address ("" when not served) and how to stop serving.
func (m *mounted) serveMetrics() (string, func(), error) {
	o := m.opts
	if o.MetricsAddr == "" {
		return "", func() {}, nil
	}
	ln, err := listen.TCP(o.MetricsAddr)
	if err != nil {
		return "", nil, fmt.Errorf("--metrics-addr %s: %w", o.MetricsAddr, err)
	}
	srv := m.metrics.serve(ln, o.Profiling, m.health, m.log)
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// mountView mounts the FUSE view; served is closed once the kernel
// unmounted it, by us or from outside.
func (m *mounted) mountView() (*fuse.Server, <-chan struct{}, error) {
	o := m.opts
	server, err := gofs.Mount(o.Mountpoint, m.root, m.root.MountOptions(o.AllowOther, o.Debug))
	if err != nil {
		return nil, nil, fmt.Errorf("mounting at %s: %w (this needs root and /dev/fuse)", o.Mountpoint, err)
	}
	var mst unix.Stat_t
	if err := unix.Stat(o.Mountpoint, &mst); err == nil {
		m.dev = mst.Dev
	}
	if err := setReadAhead(o.Mountpoint, o.ReadAhead); err != nil {
		m.log.Warn("could not raise the kernel read-ahead; sequential reads will be slower", "err", err)
	}
	if err := m.startPassthrough(server); err != nil {
		if uerr := server.Unmount(); uerr != nil {
			m.log.Warn("unmounting after --passthrough on failed", "err", uerr)
		}
		return nil, nil, err
	}
	served := make(chan struct{})
	go func() {
		server.Wait()
		close(served)
	}()
	state := m.state
	m.log.Info("mounted", "mountpoint", o.Mountpoint, "store", store.Redact(o.Store), "version", state.Version,
		"live_from", state.LiveFrom, "next_step", state.NextStep(), "ranks", rankList(o.Ranks, m.txlog.Config.Ranks),
		"cache_size", o.CacheSize, "prefetch_steps", o.PrefetchSteps, "node_id", o.NodeID, "open_file_limit", m.fileLimit)
	return server, served, nil
}

// startPassthrough turns the memfd path on when --passthrough allows and
// the kernel takes backing files, and says once which path serves files.
func (m *mounted) startPassthrough(server *fuse.Server) error {
	mode := m.opts.Passthrough
	if mode == PassthroughOff {
		m.log.Info("passthrough", "mode", mode, "active", false, "reason", "--passthrough off")
		return nil
	}
	budget := m.opts.CacheSize / 4
	backing, err := passthroughBacking(server, budget)
	if err != nil {
		if mode == PassthroughOn {
			return fmt.Errorf("--passthrough on: %w", err)
		}
		m.log.Info("passthrough", "mode", mode, "active", false, "reason", err.Error())
		return nil
	}
	files := m.cache.UseFiles(cache.FilesOptions{Budget: budget, MinSize: PassthroughMinSize, Backing: backing})
	m.root.SetPassthrough(memFiles{files})
	m.log.Info("passthrough", "mode", mode, "active", true, "files", backing.Kind(), "budget", budget, "min_file", PassthroughMinSize)
	return nil
}

// passthroughBacking returns the backing whose files the kernel takes as
// FUSE backing files: huge-page tmpfs files, else memfds. go-fuse turns
// passthrough off for the whole mount after one failed registration, so
// each is tried here on purpose, before any reader's open depends on it.
func passthroughBacking(server *fuse.Server, budget int64) (*cache.Backing, error) {
	b := cache.NewBacking(budget)
	err := probeBacking(server, b)
	if err != nil && b.Kind() != "memfd" {
		b.Close()
		b = cache.MemfdBacking()
		err = probeBacking(server, b)
	}
	if err != nil {
		return nil, err
	}
	return b, nil
}

func probeBacking(server *fuse.Server, b *cache.Backing) error {
	fd, err := b.ProbeFile()
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	id, errno := server.RegisterBackingFd(&fuse.BackingMap{Fd: int32(fd)})
	if errno != 0 {
		return fmt.Errorf("the kernel refused a FUSE backing file (%w): passthrough needs Linux 6.9 or later built with FUSE_PASSTHROUGH, and CAP_SYS_ADMIN in the initial user namespace", errno)
	}
	if errno := server.UnregisterBackingFd(id); errno != 0 {
		return fmt.Errorf("unregistering a FUSE backing file: %w", errno)
	}
	return nil
}

// memFiles is the cache's memfd files as the view's Passthrough.
type memFiles struct{ *cache.Files }

func (m memFiles) Open(ctx context.Context, p *txn.Pack, f *txn.File) (fs.MemFile, error) {
	h, err := m.Files.Open(ctx, p, f)
	if errors.Is(err, cache.ErrNoRoom) {
		return nil, fmt.Errorf("%w: %w", fs.ErrNoRoom, err)
	}
	if err != nil {
		return nil, err
	}
	return h, nil
}

// PassthroughMinSize: smaller files are served from blocks. A memfd costs
// a few system calls and a backing-file registration per open, more than
// reading a small file through this process.
const PassthroughMinSize = 1 << 20

// serve runs the tailer, the heartbeat and the checkpoint watcher, says
// the mount is ready, and waits until ctx ends (then unmounts) or the
// mount is removed from outside; then it stops them (stop ends runCtx) and
// deletes its heartbeat.
func (m *mounted) serve(ctx, runCtx context.Context, stop func(), server *fuse.Server, served <-chan struct{}, metricsAddr string) {
	o := m.opts
	var wg sync.WaitGroup
	wg.Go(func() { m.tail(runCtx) })
	wg.Go(func() { m.heartbeat(runCtx) })
	wg.Go(func() { m.clock.Keep(runCtx, m.streamThere) })
	if o.CheckpointDir != "" {
		wg.Go(func() { m.watchCheckpoints(runCtx) })
	}
	if o.Ready != nil {
		o.Ready(Info{Mountpoint: o.Mountpoint, MetricsAddr: metricsAddr, Stats: m.cache.Stats})
	}
	select {
	case <-ctx.Done():
		m.log.Info("unmounting", "mountpoint", o.Mountpoint)
		m.unmount(server, served)
	case <-served:
		m.log.Warn("the mount was removed from outside (umount); stopping", "mountpoint", o.Mountpoint)
	}
	stop()
	wg.Wait()
	// A stopped consumer holds back nobody: without this, gc and --max-lead
	// producers waited for it until its heartbeat went stale (txn.ConsumerTimeout).
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	if err := m.store.Delete(dctx, txn.HeartbeatKey(o.NodeID)); err != nil {
		m.log.Warn("deleting the heartbeat failed; it goes stale in "+txn.ConsumerTimeout.String(), "key", txn.HeartbeatKey(o.NodeID), "err", err)
	}
	cancel()
	m.log.Info("unmounted", "mountpoint", o.Mountpoint)
}

// unmount unmounts the view. If files are still open in it (EBUSY) it
// detaches the mount and aborts its FUSE connection, so that the process
// can exit: the holders of open files get errors, new accesses see the
// directory underneath.
func (m *mounted) unmount(server *fuse.Server, served <-chan struct{}) {
	done := make(chan error, 1)
	go func() { done <- server.Unmount() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		err = errors.New("unmount did not finish within 5s")
	}
	if err == nil {
		return
	}
	m.log.Warn("mount point busy (files open or a process inside it); detaching it", "mountpoint", m.opts.Mountpoint, "err", err)
	if err := syscall.Unmount(m.opts.Mountpoint, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) {
		m.log.Error("detaching the mount failed", "err", err)
	}
	if m.dev != 0 {
		if err := abortConnection(m.dev); err != nil {
			m.log.Warn("aborting the FUSE connection failed", "err", err)
		}
	}
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		m.log.Warn("FUSE server did not stop; exiting anyway")
	}
}

// mounted is one running mount.
type mounted struct {
	// Constant after Run's setup.
	opts      Options
	fileLimit uint64 // the open-file limit, raised to the hard one
	log       *slog.Logger
	store     store.Store
	txlog     *txn.Log
	clock     *store.Clock // txlog.Now's: the store's time
	cache     *cache.Cache
	prefetch  *cache.Prefetcher
	view      *fs.View
	root      *fs.Root
	metrics   *metrics
	packs     *packLoader
	dev       uint64

	state *txn.State // owned by the tailer goroutine

	highest  atomic.Int64 // highest step read, -1 before the first read
	lastRead atomic.Int64 // unix nanoseconds of the latest read
	polls    atomic.Int64 // refreshes of the manifest log

	// Health (/health): the stream gone from the store, replaced by
	// another at its URL (for good: set once, never cleared), store calls
	// failing (by source).
	streamGone        atomic.Bool
	replaced          atomic.Pointer[error]
	src               sources
	heartbeatFailures atomic.Int64
}

// committed reports whether step n is live in the view.
func (m *mounted) committed(n int64) bool {
	_, ok := m.view.Load().Step(n)
	return ok
}

// pack is rank r's pack of step n (r < 0: the shared files), through the
// loader the view uses, so each is fetched once.
func (m *mounted) pack(ctx context.Context, n int64, r int) (*txn.Pack, error) {
	t, ok := m.view.Load().Step(n)
	if !ok {
		return nil, fmt.Errorf("step %d is not live", n)
	}
	return m.packs.Pack(ctx, t, r)
}

// served records a read of step n.
func (m *mounted) served(n int64, _ int) {
	// Position first, then the wake-up: the poller decides its next
	// interval from them.
	m.lastRead.Store(time.Now().UnixNano())
	for {
		h := m.highest.Load()
		if n <= h || m.highest.CompareAndSwap(h, n) {
			break
		}
	}
	if n >= m.view.Load().Next()-nearSteps {
		m.view.Want() // a reader near the head: it will want the next step soon
	}
}

// awaited records that a reader waits for step n, the one after the head:
// its position is n-1 even if this mount has served it nothing (a trainer
// restarted from a checkpoint at the head). Without it, a restarted node
// waiting at the head would count as "read nothing" and hold producers
// under --max-lead back forever, while they hold back the step it waits
// for (found by the chaos test).
func (m *mounted) awaited(n int64) {
	for {
		h := m.highest.Load()
		if n-1 <= h || m.highest.CompareAndSwap(h, n-1) {
			return
		}
	}
}

// tail refreshes the state and publishes each change. While readers want
// new steps (demand) it polls on the commit cadence (cadence.go), else
// every IdlePollInterval. A lookup of a step past the head (Wanted) brings
// the next poll forward to the demand schedule, never before it: the
// version is not due earlier. While polls fail it keeps polling, no
// faster than failDelay, serving the last good state: a reader waiting at
// the head sees new steps within a second or so of the store's return.
func (m *mounted) tail(ctx context.Context) {
	f := &follower{log: m.txlog, st: m.state, now: time.Now, storeNow: m.txlog.StoreTime}
	last := time.Now() // the state was just loaded
	at := m.nextPoll(f, last)
	notBefore := last // while polls fail: the next may not run earlier
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.view.Wanted():
			if want := later(f.cad.next(last, m.opts.PollInterval), notBefore); want.Before(at) {
				at = want
				timer.Reset(time.Until(at))
			}
			continue
		case <-timer.C:
		}
		last = time.Now()
		m.polls.Add(1)
		n, err := f.poll(ctx)
		if n > 0 {
			m.publish()
		}
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case errors.Is(err, txn.ErrStreamReplaced):
			// The view never takes a version of the stream now at the URL:
			// it would mix two streams' steps. It stays what it was.
			m.markReplaced(err)
			return
		case err != nil:
			// The view stays as it is: losing the store stalls, it never
			// corrupts. The source logs the outage once.
			fails++
			m.src.log.Failed(fmt.Errorf("refreshing the manifest after version %d: %w", m.state.Version, err))
		default:
			fails = 0
			m.src.log.Answered()
		}
		at, notBefore = m.schedule(f, last, fails)
		timer.Reset(time.Until(at))
	}
}

// markReplaced records, once, that another stream replaced this mount's
// at its URL: the mount is degraded for good (remounting follows the new
// stream), stops extending its view and writes nothing more to the store.
func (m *mounted) markReplaced(err error) {
	if m.replaced.CompareAndSwap(nil, &err) {
		m.log.Error("the stream was replaced by another at the store URL; serving the old stream's last good state, extending it no more, writing no heartbeat; remount to follow the new stream",
			"store", store.Redact(m.opts.Store), "err", err)
	}
}

// schedule is when to poll after the poll at last, with fails failed polls
// in a row: nextPoll, but no earlier than notBefore, the failure backoff.
func (m *mounted) schedule(f *follower, last time.Time, fails int) (at, notBefore time.Time) {
	notBefore = last
	if fails > 0 {
		notBefore = last.Add(failDelay(fails, m.opts.PollInterval))
	}
	return later(m.nextPoll(f, last), notBefore), notBefore
}

// failDelay is the least time before the next poll after fails failed
// polls in a row: doubling from fast up to backoffFactor x fast, each drawn
// from its upper half so that many nodes do not poll a recovering store in
// step. Without it a known cadence whose version is overdue would poll a
// down store back to back.
func failDelay(fails int, fast time.Duration) time.Duration {
	return backoff.Jitter(backoff.Grow(fast, fails-1, backoffFactor*fast))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// nextPoll is when to poll after the poll at last: on the cadence while
// there is demand (a lookup is waiting for a step, or a reader read within
// nearSteps of the head in the last nearRecent), else after
// IdlePollInterval.
func (m *mounted) nextPoll(f *follower, last time.Time) time.Time {
	if m.view.Waiting() {
		return f.cad.next(last, m.opts.PollInterval)
	}
	next := m.view.Load().Next()
	if m.highest.Load() >= next-nearSteps && time.Since(time.Unix(0, m.lastRead.Load())) < nearRecent {
		return f.cad.next(last, m.opts.PollInterval)
	}
	return last.Add(m.opts.IdlePollInterval)
}

func (m *mounted) publish() {
	s := fs.NewSnapshot(m.state)
	m.root.Publish(s)
	m.packs.forgetBelow(s.LiveFrom)
	m.prefetch.Kick()
}

func rankList(ranks []int, n int) string {
	if ranks == nil {
		return fmt.Sprintf("all (0-%d)", n-1)
	}
	return flagval.FormatRanks(ranks)
}
