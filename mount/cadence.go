package mount

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lakestream/lakestream/internal/backoff"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Polling that follows the commit cadence.
//
// A mount whose readers follow the head used to read the log every
// PollInterval (4/s): four GETs or more per step at 1 step/s, and at
// thousands of nodes several thousand GETs a second on one prefix.
// Producers commit at a cadence (a training step's time), so the next
// version is due one interval after the last one's commit time. The tailer
// learns the interval from the versions it applies and reads version v+1
// once, just after it is due; when it is not there yet it tries again
// after a delay that starts at the margin and doubles with each miss, up
// to 4 x PollInterval (1 s at the default), so a waiting reader still sees
// a late commit within about a second and a stopped producer costs a poll
// a second, not four. A poll that finds a version reads no further unless
// the next one is already due (the mount is behind). Until the cadence is
// known (two intervals seen) it polls every PollInterval, as before.
//
// Commit times are the producers' clocks, so the phase is learned as an
// offset: how long after its commit time a version becomes visible here
// (the store's latency plus any clock skew). A version first seen at a
// poll that found it bounds the offset from above; one found by the poll
// after a miss a moment earlier pins it between the two. So the offset is
// set to that midpoint after a miss, and after a hit at the first poll it
// moves a sixteenth of the margin earlier (never above what the hit
// showed): polls creep earlier until one misses, one in ten or more, and a
// skewed or slow store costs a few misses while it settles, not freshness.
// (Taking the least sighting instead ratchets: every sighting is at least
// the offset plus the margin, so the polls drift later for good.)

// cadence is what the tailer knows of the commit cadence. It is owned by
// the tailer goroutine.
type cadence struct {
	last     time.Time     // commit time of the newest version applied
	interval time.Duration // EWMA of the intervals between commits; 0 until known
	jitter   time.Duration // EWMA of |interval sample - interval|
	samples  int           // intervals seen
	offset   time.Duration // visible here this long after the commit time
	sighted  bool          // offset is set
	misses   int           // polls since the last new version that found none
	missedAt time.Time     // the last of them
}

const (
	// minMargin is the least wait after a version is due before it is
	// read: scheduling noise of both processes.
	minMargin = 10 * time.Millisecond
	// backoffFactor x PollInterval bounds the wait between misses.
	backoffFactor = 4
	// knownAfter: intervals seen before the cadence is trusted.
	knownAfter = 2
)

// known reports whether the cadence is learned.
func (c *cadence) known() bool { return c.samples >= knownAfter && c.interval > 0 }

// miss records a poll at at that found no new version.
func (c *cadence) miss(at time.Time) {
	c.misses++
	c.missedAt = at
}

// observe records that versions up to one committed at commit were first
// seen at seen, n of them since the previous observation.
func (c *cadence) observe(commit, seen time.Time, n int) {
	if n > 0 {
		c.sight(commit, seen)
		if !c.last.IsZero() && commit.After(c.last) {
			c.sample(commit.Sub(c.last) / time.Duration(n))
		}
		c.last = commit
	}
	c.misses, c.missedAt = 0, time.Time{}
}

// sight updates the offset from a version committed at commit and first
// seen at seen.
func (c *cadence) sight(commit, seen time.Time) {
	upper := seen.Sub(commit)
	switch {
	case !c.sighted:
		c.offset, c.sighted = upper, true
	case c.misses > 0 && c.interval > 0 && seen.Sub(c.missedAt) <= c.interval/2:
		// It became visible between the miss and this poll.
		c.offset = c.missedAt.Sub(commit) + seen.Sub(c.missedAt)/2
	default:
		c.offset = min(c.offset-c.margin()/16, upper)
	}
}

// sample adds one interval. A pause (many intervals without a commit)
// moves the estimate at most by doubling, so one stall does not make the
// mount poll as if the producer had slowed for good.
func (c *cadence) sample(d time.Duration) {
	c.samples++
	if c.interval == 0 {
		c.interval = d
		return
	}
	d = min(d, 2*c.interval)
	dev := d - c.interval
	c.interval += dev / 4
	c.jitter += (abs(dev) - c.jitter) / 4
}

func abs(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

// margin is how long after a version is due the first poll for it runs:
// twice the jitter, at least minMargin, at most a quarter interval.
func (c *cadence) margin() time.Duration {
	return max(min(2*c.jitter, c.interval/4), min(minMargin, c.interval/4))
}

// due is when the next version is expected to be visible here.
func (c *cadence) due() time.Time { return c.last.Add(c.interval + c.offset) }

// next is when to poll after the poll at lastPoll, while readers want new
// steps: every fast until the cadence is known; then at the next
// version's due time plus the margin; after misses, a delay doubling from
// the margin up to backoffFactor x fast.
func (c *cadence) next(lastPoll time.Time, fast time.Duration) time.Time {
	switch {
	case !c.known():
		return lastPoll.Add(fast)
	case c.misses == 0:
		at := c.due().Add(c.margin())
		if at.Before(lastPoll) {
			return lastPoll
		}
		return at
	}
	// Doubled without a shift: margin<<n overflows for margins of hours
	// (a stream committing twice a day), and a negative wait polls back
	// to back.
	return lastPoll.Add(backoff.Grow(c.margin(), c.misses-1, backoffFactor*fast))
}

// behind reports whether, at now, the version after the newest applied
// should already be visible: reading on is then no wasted GET.
func (c *cadence) behind(now time.Time) bool {
	return c.known() && !now.Before(c.due().Add(c.margin()))
}

// follower reads the log for the tailer: one version at a time while the
// cadence is known and the state recent, else txn.Log.Refresh (which also
// guards against a log cut by gc under an old state).
type follower struct {
	log *txn.Log
	st  *txn.State // the tailer's; Refresh replaces its value in place
	cad cadence
	now func() time.Time
	// storeNow is the store's time (txn.Log.StoreTime), which commit
	// times are stamped by; nil: now.
	storeNow func() time.Time
	// lastRefresh: when Refresh last ran. A full refresh runs at least
	// every fullRefreshEvery, keeping the state's view of the head fresh
	// for Refresh's own staleness check (txn.LogRetention/2).
	lastRefresh time.Time
}

// fullRefreshEvery bounds the time between full refreshes; a state whose
// newest version is older than it is always refreshed fully.
const fullRefreshEvery = txn.LogRetention / 4

// maxSingleReads: a follower behind by more reads the rest with Refresh's
// parallel read-ahead.
const maxSingleReads = 4

// poll reads the versions after the state's and applies them; it returns
// how many it applied.
func (f *follower) poll(ctx context.Context) (int, error) {
	storeNow := f.now
	if f.storeNow != nil {
		storeNow = f.storeNow
	}
	if f.fullRefresh(f.now(), storeNow()) {
		return f.refresh(ctx, 0)
	}
	n := 0
	for n < maxSingleReads {
		v, err := f.log.ReadVersion(ctx, f.st.Version+1)
		if errors.Is(err, store.ErrNotFound) {
			if n == 0 {
				f.cad.miss(f.now())
			}
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if err := f.st.Apply(v); err != nil {
			return n, fmt.Errorf("%s: %w", txn.VersionKey(v.Version), err)
		}
		n++
		seen := f.now()
		if v.Void() {
			continue // a deleted stream's record: no commit to learn the cadence from
		}
		f.cad.observe(v.Time, seen, 1)
		if !f.cad.behind(seen) {
			return n, nil
		}
	}
	return f.refresh(ctx, n)
}

// fullRefresh reports whether the next poll is a full txn.Log.Refresh at
// now (storeNow by the store's clock, which commit times are stamped by):
// the cadence is unknown, the last full refresh was long ago, or the
// newest version is old (an idle stream: Refresh checks that gc did not
// cut the log under it).
func (f *follower) fullRefresh(now, storeNow time.Time) bool {
	return !f.cad.known() || now.Sub(f.lastRefresh) > fullRefreshEvery || storeNow.Sub(f.st.Time) > fullRefreshEvery
}

// refresh runs a full Refresh after n versions already applied by this
// poll.
func (f *follower) refresh(ctx context.Context, n int) (int, error) {
	f.lastRefresh = f.now()
	k, err := f.log.Refresh(ctx, f.st)
	switch {
	case k > 0:
		f.cad.observe(f.st.Time, f.now(), k)
	case err == nil && n == 0:
		f.cad.miss(f.now())
	}
	return n + k, err
}
