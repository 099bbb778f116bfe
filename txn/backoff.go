package txn

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lakestream/lakestream/internal/backoff"
	"github.com/lakestream/lakestream/store"
)

// retryWait paces retries of store calls that failed in a way waiting may
// cure (internal/backoff), and tells the producer's OnStoreWait, when one
// is on the context, that it waits and, at done, that it got through.
type retryWait struct {
	b       *backoff.Backoff
	report  func(waiting bool, cause error)
	waiting bool
	denied  Refusal
}

// CredentialsGrace is how long txn retries a store that refuses its
// credentials (store.ErrCredentials: 401, 403) before giving up. A refusal
// can pass (a role or policy still propagating, a clock skewed for a
// moment), but credentials that expired stay expired: they are read once,
// at start, so only a restart with fresh ones can cure it, and retrying
// for ever would look like an outage (issue 55 item 12).
const CredentialsGrace = time.Minute

// storeRetry is the pacing of txn's retries of store calls.
var storeRetry = backoff.Policy{First: 20 * time.Millisecond, Max: 5 * time.Second}

// storeWaitKey carries a ProducerOptions.OnStoreWait on the contexts of a
// producer's calls, so that every retry loop under them (upload, commit,
// log reads, load and register) reports its waits without threading the
// hook through each function: the context carries the caller's hook as
// net/http/httptrace carries a request's.
type storeWaitKey struct{}

func withStoreWait(ctx context.Context, report func(bool, error)) context.Context {
	if report == nil {
		return ctx
	}
	return context.WithValue(ctx, storeWaitKey{}, report)
}

func newRetryWait(ctx context.Context) *retryWait {
	report, _ := ctx.Value(storeWaitKey{}).(func(bool, error))
	return &retryWait{b: backoff.New(storeRetry), report: report}
}

// wait sleeps before the next attempt after cause, or until ctx ends. It
// gives up, wrapping cause, once the store has refused the credentials
// for CredentialsGrace.
func (r *retryWait) wait(ctx context.Context, cause error) error {
	if err := r.denied.Check(cause); err != nil {
		return err
	}
	if r.report != nil && !r.waiting {
		r.waiting = true
		r.report(true, cause)
	}
	return r.b.Wait(ctx)
}

// Refusal tracks, across the failures of one retry loop, how long the
// store has refused the credentials. The zero value is ready.
type Refusal struct {
	since time.Time // zero while the store does not refuse them
}

// Check notes the outcome of an attempt (err nil or not) and returns an
// error wrapping err once the store has refused the credentials
// (store.ErrCredentials) for CredentialsGrace without a break.
func (r *Refusal) Check(err error) error {
	if !errors.Is(err, store.ErrCredentials) {
		r.since = time.Time{}
		return nil
	}
	if r.since.IsZero() {
		r.since = time.Now()
	}
	if time.Since(r.since) < CredentialsGrace {
		return nil
	}
	return fmt.Errorf("the store has refused these credentials for %s; restart with fresh ones: %w", CredentialsGrace, err)
}

// done ends the wait, if one was reported (deferred by each retry loop).
func (r *retryWait) done() {
	if r != nil && r.waiting {
		r.waiting = false
		r.report(false, nil)
	}
}

// waitShort spreads retries after a lost race over a few milliseconds: a
// race lost is no store failure, and is not reported.
func waitShort(ctx context.Context) error {
	return backoff.Sleep(ctx, time.Duration(rand.Int64N(int64(5*time.Millisecond))))
}

// jitter returns d scaled by a uniform factor in [1, 1+spread].
func jitter(d time.Duration, spread float64) time.Duration {
	return time.Duration(float64(d) * (1 + spread*rand.Float64()))
}

// ewma is an exponentially weighted moving average of durations.
type ewma struct {
	d   time.Duration
	set bool
}

// add folds x in with weight w (the first sample is taken whole).
func (e *ewma) add(x time.Duration, w float64) {
	if !e.set {
		e.d, e.set = x, true
		return
	}
	e.d = time.Duration((1-w)*float64(e.d) + w*float64(x))
}

// or returns the average, or def before the first sample.
func (e *ewma) or(def time.Duration) time.Duration {
	if !e.set {
		return def
	}
	return e.d
}
