// Package backoff is the one way Lakestream waits between attempts at
// something that may recover by itself (a store that is down or
// throttling, a lock another process holds, a commit that lost a race):
// capped exponential backoff, each wait drawn from the upper half of the
// current step ("equal jitter"), so that many processes retrying one store
// do not hit it in step, and none retries back to back.
//
// A Backoff is used by one goroutine; nothing here holds shared state.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a backoff's shape: the first step and the cap.
type Policy struct {
	First time.Duration
	Max   time.Duration
}

// Backoff is one sequence of attempts under a Policy.
type Backoff struct {
	p    Policy
	step time.Duration
	n    int
}

// New starts a sequence at p.First.
func New(p Policy) *Backoff {
	if p.First <= 0 {
		p.First = time.Millisecond
	}
	if p.Max < p.First {
		p.Max = p.First
	}
	return &Backoff{p: p, step: p.First}
}

// Next returns the wait before the next attempt, in [step/2, step], and
// doubles the step up to the cap.
func (b *Backoff) Next() time.Duration {
	d := Jitter(b.step)
	b.step = Double(b.step, b.p.Max)
	b.n++
	return d
}

// Step is the current step (the largest wait Next may return now).
func (b *Backoff) Step() time.Duration { return b.step }

// Waits is how many waits Next has handed out since the start or Reset.
func (b *Backoff) Waits() int { return b.n }

// Reset starts the sequence again at the first step (after a success).
func (b *Backoff) Reset() { b.step, b.n = b.p.First, 0 }

// Wait sleeps for Next() or until ctx ends (then it returns ctx.Err()).
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// WaitUntil is Wait with the sleep cut at deadline (a zero deadline is
// none). It reports whether time is left after the sleep for another
// attempt: false once the deadline has passed, so that a caller makes its
// last attempt at the deadline and not a step before it.
func (b *Backoff) WaitUntil(ctx context.Context, deadline time.Time) (more bool, err error) {
	d := b.Next()
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			return false, ctx.Err()
		}
		d = min(d, left)
	}
	return true, Sleep(ctx, d)
}

// Jitter returns a duration drawn uniformly from [d/2, d].
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return max(d, 0)
	}
	return d/2 + rand.N(d-d/2+1)
}

// Double returns 2d capped at max, without overflowing.
func Double(d, max time.Duration) time.Duration {
	if d > max/2 {
		return max
	}
	return 2 * d
}

// Grow returns first doubled n times, capped at max, without overflowing
// however large n or first is (a shift does overflow: first<<n for a first
// of hours and n of 20 wraps negative).
func Grow(first time.Duration, n int, max time.Duration) time.Duration {
	d := min(first, max)
	for i := 0; i < n && d < max; i++ {
		d = Double(d, max)
	}
	return d
}

// Sleep sleeps for d or until ctx ends, whichever is first; it returns
// ctx.Err() when ctx ended (also when it had ended before the call).
func Sleep(ctx context.Context, d time.Duration) error {
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
