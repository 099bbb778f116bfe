package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lakestream/lakestream/internal/backoff"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Waiting for the store at start: a daemon outlives a store outage instead
// of exiting into its supervisor's restart loop (thousands of restarts in a
// few minutes, or a Kubernetes CrashLoopBackOff for a transient outage).
var connectWait = backoff.Policy{First: 500 * time.Millisecond, Max: 8 * time.Second}

// connectOptions say how long connect waits.
type connectOptions struct {
	URL string
	// FailFast: one attempt (run --once, scripts).
	FailFast bool
	// Timeout: give up after this long (0: wait as long as it takes).
	Timeout time.Duration
	Logger  *slog.Logger
	// Waiting is told when waiting starts and ends (the gauge).
	Waiting func(bool)
}

// connect opens the store, checks it and opens the stream, waiting out a
// store that is unreachable or answers "not now" (store.Transient) with
// capped, jittered exponential backoff, one log line per attempt with the
// cause. Anything else (a bad URL, credentials, a store that does not
// honour create-if-absent, no stream) fails at once: waiting cannot fix it.
func connect(ctx context.Context, o connectOptions) (store.Store, *txn.Log, error) {
	var deadline time.Time
	started := time.Now()
	if o.Timeout > 0 {
		deadline = started.Add(o.Timeout)
	}
	b := backoff.New(connectWait)
	defer o.waiting(false)
	for attempt := 1; ; attempt++ {
		// An attempt is bounded by the store's own request timeouts, not
		// cut at the deadline: the one made at the deadline must be able
		// to succeed.
		s, l, err := connectOnce(ctx, o.URL)
		// Only a store that is not reachable is "still not reachable" at
		// the deadline: anything else (no stream, refused credentials) is
		// said as it is, whenever it comes.
		if err == nil || !store.Transient(err) || o.FailFast || ctx.Err() != nil {
			if attempt > 1 && err == nil {
				o.Logger.Info("store reachable; starting", "waited", time.Since(started).Round(time.Millisecond))
			}
			return s, l, err
		}
		if !deadline.IsZero() && !time.Now().Before(deadline) {
			return nil, nil, fmt.Errorf("store %s still not reachable after %s (--start-timeout %s): %w",
				store.Redact(o.URL), time.Since(started).Round(100*time.Millisecond), o.Timeout, err)
		}
		o.waiting(true)
		// The attempts go on up to the deadline itself: the last wait is
		// cut short to end at it, and one more attempt is made there.
		o.Logger.Warn("store not reachable; waiting for it", "attempt", attempt, "retry_in_up_to", b.Step().Round(time.Millisecond), "cause", err)
		more, serr := b.WaitUntil(ctx, deadline)
		if serr != nil {
			return nil, nil, serr
		}
		if !more {
			return nil, nil, fmt.Errorf("store %s still not reachable after %s (--start-timeout %s): %w",
				store.Redact(o.URL), time.Since(started).Round(100*time.Millisecond), o.Timeout, err)
		}
	}
}

func (o connectOptions) waiting(on bool) {
	if o.Waiting != nil {
		o.Waiting(on)
	}
}

func connectOnce(ctx context.Context, url string) (store.Store, *txn.Log, error) {
	s, err := openStore(ctx, url)
	if err != nil {
		return nil, nil, err
	}
	if err := store.Probe(ctx, s); err != nil {
		if store.Transient(err) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("refusing store %s: %w", store.Redact(url), err)
	}
	l, err := txn.Open(ctx, s)
	if err != nil {
		return nil, nil, err
	}
	return s, l, nil
}
