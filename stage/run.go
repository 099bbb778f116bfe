package stage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lakestream/lakestream/internal/backoff"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// RunOptions configure Run. Zero values take the defaults noted.
type RunOptions struct {
	Store      store.Store
	Log        *txn.Log // its Now, the store's clock, ages heartbeats (MaxLead) and gc's grace
	Tree       *Tree
	ProducerID string
	// Once: commit the batches sealed at start, then return.
	Once bool
	// MaxLead holds uploads back while the next step would be more than
	// MaxLead steps past the slowest live consumer (or the newest
	// checkpoint when no consumer reports); 0 disables it.
	MaxLead int64
	Poll    time.Duration // how often to look for new batches (default 500ms)
	// GCEvery runs gc that often while running (0: never), with GCGrace.
	GCEvery time.Duration
	GCGrace time.Duration
	Logger  *slog.Logger
	// ConsumerTimeout: a consumer whose heartbeat is older no longer holds
	// MaxLead back (0: txn.ConsumerTimeout).
	ConsumerTimeout time.Duration
	// StoreWaiting, if set, is told when the run starts and stops waiting
	// for an unreachable store.
	StoreWaiting func(bool)
	// WaitForLock: while another process holds the staging directory (a
	// previous incarnation still stopping, or a stopped one), wait for it
	// with backoff instead of failing with ErrLocked; until StartDeadline,
	// if set.
	WaitForLock   bool
	StartDeadline time.Time
	// PassDeadline, if set, bounds a whole pass (run --once): when it
	// passes, Run stops as on a signal but returns an ErrPassDeadline
	// naming what it was waiting for. The batches not committed stay
	// staged.
	PassDeadline time.Time
	// ShutdownTimeout bounds everything Run does after it was told to
	// stop (a signal, a pass deadline, an error): waiting for the commits
	// in flight, removing committed batches, closing the producer
	// (default DefaultShutdownTimeout). What is not committed by then
	// stays staged and is recognised on restart.
	ShutdownTimeout time.Duration
	// Observe and OnBatch report progress (metrics, the live line).
	// Observe is called from the producer's committer goroutine. OnBatch
	// is called from two goroutines, the scanning loop (rejected batches,
	// batches committed before a restart, back-pressure) and the cleaner
	// (committed batches), possibly at once: it must be safe for
	// concurrent use.
	Observe func(txn.CommitStats)
	OnBatch func(BatchEvent)
}

// BatchEvent is one batch leaving the staging tree.
type BatchEvent struct {
	Name     string
	Step     int64 // committed step; -1 when rejected
	Bytes    int64
	Rejected string // the reason, when rejected
	Already  bool   // the batch was committed before, as Step (-1: a step since reclaimed), and only removed now
	// Unmoved: the rejected batch could not be moved to _rejected (a full
	// disk); it stays staged, untouched, and is moved on a later pass.
	Unmoved string
	Waiting string // set (and nothing else) while back-pressure holds uploads
	// Skipped: a sealed entry that is never picked up (a symlink, a '_' or
	// '.' name), and why; reported once per entry.
	Skipped string
}

// DefaultShutdownTimeout is RunOptions.ShutdownTimeout's default: well
// inside Kubernetes' default 30 s grace period between SIGTERM and SIGKILL.
const DefaultShutdownTimeout = 20 * time.Second

// ErrPassDeadline: a run --once pass did not finish by its deadline.
var ErrPassDeadline = errors.New("pass not finished by its deadline")

// Run seals the staging tree's batches into steps, in name order, exactly
// once across crashes: the producer's cursor (the newest committed batch
// name) and its recent batch names live in the manifest, so on restart a
// batch already committed is only removed, and one named at or below the
// cursor that was never committed is rejected rather than committed out of
// order.
func Run(ctx context.Context, o RunOptions) error {
	if o.Poll <= 0 {
		o.Poll = 500 * time.Millisecond
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ShutdownTimeout <= 0 {
		o.ShutdownTimeout = DefaultShutdownTimeout
	}
	waits := &storeWaits{report: o.StoreWaiting}
	if !o.PassDeadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadlineCause(ctx, o.PassDeadline, ErrPassDeadline)
		defer cancel()
	}
	err := run(ctx, o, waits)
	if context.Cause(ctx) == ErrPassDeadline {
		return waits.deadlineErr()
	}
	if ctx.Err() != nil && (err == nil || errors.Is(err, context.Canceled)) {
		return nil // stopped by a signal: a clean exit
	}
	return err
}

func run(ctx context.Context, o RunOptions, waits *storeWaits) error {
	unlock, err := o.lock(ctx, waits)
	if err != nil {
		return err
	}
	defer unlock()
	if err := o.Tree.Sweep(); err != nil {
		return fmt.Errorf("sweeping the staging tree: %w", err)
	}
	p, err := txn.OpenProducer(ctx, o.Log, txn.ProducerOptions{
		ID: o.ProducerID, Logger: o.Logger, Observe: o.Observe, OnStoreWait: waits.txn,
	})
	if err != nil {
		return err
	}
	// Everything after the loop (waiting for the commits in flight,
	// removing committed batches, closing) shares one deadline set when
	// the loop ends: the committer retries a store that is down for as
	// long as it lives, and a shutdown must not wait for it.
	life, endLife := context.WithCancel(context.WithoutCancel(ctx))
	defer endLife()
	r := &runner{RunOptions: o, p: p, waits: waits, committed: map[string]bool{}, appended: map[string]bool{},
		unmovable: map[string]string{}, skipped: map[string]bool{}}
	res := p.Resume()
	r.cursor = res.Cursor
	for _, n := range res.Recent {
		r.committed[n] = true
	}
	r.cleanup = make(chan cleanupJob, 1024)
	var cleaner sync.WaitGroup
	cleaner.Go(func() { r.cleanLoop(life) })

	err = r.loop(ctx)
	// Unless stopped, wait for what was appended, so the staging tree is
	// cleaned of every committed batch: bounded by ctx (a pass deadline or
	// a signal) and, after an error of the loop's own (the staging volume
	// gone, a corrupt record), by the shutdown deadline, armed now: the
	// commits may wait for a store that is down, and the error must be
	// reported, not held until the store returns.
	var stop *time.Timer
	flushCtx := ctx
	if err != nil && ctx.Err() == nil {
		stop = time.AfterFunc(o.ShutdownTimeout, endLife)
		var cancel context.CancelFunc
		flushCtx, cancel = context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(life, cancel)()
	}
	if ferr := p.Flush(flushCtx); ferr != nil && err == nil && ctx.Err() == nil {
		err = ferr
	}
	if stop == nil {
		stop = time.AfterFunc(o.ShutdownTimeout, endLife)
	}
	defer stop.Stop()
	close(r.cleanup)
	cleaner.Wait()
	if cerr := p.Close(life); cerr != nil && err == nil && ctx.Err() == nil {
		err = cerr
	}
	if life.Err() != nil && err == nil && ctx.Err() == nil {
		err = fmt.Errorf("commits still in flight after %s; their batches stay staged: %w", o.ShutdownTimeout, waits.lastCause())
	}
	return err
}

// lock takes the staging directory, waiting for another holder when
// WaitForLock: exiting would hand the wait to a supervisor's restart loop
// (hundreds of restarts while a stopped incarnation held it).
func (o *RunOptions) lock(ctx context.Context, waits *storeWaits) (func(), error) {
	b := backoff.New(storeWait)
	defer waits.set(waitLock, nil)
	for attempt := 1; ; attempt++ {
		unlock, err := o.Tree.Lock(o.ProducerID)
		if err == nil || !errors.Is(err, ErrLocked) || !o.WaitForLock {
			return unlock, err
		}
		waits.set(waitLock, err)
		wait := b.Step()
		o.Logger.Warn("staging directory held by another process; waiting for it", "attempt", attempt,
			"retry_in_up_to", wait.Round(time.Millisecond), "cause", err)
		more, serr := b.WaitUntil(ctx, o.StartDeadline)
		if serr != nil {
			return nil, serr
		}
		if !more {
			return nil, fmt.Errorf("%w (still held at --start-timeout)", err)
		}
	}
}

type runner struct {
	RunOptions
	p         *txn.Producer
	waits     *storeWaits
	cursor    string          // newest batch name appended (committed or queued)
	committed map[string]bool // batch names the manifest says are committed
	cleanup   chan cleanupJob
	lastGC    time.Time
	// unmovable: rejected batches that could not leave the tree, with
	// their reason (kept: once later batches commit, the cursor passes
	// them and would give a misleading one). skipped: entries reported
	// as never picked up.
	unmovable map[string]string
	skipped   map[string]bool

	// appended holds the batches this process handed to the producer
	// that a scan may still list: they sort at or below the cursor but are
	// in flight (false) or were committed and removed since the last scan
	// began (true), not candidates for rejection. scan forgets the removed
	// ones before it lists: a listing taken after a removal no longer
	// holds the name. Shared with cleanLoop.
	appendedMu sync.Mutex
	appended   map[string]bool
	// inFlight counts TGBs appended but not yet committed: the lead
	// includes them, or a producer could run MaxLead plus its queue ahead.
	inFlight atomic.Int64

	// downSince: when the store stopped answering (zero: it answers);
	// down: the backoff while it does not.
	downSince time.Time
	down      *backoff.Backoff

	// holdBack's view, refreshed incrementally.
	leadState   *txn.State
	fenceAt     time.Time // the last idle check for a newer incarnation
	consumers   []txn.Heartbeat
	consumersAt time.Time
	clockWarned bool // said that heartbeats are not aged while the clock is unmeasured
}

type cleanupJob struct {
	name    string
	bytes   int64
	pending *txn.Pending
}

func (r *runner) loop(ctx context.Context) error {
	var first []string
	if r.Once {
		var err error
		if first, err = r.scan(); err != nil {
			return err
		}
	}
	for {
		// A failed producer (fenced, or its store gone for good) stops the
		// run; its uncommitted batches stay staged for the next run.
		if err := r.p.Err(); err != nil {
			return err
		}
		names := first
		if !r.Once {
			var err error
			if names, err = r.scan(); err != nil {
				return err
			}
		}
		wait, down := r.Poll, false
		for i, name := range names {
			err := r.batch(ctx, name)
			if store.Transient(err) && ctx.Err() == nil {
				// The store is down or refusing: the batch stays staged and
				// is tried again; exiting would only hand the wait to a
				// supervisor's restart loop. A --once pass goes on with the
				// batches it found at start, within its pass deadline.
				wait, down = r.storeDown(name, err), true
				if r.Once {
					first = names[i:]
				}
				break
			}
			if err != nil {
				return err
			}
		}
		if !down {
			r.storeUp()
			if r.Once {
				return nil
			}
		}
		if len(names) == 0 {
			if err := r.fenceCheck(ctx); err != nil {
				return err
			}
		}
		if !r.Once {
			if err := r.maybeGC(ctx); err != nil {
				return err
			}
		}
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// fenceCheckEvery is how often an idle run (nothing staged) reads the log
// to learn whether a newer incarnation took its id over, and _stream.json
// whether its stream is still there: one incremental refresh and one GET
// per producer every so often.
const fenceCheckEvery = 10 * time.Second

// fenceCheck returns ErrFenced when a newer incarnation of this producer
// registered while it had nothing to commit, or was held back: its
// committer, idle, would never learn it, and it would hold the staging directory's
// lock from the next incarnation for as long as nothing is staged (a
// rescheduled pod's old incarnation, its partition healed). Likewise it
// returns txn.ErrStreamGone or ErrStreamReplaced when the stream was
// deleted (and perhaps created again) at its URL. A store that cannot be
// read is not a fence: the next check tries again.
func (r *runner) fenceCheck(ctx context.Context) error {
	if time.Since(r.fenceAt) < fenceCheckEvery {
		return nil
	}
	r.fenceAt = time.Now()
	if err := r.Log.CheckIdentity(ctx); txn.StreamChanged(err) {
		return err
	}
	if err := r.refreshLog(ctx); err != nil {
		if txn.StreamChanged(err) {
			return err
		}
		return nil
	}
	return r.p.FencedIn(r.leadState)
}

// storeDown notes a pass stopped by a transient store error and returns
// how long to wait before the next: capped, jittered exponential backoff,
// one log line per attempt.
func (r *runner) storeDown(batch string, err error) time.Duration {
	if r.downSince.IsZero() {
		r.downSince = time.Now()
		r.down = backoff.New(storeWait)
	}
	r.waits.set(waitRun, err)
	wait := r.down.Next()
	r.Logger.Warn("store not reachable; batch stays staged, waiting for the store", "batch", batch,
		"down_for", time.Since(r.downSince).Round(time.Millisecond), "retry_in", wait.Round(time.Millisecond), "cause", err)
	return wait
}

// storeUp ends a wait for the store, if one was on.
func (r *runner) storeUp() {
	if r.downSince.IsZero() {
		return
	}
	r.Logger.Info("store reachable again", "waited", time.Since(r.downSince).Round(time.Millisecond))
	r.downSince = time.Time{}
	r.waits.set(waitRun, nil)
}

// storeWait is the run's wait for a store that went away (and for the
// staging lock), as lakefs-produce waits for the store at start.
var storeWait = backoff.Policy{First: 500 * time.Millisecond, Max: 8 * time.Second}

// scan lists the sealed batches and reports, once each, the sealed
// entries that are never picked up.
func (r *runner) scan() ([]string, error) {
	r.appendedMu.Lock()
	maps.DeleteFunc(r.appended, func(_ string, removed bool) bool { return removed })
	r.appendedMu.Unlock()
	names, skipped, err := r.Tree.Scan()
	if err != nil {
		return nil, err
	}
	for _, sk := range skipped {
		if r.skipped[sk.Name] {
			continue
		}
		r.skipped[sk.Name] = true
		r.Logger.Warn("sealed entry not picked up", "entry", sk.Name, "why", sk.Why)
		r.event(BatchEvent{Name: sk.Name, Step: -1, Skipped: sk.Why})
	}
	return names, nil
}

// batch handles one sealed batch.
func (r *runner) batch(ctx context.Context, name string) error {
	if why, ok := r.unmovable[name]; ok {
		return r.reject(name, why)
	}
	switch {
	case r.isAppended(name):
		return r.p.Err() // in flight (the cleaner removes it once committed), or removed since the scan
	case r.committed[name]:
		// Committed before a crash and not yet removed, or a writer that
		// restarted its numbering and sealed new data under an old name:
		// only the committed content itself may be removed.
		step, why, err := r.sameAsCommitted(ctx, name)
		if err != nil {
			return err
		}
		if why != "" {
			return r.reject(name, why)
		}
		r.Logger.Info("batch was already committed (same content); removing it", "batch", name, "step", step)
		if err := r.Tree.Remove(name); err != nil {
			return err
		}
		r.event(BatchEvent{Name: name, Step: step, Already: true})
		return nil
	case name <= r.cursor:
		// An invalid batch is told what is wrong with it first: renaming
		// it alone would not make it commit.
		if _, err := r.Tree.Load(name, r.Log.Config.Ranks); errors.Is(err, ErrInvalid) {
			return r.reject(name, err.Error())
		}
		return r.reject(name, fmt.Sprintf("batch %q is named at or below this producer's cursor %q and was never committed: batches commit in name order; rename it to sort after %q to commit it", name, r.cursor, r.cursor))
	}
	b, err := r.Tree.Load(name, r.Log.Config.Ranks)
	if err != nil && r.vanished(name) {
		return nil
	}
	if errors.Is(err, ErrInvalid) {
		return r.reject(name, err.Error())
	}
	if err != nil {
		return err
	}
	if err := r.holdBack(ctx); err != nil {
		return err
	}
	pd, err := r.p.Append(ctx, b.Batch())
	if errors.Is(err, txn.ErrSource) && r.vanished(name) {
		return nil
	}
	if errors.Is(err, txn.ErrSource) {
		return r.reject(name, err.Error())
	}
	if err != nil {
		return err
	}
	r.cursor = name
	r.setAppended(name, false)
	r.inFlight.Add(1)
	select {
	case r.cleanup <- cleanupJob{name: name, bytes: b.Bytes, pending: pd}:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// vanished reports (and says, once) that a batch was moved or removed by
// someone else while it was read: nothing of it was committed, and the
// run goes on with the next batch.
func (r *runner) vanished(name string) bool {
	if _, err := os.Lstat(filepath.Join(r.Tree.Dir, name, Sealed)); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	why := "it was moved or removed while it was read; nothing of it was committed"
	r.Logger.Warn("sealed batch gone", "batch", name, "why", why)
	r.event(BatchEvent{Name: name, Step: -1, Skipped: why})
	return true
}

// reject moves a batch to _rejected. One that cannot be moved (a full
// disk) stays staged and is retried on later passes, reported once; the
// run goes on, as committing later batches is what frees space.
func (r *runner) reject(name, reason string) error {
	_, retry := r.unmovable[name]
	dst, err := r.Tree.Reject(name, reason)
	if errors.Is(err, ErrUnmovable) {
		r.unmovable[name] = reason
		if !retry {
			r.Logger.Warn("batch rejected but not moved; it stays staged and is moved on a later pass", "batch", name, "reason", reason, "err", err)
			r.event(BatchEvent{Name: name, Step: -1, Rejected: reason, Unmoved: err.Error()})
		}
		return nil
	}
	if err != nil {
		return err
	}
	delete(r.unmovable, name)
	r.Logger.Warn("batch rejected", "batch", name, "moved_to", dst, "reason", reason)
	if !retry {
		r.event(BatchEvent{Name: name, Step: -1, Rejected: reason})
	}
	return nil
}

func (r *runner) event(e BatchEvent) {
	if r.OnBatch != nil {
		r.OnBatch(e)
	}
}

func (r *runner) isAppended(name string) bool {
	r.appendedMu.Lock()
	defer r.appendedMu.Unlock()
	_, ok := r.appended[name]
	return ok
}

func (r *runner) setAppended(name string, removed bool) {
	r.appendedMu.Lock()
	defer r.appendedMu.Unlock()
	r.appended[name] = removed
}

// cleanLoop removes each batch once its commit is durable, in order.
// life ends when the run's shutdown deadline passes: a batch whose
// commit is not durable by then stays staged.
func (r *runner) cleanLoop(life context.Context) {
	for j := range r.cleanup {
		step, err := j.pending.Wait(life)
		r.inFlight.Add(-1)
		if err != nil {
			continue // the producer failed (Run returns its error), or shutdown ran out of time
		}
		if err := r.Tree.Remove(j.name); err != nil {
			r.Logger.Error("committed batch not removed; it will be removed on restart", "batch", j.name, "err", err)
			continue
		}
		r.setAppended(j.name, true)
		r.event(BatchEvent{Name: j.name, Step: step, Bytes: j.bytes})
	}
}

// holdBack waits while the next step would be more than MaxLead steps past
// the slowest consumer (or the newest checkpoint). It keeps its own state,
// refreshed incrementally, and rereads heartbeats at most every
// consumerPoll: a check costs a read of the new versions, not the log.
func (r *runner) holdBack(ctx context.Context) error {
	if r.MaxLead <= 0 {
		return nil
	}
	logged := false
	var fails *backoff.Backoff // while the check fails
	var wait time.Duration
	var denied txn.Refusal // as txn's own retries: expired credentials stay expired
	for {
		err := r.refreshLead(ctx)
		if txn.Permanent(err) {
			return err
		}
		if derr := denied.Check(err); derr != nil {
			return derr
		}
		if err != nil {
			// The store is down or throttling: wait it out, holding uploads.
			if fails == nil {
				fails = backoff.New(backoff.Policy{First: 100 * time.Millisecond, Max: 2 * time.Second})
			}
			r.waits.set(waitHoldBack, err)
			if n := fails.Waits() + 1; n == 1 || n%20 == 0 {
				r.Logger.Warn("back-pressure check failed; retrying", "err", err, "failures", n)
			}
			if serr := fails.Wait(ctx); serr != nil {
				return serr
			}
			continue
		}
		if fails != nil {
			fails = nil
			r.waits.set(waitHoldBack, nil)
		}
		// A producer fenced while held (a rescheduled incarnation took its
		// id over) stops here: held, it commits nothing, so its committer
		// may never learn it, and it would keep the staging directory's
		// lock from the next incarnation for as long as it is held.
		if err := cmp.Or(r.p.Err(), r.p.FencedIn(r.leadState)); err != nil {
			return err
		}
		base, who, ok := txn.LeadBase(r.leadState, r.consumers, r.Log.StoreTime(), r.staleAfter())
		next := r.leadState.NextStep() + r.inFlight.Load()
		lead := next - base
		if !ok || lead <= r.MaxLead {
			if logged {
				r.Logger.Info("back-pressure released", "next_step", next, "base", base)
			}
			return nil
		}
		why := fmt.Sprintf("waiting: next step %d is %d steps ahead of %s at step %d (--max-lead %d)", next, lead, who, base, r.MaxLead)
		if !logged {
			r.Logger.Info("back-pressure: holding uploads", "reason", why)
			logged = true
		}
		r.event(BatchEvent{Waiting: why})
		// Held, nothing commits: only these checks learn that the stream
		// was replaced (the new one's consumers may hold it for good).
		if err := r.fenceCheck(ctx); err != nil {
			return err
		}
		if err := r.maybeGC(ctx); err != nil {
			return err
		}
		// Heartbeats move at most every few seconds (a mount writes its
		// position when it moved and the head stands still, at most every
		// --heartbeat-interval, default 10 s) and a reclaim is rare: while held,
		// look again at a pace that grows to holdPoll, so a thousand held
		// producers do not list thousands of heartbeats several times a
		// second.
		wait = min(max(wait*2, r.Poll, 200*time.Millisecond), holdPoll)
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

// staleAfter is how old a heartbeat may be and still hold producers back.
// Heartbeats are aged by the store's clock (the log's), as gc does.
// Unmeasured, it could make a live consumer look dead (a machine an hour
// ahead): every heartbeat then holds, stale or not, until the clock is
// measured (store.Clock.Keep retries it).
func (r *runner) staleAfter() time.Duration {
	err := r.Log.ClockErr()
	if err == nil {
		return r.ConsumerTimeout
	}
	if !r.clockWarned {
		r.Logger.Warn("back-pressure counts every consumer's heartbeat as live until the store's clock is measured", "err", err)
		r.clockWarned = true
	}
	return math.MaxInt64
}

// consumerPoll bounds how often heartbeats (one GET per consumer) are
// reread: no more often than mounts write them; holdPoll bounds how
// often a held producer looks at the log and the heartbeats again.
const (
	consumerPoll = 10 * time.Second // a held-back mount's heartbeat moves at most every --heartbeat-interval (10 s)
	holdPoll     = 2 * time.Second
)

func (r *runner) refreshLead(ctx context.Context) error {
	if err := r.refreshLog(ctx); err != nil {
		return err
	}
	if time.Since(r.consumersAt) >= consumerPoll {
		cons, err := txn.Consumers(ctx, r.Store)
		if err != nil {
			return err
		}
		r.consumers, r.consumersAt = cons, time.Now()
	}
	return nil
}

// refreshLog brings leadState up to the log's head.
func (r *runner) refreshLog(ctx context.Context) error {
	if r.leadState == nil {
		st, err := r.Log.Load(ctx)
		if err != nil {
			return err
		}
		r.leadState = st
		return nil
	}
	_, err := r.Log.Refresh(ctx, r.leadState)
	return err
}

func (r *runner) maybeGC(ctx context.Context) error {
	if r.GCEvery <= 0 || time.Since(r.lastGC) < r.GCEvery {
		return nil
	}
	r.lastGC = time.Now()
	rep, err := txn.GC(ctx, r.Log, txn.GCOptions{Grace: r.GCGrace, Logger: r.Logger})
	switch {
	case err != nil && ctx.Err() != nil:
		return nil // stopped by a signal: not a failure; the next run's gc goes on
	case txn.StreamChanged(err):
		return err // the stream is not this run's any more: run stops
	case err != nil:
		r.Logger.Warn("gc failed; will retry", "err", err)
		return nil
	case rep.Busy != nil:
		r.Logger.Debug("gc: another gc is running", "holder", rep.Busy.Holder, "since", rep.Busy.Since)
		return nil
	}
	if len(rep.HeldBy) > 0 {
		r.Logger.Info("gc held back by live consumers", "allowed_below", *rep.AllowedBelow, "reclaimed_below", rep.HeldBy[0].Step,
			"slowest", rep.HeldBy[0].Node, "consumers", len(rep.HeldBy))
	}
	if rep.ReclaimedSteps > 0 || len(rep.DataDeleted)+len(rep.Orphans)+rep.LogDeletedCount > 0 {
		r.Logger.Info("gc", "reclaimed_steps", rep.ReclaimedSteps, "data_deleted", len(rep.DataDeleted),
			"orphans", len(rep.Orphans), "log_deleted", rep.LogDeletedCount, "bytes", rep.Bytes)
	}
	return nil
}

// sameAsCommitted compares the staged batch name with what this producer
// committed under that name. why is empty when every file's name, size and
// CRC32C match the manifest's; otherwise it is the reason to reject.
func (r *runner) sameAsCommitted(ctx context.Context, name string) (step int64, why string, err error) {
	st, err := r.Log.Load(ctx)
	if err != nil {
		return -1, "", err
	}
	var tgb *txn.TGB
	for i := len(st.Steps) - 1; i >= 0; i-- {
		if t := st.Steps[i]; t.Producer == r.ProducerID && t.Batch == name {
			tgb = t
			break
		}
	}
	if tgb == nil {
		// Committed, and the step reclaimed since (others may have
		// committed it while this producer was down): the producer state
		// keeps the batch's print.
		if p := st.Producers[r.ProducerID]; p != nil {
			if pr, ok := p.PrintOf(name); ok {
				return r.sameAsPrint(ctx, name, pr)
			}
		}
		// A state from before prints: the object describes itself until gc
		// deletes it after the grace period.
		if tgb, err = r.Log.ReclaimedBatch(ctx, st, r.ProducerID, name); err != nil {
			return -1, "", err
		}
	}
	if tgb == nil {
		return -1, fmt.Sprintf("batch %q was committed by producer %s before, as a step gc has since reclaimed and deleted, so its content cannot be compared: batch names must not be reused; rename it to sort after %q to commit it", name, r.ProducerID, r.cursor), nil
	}
	as := fmt.Sprintf("as step %d", tgb.Step)
	if tgb.Step < 0 {
		as = "as a step since reclaimed"
	}
	b, err := r.Tree.Load(name, r.Log.Config.Ranks)
	if errors.Is(err, ErrInvalid) {
		return -1, fmt.Sprintf("batch %q was already committed %s, and the staged batch differs: %v", name, as, err), nil
	}
	if err != nil {
		return -1, "", err
	}
	differs := func(what string) string {
		return fmt.Sprintf("batch %q was already committed %s with other content (%s): a writer reused a committed batch name; rename it to sort after %q to commit it", name, as, what, r.cursor)
	}
	for rank := -1; rank < len(b.Ranks); rank++ {
		files, label := b.Shared, "step-level files"
		if rank >= 0 {
			files, label = b.Ranks[rank], fmt.Sprintf("rank-%d", rank)
		}
		p, err := r.Log.Pack(ctx, tgb, rank)
		if err != nil {
			return -1, "", err
		}
		var committed []txn.File
		if p != nil {
			committed = p.Files
		}
		if len(committed) != len(files) {
			return -1, differs(fmt.Sprintf("%s: %d files staged, %d committed", label, len(files), len(committed))), nil
		}
		for i, f := range files {
			c := committed[i]
			if c.Name != f.Name || c.Size != f.Size {
				return -1, differs(fmt.Sprintf("%s: staged %s (%d bytes), committed %s (%d bytes)", label, f.Name, f.Size, c.Name, c.Size)), nil
			}
			crc, err := fileCRC(ctx, f.Path)
			if err != nil {
				return -1, "", err
			}
			if crc != c.CRC {
				return -1, differs(fmt.Sprintf("%s/%s: CRC32C %08x staged, %08x committed", label, f.Name, crc, c.CRC)), nil
			}
		}
	}
	return tgb.Step, "", nil
}

// sameAsPrint compares the staged batch name with the print of what was
// committed under that name, as a step since reclaimed (step -1).
func (r *runner) sameAsPrint(ctx context.Context, name string, pr txn.BatchPrint) (step int64, why string, err error) {
	b, err := r.Tree.Load(name, r.Log.Config.Ranks)
	if errors.Is(err, ErrInvalid) {
		return -1, fmt.Sprintf("batch %q was already committed as a step since reclaimed, and the staged batch differs: %v", name, err), nil
	}
	if err != nil {
		return -1, "", err
	}
	got, err := r.Log.PrintBatch(ctx, b.Batch())
	if errors.Is(err, txn.ErrSource) {
		return -1, fmt.Sprintf("batch %q was already committed as a step since reclaimed, and the staged batch differs: %v", name, err), nil
	}
	if err != nil {
		return -1, "", err
	}
	if got != pr {
		return -1, fmt.Sprintf("batch %q was already committed as a step since reclaimed with other content (its files' names, sizes or CRC32Cs differ): a writer reused a committed batch name; rename it to sort after %q to commit it", name, r.cursor), nil
	}
	return -1, "", nil
}

func fileCRC(ctx context.Context, path string) (uint32, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	h := crc32.New(crc32.MakeTable(crc32.Castagnoli))
	if _, err := io.Copy(h, f); err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	return h.Sum32(), nil
}

// What a run may be waiting for the store in (or, at start, for the
// staging directory); the gauge is on while any of them is.
type waitSource int

const (
	waitRun      waitSource = iota // a pass stopped by a store error
	waitHoldBack                   // the back-pressure check
	waitTxn                        // uploads, commits, the producer's load (txn's own retries)
	waitLock                       // the staging directory another process holds
	numWaits
)

// storeWaits folds the run's waits for the store into one on/off report
// (RunOptions.StoreWaiting, the lakefs_produce_store_waiting gauge) and
// keeps the last cause, for a pass that runs out of time.
type storeWaits struct {
	report func(bool)

	mu    sync.Mutex
	on    [numWaits]bool // GUARDED_BY(mu)
	txnN  int            // GUARDED_BY(mu): txn's retry loops waiting now
	cause error          // GUARDED_BY(mu): the newest store error waited on
	was   bool           // GUARDED_BY(mu): what report was last told
}

func (w *storeWaits) set(src waitSource, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.on[src] = cause != nil
	if src == waitLock {
		cause = nil // not the store's error: kept out of a deadline's message
	}
	w.changedLocked(cause)
}

// txn is txn.ProducerOptions.OnStoreWait: each retry loop of the
// producer reports its start and its end, possibly from several
// goroutines at once.
func (w *storeWaits) txn(waiting bool, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if waiting {
		w.txnN++
	} else if w.txnN > 0 {
		w.txnN--
	}
	w.on[waitTxn] = w.txnN > 0
	if !waiting {
		cause = nil
	}
	w.changedLocked(cause)
}

func (w *storeWaits) changedLocked(cause error) {
	if cause != nil {
		w.cause = cause
	}
	now := slices.Contains(w.on[:], true)
	if now != w.was && w.report != nil {
		w.report(now)
	}
	w.was = now
}

func (w *storeWaits) lastCause() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cause == nil {
		return errors.New("the store did not answer in time")
	}
	return w.cause
}

// deadlineErr says why a pass ran out of time: waiting for the store (and
// its last error), or just slow.
func (w *storeWaits) deadlineErr() error {
	w.mu.Lock()
	cause := w.cause
	w.mu.Unlock()
	if cause != nil {
		return fmt.Errorf("%w: waiting for the store (last error: %v); the batches not committed stay staged for the next run", ErrPassDeadline, cause)
	}
	return fmt.Errorf("%w; the batches not committed stay staged for the next run", ErrPassDeadline)
}
