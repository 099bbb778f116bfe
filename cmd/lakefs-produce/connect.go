package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Waiting for the store at start: a daemon outlives a store outage instead
// of exiting into its supervisor's restart loop (thousands of restarts in a
// few minutes, or a Kubernetes CrashLoopBackOff for a transient outage).
const (
	connectMin = 500 * time.Millisecond
	connectMax = 8 * time.Second
)

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
	if o.Timeout > 0 {
		deadline = time.Now().Add(o.Timeout)
	}
	started := time.Now()
	delay := connectMin
	for attempt := 1; ; attempt++ {
		s, l, err := connectOnce(ctx, o.URL)
		if err == nil || !store.Transient(err) || o.FailFast || ctx.Err() != nil {
			if attempt > 1 && err == nil {
				o.Logger.Info("store reachable; starting", "waited", time.Since(started).Round(time.Millisecond))
			}
			o.waiting(false)
			return s, l, err
		}
		if !deadline.IsZero() && time.Now().Add(delay/2).After(deadline) {
			o.waiting(false)
			return nil, nil, fmt.Errorf("store %s still not reachable after %s (--start-timeout): %w",
				store.Redact(o.URL), time.Since(started).Round(time.Second), err)
		}
		o.waiting(true)
		wait := delay/2 + rand.N(delay/2+1) // jitter: restarted producers do not retry in step
		o.Logger.Warn("store not reachable; waiting for it", "attempt", attempt, "retry_in", wait.Round(time.Millisecond), "cause", err)
		if err := sleepCtx(ctx, wait); err != nil {
			o.waiting(false)
			return nil, nil, err
		}
		delay = min(delay*2, connectMax)
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

// sleepCtx sleeps for d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
