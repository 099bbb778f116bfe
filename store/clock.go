package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Store time.
//
// Processes on different machines compare times one of them wrote with
// their own clock: a heartbeat's age, a reclamation's age against the
// grace period, a commit's age against the log retention. Two machines'
// clocks may differ by minutes. The one clock every process can read is
// the store's: each object carries the Last-Modified the store gave it.
// A Clock is this process's reading of the store's clock: the local clock
// plus an offset measured from an object written for the purpose.
//
// The offset is the probe's Last-Modified minus the local time at which
// its write returned. The store stamped it at some moment of the write,
// no later than its end, and stores with whole-second Last-Modified (S3,
// Azure) truncate the stamp, so a Clock never reads ahead of the store's
// time; it reads behind by at most the write's round trip plus the
// stamp's resolution (1 s). An age computed against a stamp is therefore
// right to about a second: at most the round trip plus the resolution
// too short, and at most the resolution too long (an object stamped in a
// whole second may have been written up to a second later). An object
// written before the measurement never looks younger than zero. The
// decisions taken by time allow for minutes (a heartbeat every minute
// against a 3-minute timeout, a 10-minute grace period, an hour of log
// retention); what would move them is a clock minutes off, which the
// measured offset cancels.

// ClockResync is how often a long-running process measures the offset
// again (Clock.Keep): clocks drift by milliseconds an hour, and an NTP
// step is caught within this.
const ClockResync = 10 * time.Minute

// maxClockWrite: a probe write slower than this measures nothing (the
// offset would be uncertain by as much); the last offset stays.
const maxClockWrite = 5 * time.Second

// unmeasuredRetry is how soon Keep tries again while the clock has never
// been measured: every age-based decision waits for it (Clock.Unmeasured),
// so it is retried well before ClockResync.
const unmeasuredRetry = 30 * time.Second

// ErrClockUnmeasured: the store's clock has not been measured yet, so
// this process cannot tell how old anything is. No decision by age (a
// consumer's liveness, a grace period, a retention) may be taken on it.
var ErrClockUnmeasured = errors.New("the store's clock is not measured")

// Clock reads the store's time: Now is the local clock plus the offset
// measured by the last successful Measure (0 before one). It is safe for
// concurrent use. The zero value is not usable; use NewClock.
type Clock struct {
	s     Store
	local func() time.Time
	log   *slog.Logger

	offset   atomic.Int64 // nanoseconds, added to local
	measured atomic.Bool
	lastErr  atomic.Pointer[error] // the last failed measurement's cause, while unmeasured
}

// NewClock returns a clock of s's time, unmeasured (offset 0). local is
// this process's clock (nil: time.Now); tests shift it to act as a
// machine whose clock is wrong. log gets the measurements at debug level.
func NewClock(s Store, local func() time.Time, log *slog.Logger) *Clock {
	if local == nil {
		local = time.Now
	}
	if log == nil {
		log = slog.Default()
	}
	return &Clock{s: s, local: local, log: log}
}

// Now is the store's time as this process knows it.
func (c *Clock) Now() time.Time {
	return c.local().Add(time.Duration(c.offset.Load()))
}

// Offset is what Now adds to the local clock, and whether a measurement
// set it.
func (c *Clock) Offset() (time.Duration, bool) {
	return time.Duration(c.offset.Load()), c.measured.Load()
}

// Unmeasured returns nil once a measurement succeeded, and before that
// an error wrapping ErrClockUnmeasured and the last measurement's cause.
// Every decision by age asks it first and refuses or waits on an error.
func (c *Clock) Unmeasured() error {
	if c.measured.Load() {
		return nil
	}
	if p := c.lastErr.Load(); p != nil {
		return fmt.Errorf("%w (its probe: %w)", ErrClockUnmeasured, *p)
	}
	return fmt.Errorf("%w: no measurement made yet", ErrClockUnmeasured)
}

// Measure writes a probe object under ProbePrefix, reads its
// Last-Modified and sets the offset from it; the probe is deleted (gc
// sweeps one whose delete failed). On failure the offset stays what it
// was and the failure is returned: logged at warn level while the clock
// was never measured (decisions by age wait for it), else at debug level
// (the last offset is still good to a drift of milliseconds).
func (c *Clock) Measure(ctx context.Context) error {
	off, took, err := c.probe(ctx)
	if err != nil {
		before, measured := c.Offset()
		if measured {
			c.log.Debug("could not measure the store's clock; keeping the offset", "offset", before, "err", err)
		} else if ctx.Err() == nil {
			c.lastErr.Store(&err)
			c.log.Warn("could not measure the store's clock; nothing is judged by age (gc, consumer liveness) until it is", "err", err)
		}
		return err
	}
	c.offset.Store(int64(off))
	c.measured.Store(true)
	c.lastErr.Store(nil)
	c.log.Debug("measured the store's clock", "offset", off, "write_took", took)
	return nil
}

// probe returns the offset one probe write shows and how long it took.
func (c *Clock) probe(ctx context.Context) (time.Duration, time.Duration, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	key := ProbePrefix + hex.EncodeToString(rnd[:])
	start := c.local()
	err := PutBytes(ctx, c.s, key, []byte("clock"))
	end := c.local()
	if err != nil {
		return 0, 0, fmt.Errorf("writing %s: %w", key, err)
	}
	defer c.s.Delete(context.WithoutCancel(ctx), key) //nolint:errcheck // best effort; gc sweeps leftovers
	took := end.Sub(start)
	if took > maxClockWrite {
		return 0, 0, fmt.Errorf("writing %s took %s, more than %s", key, took.Round(time.Millisecond), maxClockWrite)
	}
	info, err := c.s.Stat(ctx, key)
	if err != nil {
		return 0, 0, fmt.Errorf("reading the probe's time: %w", err)
	}
	if info.ModTime.IsZero() {
		return 0, 0, errors.New("the store gives no modification time")
	}
	// The stamp is no later than the write's end: the offset never reads
	// the store's clock ahead (see Store time above).
	return info.ModTime.Sub(end), took, nil
}

// Keep measures the offset every ClockResync until ctx ends, and every
// unmeasuredRetry while it has never been measured. A failed measurement
// keeps the last offset. ok, if not nil, is asked first each time; false
// skips that measurement (a mount whose stream was deleted: a probe would
// bring its directory back on a file store).
func (c *Clock) Keep(ctx context.Context, ok func(context.Context) bool) {
	for {
		wait := ClockResync
		if !c.measured.Load() {
			wait = unmeasuredRetry
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
			if ok == nil || ok(ctx) {
				_ = c.Measure(ctx) // logged; the last offset stays
			}
		}
	}
}
