package fs

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/lakestream/lakestream/txn"
)

// Snapshot is one immutable view of the stream: the live steps as of a
// manifest version. Readers share it freely.
type Snapshot struct {
	Version   uint64
	Time      time.Time // commit time of the newest version
	FirstStep int64
	LiveFrom  int64
	Steps     []*txn.TGB // Steps[i] is step LiveFrom+i
}

// NewSnapshot copies what the view needs out of st (the TGBs themselves
// are immutable and shared).
func NewSnapshot(st *txn.State) *Snapshot {
	t := st.Time
	if t.IsZero() {
		// Nothing committed yet: the view dates from the stream's creation,
		// not from year 1.
		t = st.Config.CreatedAt
	}
	return &Snapshot{
		Version:   st.Version,
		Time:      t,
		FirstStep: st.Config.FirstStep,
		LiveFrom:  st.LiveFrom,
		Steps:     slices.Clone(st.Steps),
	}
}

// Next is the step the next commit gets.
func (s *Snapshot) Next() int64 { return s.LiveFrom + int64(len(s.Steps)) }

// Head is the highest committed step, false when none was committed.
func (s *Snapshot) Head() (int64, bool) {
	n := s.Next()
	return n - 1, n > s.FirstStep
}

// Step returns the TGB of step n if it is live.
func (s *Snapshot) Step(n int64) (*txn.TGB, bool) {
	if n < s.LiveFrom || n >= s.Next() {
		return nil, false
	}
	return s.Steps[n-s.LiveFrom], true
}

// View is the current snapshot, replaced whole by one publisher (the
// mount's tailer) and read by every FUSE request without locking.
type View struct {
	cur atomic.Pointer[published]
	mu  sync.Mutex // serialises Publish

	// deadlines holds, per step and calling process being waited for,
	// when its wait ends: one operation (ls: stat, then lstat to tell a
	// dangling symlink) makes several lookups of a future step, and each
	// waiting its own --wait would multiply it.
	waitMu    sync.Mutex
	deadlines map[waitKey]time.Time // GUARDED_BY(waitMu)

	// Demand, for a publisher that polls only when someone waits: wanted
	// (capacity 1) is signalled when a lookup asks for a step past the
	// head; waiting counts lookups blocked in WaitStep.
	wanted  chan struct{}
	waiting atomic.Int32
}

// waitKey is one caller's wait for one step: the caller is the process
// (thread) the kernel names in the request, 0 outside FUSE.
type waitKey struct {
	step int64
	pid  uint32
}

// deadline is the end of k's wait: that of a wait of the same caller still
// running or ended less than shareAfter ago (the next lookup of the same
// operation follows at once), or now+d. Another process, or a retry after
// shareAfter, waits d of its own.
func (v *View) deadline(k waitKey, d time.Duration) (time.Time, bool) {
	v.waitMu.Lock()
	defer v.waitMu.Unlock()
	now := time.Now()
	if dl, ok := v.deadlines[k]; ok && now.Before(dl.Add(shareAfter)) {
		return dl, true
	}
	if v.deadlines == nil {
		v.deadlines = map[waitKey]time.Time{}
	}
	for old, dl := range v.deadlines {
		if !now.Before(dl.Add(shareAfter)) {
			delete(v.deadlines, old)
		}
	}
	v.deadlines[k] = now.Add(d)
	return now.Add(d), false
}

// published pairs a snapshot with the channel closed when it is replaced,
// so a waiter never misses the change after the snapshot it checked.
type published struct {
	snap    *Snapshot
	changed chan struct{}
}

// NewView returns a view showing s.
func NewView(s *Snapshot) *View {
	v := &View{wanted: make(chan struct{}, 1)}
	v.cur.Store(&published{snap: s, changed: make(chan struct{})})
	return v
}

// Load returns the current snapshot.
func (v *View) Load() *Snapshot { return v.cur.Load().snap }

// Publish replaces the snapshot, wakes the waiters and returns the old one.
func (v *View) Publish(s *Snapshot) *Snapshot {
	v.mu.Lock()
	defer v.mu.Unlock()
	old := v.cur.Swap(&published{snap: s, changed: make(chan struct{})})
	close(old.changed)
	return old.snap
}

// shareAfter is how long after a wait for a step ended a lookup of it by
// the same caller still fails at once instead of waiting again: long enough
// for the next system call of one operation, short enough that a retry
// waits again (it was 1 s, shared by all processes, so a retry right after
// a timeout failed at once).
const shareAfter = 100 * time.Millisecond

// Wanted is signalled when a lookup asks for a step that is not committed
// yet: the publisher should look for new versions now.
func (v *View) Wanted() <-chan struct{} { return v.wanted }

// Waiting reports whether a lookup is blocked waiting for a step.
func (v *View) Waiting() bool { return v.waiting.Load() > 0 }

// Want signals Wanted: a reader wants the newest state (a step past the
// head, the head itself, a fresh listing).
func (v *View) Want() {
	select {
	case v.wanted <- struct{}{}:
	default:
	}
}

// errNotCommitted: a step that is not committed (or was reclaimed) was
// looked up. It maps to ENOENT.
var errNotCommitted = fmt.Errorf("step is not committed or was reclaimed: %w", errNoEntry)

// WaitStep returns step n's TGB, waiting up to d for it to be committed.
// A reclaimed step fails at once; so does any missing step when d is 0.
// Lookups of one step by one caller within d of the first share its
// deadline, so one operation waits d in all, not d per lookup.
func (v *View) WaitStep(ctx context.Context, n int64, d time.Duration) (*txn.TGB, error) {
	var deadline <-chan time.Time
	how := ""
	for {
		p := v.cur.Load()
		if t, ok := p.snap.Step(n); ok {
			return t, nil
		}
		if n < p.snap.LiveFrom {
			return nil, fmt.Errorf("step %d: %w", n, errNotCommitted)
		}
		v.Want()
		if d <= 0 {
			return nil, fmt.Errorf("step %d: %w", n, errNotCommitted)
		}
		if deadline == nil {
			k := waitKey{step: n}
			if c, ok := fuse.FromContext(ctx); ok {
				k.pid = c.Pid
			}
			dl, shared := v.deadline(k, d)
			if shared {
				how = " (one deadline for all lookups of it in that time)"
			}
			t := time.NewTimer(time.Until(dl))
			defer t.Stop()
			deadline = t.C
			v.waiting.Add(1)
			defer v.waiting.Add(-1)
		}
		select {
		case <-p.changed:
		case <-deadline:
			return nil, fmt.Errorf("step %d after waiting %s%s: %w", n, d, how, errNotCommitted)
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for step %d: %w", n, ctx.Err())
		}
	}
}
