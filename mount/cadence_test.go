package mount

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestCadenceSchedule: once two intervals are seen, the next poll is at
// the next version's due time (last commit + interval + offset) plus the
// margin; misses back off from the margin, doubling, up to 4 x the poll
// interval; a new version starts over. Before that it polls every
// PollInterval.
func TestCadenceSchedule(t *testing.T) {
	const fast = 250 * time.Millisecond
	var c cadence
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	lag := 30 * time.Millisecond // first seen this long after each commit
	if got := c.next(t0, fast); !got.Equal(t0.Add(fast)) {
		t.Fatalf("unknown cadence: next poll %v after the last, want %v", got.Sub(t0), fast)
	}
	var commit time.Time
	for i := range 5 {
		// One second apart, give or take 4 ms.
		commit = t0.Add(time.Duration(i)*time.Second + time.Duration(i%2)*4*time.Millisecond)
		c.observe(commit, commit.Add(lag), 1)
	}
	if !c.known() {
		t.Fatal("cadence unknown after 4 intervals")
	}
	if d := c.interval - time.Second; d < -5*time.Millisecond || d > 5*time.Millisecond {
		t.Fatalf("interval %v, want about 1s", c.interval)
	}
	if c.offset > lag || c.offset < lag-10*time.Millisecond {
		t.Fatalf("offset %v after versions seen %v after their commits: want at most that, a little less", c.offset, lag)
	}
	seen := commit.Add(lag)
	next := c.next(seen, fast)
	due := commit.Add(c.interval + c.offset)
	if next.Before(due) || next.After(due.Add(fast/4)) {
		t.Fatalf("after a version: next poll %v after its commit, want within a quarter poll interval after %v", next.Sub(commit), due.Sub(commit))
	}
	if m := c.margin(); m < minMargin || m > 20*time.Millisecond {
		t.Fatalf("margin %v with 4 ms of jitter, want between %v and 20ms", m, minMargin)
	}
	// Misses: the delays double from the margin, capped at 4 x fast.
	last, prev := next, time.Duration(0)
	for k := 1; k <= 12; k++ {
		c.misses++
		at := c.next(last, fast)
		d := at.Sub(last)
		switch {
		case d > backoffFactor*fast:
			t.Fatalf("miss %d: next poll in %v, more than %v", k, d, backoffFactor*fast)
		case k == 1 && d != c.margin():
			t.Fatalf("first miss: next poll in %v, want the margin %v", d, c.margin())
		case k > 1 && d != min(2*prev, backoffFactor*fast):
			t.Fatalf("miss %d: next poll in %v after %v, want double, at most %v", k, d, prev, backoffFactor*fast)
		}
		last, prev = at, d
	}
	if prev != backoffFactor*fast {
		t.Fatalf("after 12 misses polls are %v apart, want %v", prev, backoffFactor*fast)
	}
	// The version comes late: the cadence goes on from its commit time.
	late := commit.Add(1500 * time.Millisecond)
	c.observe(late, late.Add(lag), 1)
	if c.misses != 0 {
		t.Fatal("misses not reset by a new version")
	}
	if at := c.next(late.Add(lag), fast); at.Before(late.Add(c.interval)) {
		t.Fatalf("after a late version: next poll %v after it, want at least the interval %v", at.Sub(late), c.interval)
	}
}

// TestCadenceOffset: the phase is an offset from the producers' commit
// times: the first sighting sets it (a producer clock 200 ms ahead gives
// a negative one); a version found by the poll right after a miss pins it
// to the midpoint of the two; a version found at its first poll moves it
// a sixteenth of the margin earlier, never later, so polls that always land
// on time creep earlier until one misses instead of drifting later (taking
// the least sighting ratcheted: every sighting is the offset plus the
// margin, so the offset never came down); a late sighting or a miss long
// ago (an idle mount) does not move it later.
func TestCadenceOffset(t *testing.T) {
	var c cadence
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	commit := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	c.observe(commit(0), commit(0).Add(-200*time.Millisecond), 1)
	if c.offset != -200*time.Millisecond {
		t.Fatalf("first sighting: offset %v, want -200ms", c.offset)
	}
	for i := 1; i < 5; i++ {
		c.observe(commit(i), commit(i).Add(-200*time.Millisecond), 1)
	}
	if c.offset > -200*time.Millisecond {
		t.Fatalf("offset %v after sightings 200 ms before the commit times, want at most -200ms", c.offset)
	}
	// A miss 20 ms after commit 5, found 10 ms later: 25 ms.
	c.miss(commit(5).Add(20 * time.Millisecond))
	c.observe(commit(5), commit(5).Add(30*time.Millisecond), 1)
	if c.offset != 25*time.Millisecond {
		t.Fatalf("found 10 ms after a miss: offset %v, want the midpoint 25ms", c.offset)
	}
	// Always found at the first poll (due + margin): the offset creeps
	// earlier, a sixteenth of the margin each time.
	before := c.offset
	for i := 6; i < 22+8; i++ {
		at := commit(i).Add(c.offset + c.margin())
		c.observe(commit(i), at, 1)
	}
	if c.offset >= before-c.margin() {
		t.Fatalf("24 versions found at the first poll: offset %v from %v, want at least a margin (%v) earlier", c.offset, before, c.margin())
	}
	// Found 700 ms late, or after a miss 5 s ago: no later.
	before = c.offset
	c.observe(commit(30), commit(30).Add(700*time.Millisecond), 1)
	c.miss(commit(31).Add(-5 * time.Second))
	c.observe(commit(31), commit(31).Add(time.Second), 1)
	if c.offset > before {
		t.Fatalf("a late sighting moved the offset from %v to %v", before, c.offset)
	}
}

// followLog runs a follower as the tailer does under demand (polling at
// cadence.next) until ctx ends, calling saw with each new version.
func followLog(ctx context.Context, f *follower, fast time.Duration, saw func(v uint64, at time.Time)) error {
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Until(f.cad.next(last, fast))):
		}
		last = time.Now()
		before := f.st.Version
		if _, err := f.poll(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		for v := before + 1; v <= f.st.Version; v++ {
			saw(v, time.Now())
		}
	}
}

// cadenceStream is a stream on mem:// that a committer appends a version
// to every interval; the follower reads it through a store.Faulty that
// counts its requests.
type cadenceStream struct {
	l, fl *txn.Log
	f     *store.Faulty
	mu    sync.Mutex
	at    map[uint64]time.Time // commit returned
}

func newCadenceStream(t *testing.T) *cadenceStream {
	mem := store.NewMem()
	l, err := txn.Create(t.Context(), mem, txn.CreateOptions{Ranks: 1})
	if err != nil {
		t.Fatal(err)
	}
	f := store.NewFaulty(mem, 1)
	return &cadenceStream{l: l, fl: &txn.Log{Store: f, Config: l.Config}, f: f, at: map[uint64]time.Time{}}
}

// commit appends n versions (config changes), one per interval.
func (cs *cadenceStream) commit(ctx context.Context, n int, interval time.Duration) error {
	st, err := cs.l.Load(ctx)
	if err != nil {
		return err
	}
	tk := time.NewTicker(interval)
	defer tk.Stop()
	for i := range n {
		<-tk.C
		v, err := cs.l.Commit(ctx, st, func(*txn.State) (*txn.Version, error) {
			return &txn.Version{Config: &txn.ConfigChange{RetainCheckpoints: 1 + i%2}}, nil
		}, nil)
		if err != nil {
			return err
		}
		cs.mu.Lock()
		cs.at[v.Version] = time.Now()
		cs.mu.Unlock()
	}
	return nil
}

// TestFollowerOneGetPerVersion: a follower on a steady cadence reads about
// one version object per version (polling every PollInterval read four
// per version here), and sees each within 4 x PollInterval of its commit
// (the bound on a waiting reader's delay: 1 s at the default).
func TestFollowerOneGetPerVersion(t *testing.T) {
	const (
		fast     = 40 * time.Millisecond
		interval = 160 * time.Millisecond
		versions = 24
		learn    = 6 // versions before counting
	)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cs := newCadenceStream(t)
	st, err := cs.fl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{log: cs.fl, st: st, now: time.Now}
	var mu sync.Mutex
	var gets0 int64
	var worst time.Duration
	done := make(chan error, 1)
	go func() {
		done <- followLog(ctx, f, fast, func(v uint64, at time.Time) {
			mu.Lock()
			defer mu.Unlock()
			if v == learn {
				gets0 = cs.f.Calls(store.OpGet)
			}
			cs.mu.Lock()
			c, ok := cs.at[v]
			cs.mu.Unlock()
			if ok && v > learn {
				worst = max(worst, at.Sub(c))
			}
		})
	}()
	if err := cs.commit(ctx, versions, interval); err != nil {
		t.Fatal(err)
	}
	time.Sleep(interval) // the last version's poll
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if f.st.Version != versions {
		t.Fatalf("follower at version %d, want %d", f.st.Version, versions)
	}
	// The GETs after version `learn`, for the versions after it (and the
	// misses while the last interval passed).
	perVersion := float64(cs.f.Calls(store.OpGet)-gets0) / float64(versions-learn)
	t.Logf("%.2f GETs per version, slowest sighting %v after its commit", perVersion, worst)
	if perVersion > 1.5 {
		t.Errorf("%.2f GETs of the log per version on a %v cadence; want at most 1.5 (polling every %v reads %v)", perVersion, interval, fast, interval/fast)
	}
	if worst > backoffFactor*fast+interval/2 {
		t.Errorf("a version was first seen %v after its commit; want within %v", worst, backoffFactor*fast+interval/2)
	}
}

// TestFollowerBacksOff: when the commits stop, the follower's polls slow
// down to one per 4 x PollInterval (instead of one per PollInterval), and
// the version that finally comes is still seen within that bound.
func TestFollowerBacksOff(t *testing.T) {
	const (
		fast     = 20 * time.Millisecond
		interval = 60 * time.Millisecond
		pause    = 1200 * time.Millisecond
	)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	cs := newCadenceStream(t)
	st, err := cs.fl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := &follower{log: cs.fl, st: st, now: time.Now}
	seen := make(chan time.Time, 100)
	done := make(chan error, 1)
	go func() { done <- followLog(ctx, f, fast, func(_ uint64, at time.Time) { seen <- at }) }()
	if err := cs.commit(ctx, 8, interval); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		<-seen
	}
	gets0 := cs.f.Calls(store.OpGet)
	time.Sleep(pause)
	polls := cs.f.Calls(store.OpGet) - gets0
	// Doubling from the margin reaches 4 x fast within a few polls; then
	// one per 4 x fast.
	most := int64(pause/(backoffFactor*fast)) + 6
	if polls > most || polls == 0 {
		t.Errorf("%d polls in a %v pause; want 1..%d (polling every %v: %d)", polls, pause, most, fast, pause/fast)
	}
	if err := cs.commit(ctx, 1, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	cs.mu.Lock()
	committed := cs.at[9] // the versions before it: the 8 before the pause
	cs.mu.Unlock()
	select {
	case at := <-seen:
		if d := at.Sub(committed); d > backoffFactor*fast+interval {
			t.Errorf("the version after the pause seen %v after its commit; want within %v", d, backoffFactor*fast+interval)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the version after the pause was not seen in 10s")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestFollowerFullRefresh: the follower reads one version at a time only
// while the cadence is known, a full refresh ran within the last
// fullRefreshEvery and the newest version is younger than that; else it
// runs txn.Log.Refresh (whose own checks guard an old state against a log
// cut by gc).
func TestFollowerFullRefresh(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	f := &follower{st: &txn.State{}}
	for i := range 4 {
		commit := now.Add(time.Duration(i-4) * time.Second)
		f.cad.observe(commit, commit, 1)
	}
	f.st.Time, f.lastRefresh = now.Add(-time.Second), now.Add(-time.Minute)
	if f.fullRefresh(now, now) {
		t.Fatal("known cadence, recent refresh and version: a full refresh")
	}
	for name, edit := range map[string]func(*follower){
		"cadence unknown":  func(f *follower) { f.cad = cadence{} },
		"refresh long ago": func(f *follower) { f.lastRefresh = now.Add(-fullRefreshEvery - time.Second) },
		"old version":      func(f *follower) { f.st.Time = now.Add(-fullRefreshEvery - time.Second) },
	} {
		g := *f
		st := *f.st
		g.st = &st
		edit(&g)
		if !g.fullRefresh(now, now) {
			t.Errorf("%s: no full refresh", name)
		}
	}
}

// TestCadenceLongIntervalNoOverflow (issue 43 item 10): a stream committing
// every ~12 h with ~2 h of jitter has a margin of hours; after 25 misses
// the next poll must still be within [last, last+4 x fast], never in the
// past (margin<<24 wrapped negative and polled back to back).
func TestCadenceLongIntervalNoOverflow(t *testing.T) {
	const fast = 250 * time.Millisecond
	c := cadence{interval: 12 * time.Hour, jitter: 2 * time.Hour, samples: 5, sighted: true}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.last = t0
	last := t0.Add(13 * time.Hour)
	for range 25 {
		c.miss(last)
	}
	for misses := 25; misses <= 70; misses += 5 {
		next := c.next(last, fast)
		if next.Before(last) || next.After(last.Add(backoffFactor*fast)) {
			t.Fatalf("after %d misses: next poll %v after the last one; want within [0, %v]", c.misses, next.Sub(last), backoffFactor*fast)
		}
		for range 5 {
			c.miss(last)
		}
	}
}

// TestFailDelayNeverNegative: the failure backoff caps, never wraps, however
// many polls failed.
func TestFailDelayNeverNegative(t *testing.T) {
	for _, fails := range []int{1, 2, 20, 64, 65, 1000} {
		for _, fast := range []time.Duration{time.Millisecond, 250 * time.Millisecond, time.Hour} {
			d := failDelay(fails, fast)
			if d < 0 || d > backoffFactor*fast {
				t.Fatalf("failDelay(%d, %v) = %v; want within [0, %v]", fails, fast, d, backoffFactor*fast)
			}
		}
	}
}
