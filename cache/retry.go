package cache

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/lakestream/lakestream/internal/backoff"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Riding out a store outage. A store that refuses connections, resets
// them, times out, answers 5xx or throttles for a few seconds (a restart,
// a failover) should cost readers a wait, not an EIO. So the mount's reads
// (blocks, memory files, and the step indexes in package mount) retry such
// errors with capped, jittered backoff for up to a window (the mount's
// --store-retry, DefaultRetryWindow) before they fail. Errors a retry
// cannot fix fail at once: the object is gone, its bytes are corrupt, the
// reader gave up (its context ended).
//
// The window counts from the start of the outage, not of each read: once
// a source's calls have failed for a whole window, a new read makes one
// attempt and fails, so a long outage costs each read one attempt (and
// the kernel, which reads a failed page twice, does not double a 30 s
// wait).

// DefaultRetryWindow is how long reads wait out transient store errors.
const DefaultRetryWindow = 30 * time.Second

// retryWait paces a read's attempts: doubling from 50 ms up to 2 s, each
// wait drawn from its upper half so that the readers of many nodes do not
// hit a recovering store in step.
var retryWait = backoff.Policy{First: 50 * time.Millisecond, Max: 2 * time.Second}

// Retryable reports whether a read should try a failed store call again:
// anything but a missing object, a range past its end, a bad key, bytes
// that fail their checksum, a full memory budget, a local failure, or a
// cancelled context. A timeout (context.DeadlineExceeded from the store's
// own request timeouts) is retryable; the caller checks its own context.
//
// It is wider than store.Transient (only "unreachable" and "unavailable",
// for writers that must not repeat what may have landed): a read repeats
// nothing, so whatever is not known to be final is worth another try
// within the read's window.
func Retryable(err error) bool {
	var local localError
	switch {
	case err == nil,
		errors.Is(err, context.Canceled),
		errors.Is(err, store.ErrNotFound),
		errors.Is(err, store.ErrRange),
		errors.Is(err, store.ErrInvalid),
		errors.Is(err, txn.ErrCorrupt),
		errors.Is(err, ErrChecksum),
		errors.Is(err, ErrNoRoom),
		errors.As(err, &local):
		return false
	}
	return true
}

// answer reports whether err is the store's answer (so the store works):
// nil, or an error about the object rather than about reaching it.
func answer(err error) bool {
	return err == nil || errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrRange) ||
		errors.Is(err, txn.ErrCorrupt) || errors.Is(err, ErrChecksum)
}

// outOfFdsHere reports whether err is this process (or the system) out of
// file descriptors: a local limit, not a store outage, whatever else the
// error says (a dial error may also be wrapped as store.ErrUnreachable).
func outOfFdsHere(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// localError marks a failure of this process (writing a memory file), not
// of the store: never retried.
type localError struct{ err error }

func (e localError) Error() string { return e.err.Error() }
func (e localError) Unwrap() error { return e.err }

// Source is one kind of store call of a mount (index reads, block reads,
// manifest polls, heartbeats): whether its calls are failing now, since
// when and why. It logs one line when it becomes degraded (with the
// cause) and one when its calls work again (with how long it lasted), not
// one per failed call. It is safe for concurrent use.
//
// Degraded has hysteresis: a run of failures makes the source degraded
// only once degradeFails calls failed in a row, or the first of them went
// degradeAfter without a call being answered. Under a few percent of
// intermittent errors (S3's 503 SlowDown) neither happens, so /health and
// lakefs_mount_degraded do not flap and the log does not fill with
// pairs of lines; an outage still shows within about a second.
type Source struct {
	name string
	log  *slog.Logger

	failing atomic.Bool // a run of failures is on: Answered's fast path

	mu   sync.Mutex
	run  outage // GUARDED_BY(mu): the current run of failures (fails 0: none)
	down bool   // GUARDED_BY(mu): the run made the source degraded (and said so)
}

// outage is a Source's current run of failures.
type outage struct {
	since time.Time
	cause error
	fails int
}

// Hysteresis of Source (see there).
const (
	degradeFails = 3
	degradeAfter = 2 * time.Second
)

// NewSource returns a Source named name (the label of
// lakefs_mount_degraded) that logs to log.
func NewSource(name string, log *slog.Logger) *Source {
	if log == nil {
		log = slog.Default()
	}
	return &Source{name: name, log: log}
}

// Name is the source's name.
func (s *Source) Name() string { return s.name }

// Failed records a failed call.
func (s *Source) Failed(err error) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.run.fails == 0 {
		s.run = outage{since: now, cause: err}
		s.failing.Store(true)
	}
	s.run.fails++
	if !s.down && (s.run.fails >= degradeFails || now.Sub(s.run.since) >= degradeAfter) {
		s.down = true
		s.log.Warn("store calls failing; retrying, serving what is cached", "source", s.name, "err", s.run.cause,
			"failed_calls", s.run.fails)
	}
}

// Answered records a call the store answered: it ends a run of failures.
func (s *Source) Answered() {
	if s == nil || !s.failing.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		s.log.Info("store calls work again", "source", s.name, "failing_for", time.Since(s.run.since).Round(time.Millisecond))
	}
	s.run, s.down = outage{}, false
	s.failing.Store(false)
}

// Degraded reports whether the source is degraded, since when its calls
// have been failing and the error that started it.
func (s *Source) Degraded() (since time.Time, cause error, ok bool) {
	if s == nil || !s.failing.Load() {
		return time.Time{}, nil, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.down {
		return time.Time{}, nil, false
	}
	return s.run.since, s.run.cause, true
}

// Retry is how a read waits out transient store errors.
type Retry struct {
	// Window bounds the wait (0: DefaultRetryWindow; negative: no retry).
	Window time.Duration
	// Source, if set, is told each attempt's outcome; its outage, once as
	// long as Window, stops new reads from waiting.
	Source *Source
}

// Do runs op until it succeeds, fails with an error that is not
// Retryable, ctx ends, or the window is over; it returns op's last error.
// A cancelled ctx stops the wait at once.
func (r Retry) Do(ctx context.Context, op func(context.Context) error) error {
	window := r.Window
	if window == 0 {
		window = DefaultRetryWindow
	}
	deadline := time.Now().Add(window)
	if since, _, ok := r.Source.Degraded(); ok && since.Add(window).Before(deadline) {
		deadline = since.Add(window)
	}
	b := backoff.New(retryWait)
	for {
		err := op(ctx)
		switch {
		case ctx.Err() != nil && err != nil:
			return err
		case Retryable(err):
			// This process out of fds (a dial's socket) is retried, as
			// fds come back when files close, but never blamed on the
			// store: it would mark the source degraded with no store
			// call left to clear it.
			if !outOfFdsHere(err) {
				r.Source.Failed(err)
			}
		case answer(err):
			r.Source.Answered()
			return err
		default:
			return err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return err
		}
		if serr := backoff.Sleep(ctx, min(b.Next(), left)); serr != nil {
			return fmt.Errorf("%w (while retrying: %v)", serr, err)
		}
	}
}
