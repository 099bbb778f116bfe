package txn

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is capped exponential backoff with full jitter, for transient
// store errors.
type backoff struct {
	next time.Duration
}

const (
	backoffMin = 20 * time.Millisecond
	backoffMax = 5 * time.Second
)

func newBackoff() *backoff { return &backoff{next: backoffMin} }

func (b *backoff) wait(ctx context.Context) error {
	d := time.Duration(rand.Int64N(int64(b.next)) + 1)
	b.next = min(b.next*2, backoffMax)
	return sleep(ctx, d)
}

// waitShort spreads retries after a lost race over a few milliseconds.
func (b *backoff) waitShort(ctx context.Context) error {
	return sleep(ctx, time.Duration(rand.Int64N(int64(5*time.Millisecond))))
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
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
