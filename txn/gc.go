package txn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/lakestream/lakestream/store"
)

// DefaultGrace is how long gc waits before deleting reclaimed data and
// orphans: long enough for a mount to finish the reads it started on a
// step that was just reclaimed, and for a commit whose response was lost
// to be resolved.
const DefaultGrace = 10 * time.Minute

// GCOptions configure GC.
type GCOptions struct {
	Grace  time.Duration // default DefaultGrace; 0 is allowed only with Now set
	DryRun bool          // report, delete and commit nothing
	Logger *slog.Logger
	// Now is the store's clock, which every age is judged by (heartbeats,
	// the grace period, the log retention): nil means the log's
	// (Log.StoreTime). GC refuses to run while the log's clock is
	// unmeasured (Log.ClockErr). Tests move it.
	Now func() time.Time
	// ConsumerTimeout: a heartbeat older than this no longer holds
	// reclamation (0: ConsumerTimeout; tests shorten it).
	ConsumerTimeout time.Duration
	// Force reclaims what the checkpoints allow even at or above the step
	// of a live consumer (one whose heartbeat is fresh).
	Force bool
	// Progress, if set, is told how many keys a long phase has handled so
	// far ("log objects listed", "old log objects deleted").
	Progress func(phase string, n int64)
}

// ConsumerHold is a live consumer whose position holds reclamation back.
type ConsumerHold struct {
	Node string `json:"node"`
	Step int64  `json:"step"` // its highest step read: it and all after stay
}

// GCReport says what a GC did (or, with DryRun, would do).
type GCReport struct {
	ReclaimedBelow int64    `json:"reclaimed_below"` // new LiveFrom; 0 when nothing was reclaimed
	ReclaimedSteps int64    `json:"reclaimed_steps"`
	DataDeleted    []string `json:"data_deleted"` // reclaimed packs past the grace period
	// LogDeleted: versions and snapshots no reader needs, the first
	// maxReportedKeys of LogDeletedCount (an unswept log can hold a
	// million).
	LogDeleted      []string `json:"log_deleted"`
	LogDeletedCount int      `json:"log_deleted_count"`
	Orphans         []string `json:"orphans"` // unreferenced data past the grace period
	Bytes           int64    `json:"bytes"`   // of DataDeleted and Orphans
	// UploadsAborted are multipart uploads under data/ begun longer than
	// the grace period ago (a writer killed mid-upload left them; their
	// parts are billed but in no listing of objects). Stores without
	// multipart uploads have none.
	UploadsAborted []store.Upload `json:"uploads_aborted"`
	Version        uint64         `json:"version"` // state version after gc
	// HeldBy lists the live consumers at or below the step the checkpoints
	// allow reclaiming up to; without Force gc reclaims only below the
	// slowest of them (AllowedBelow is what the checkpoints allow).
	HeldBy       []ConsumerHold `json:"held_by"`
	AllowedBelow *int64         `json:"allowed_below"`
	Forced       bool           `json:"forced"`
	// Probes are create-if-absent probe keys (_probe/) a probe whose own
	// delete failed left, older than the grace period and ten minutes.
	Probes []string `json:"probes,omitempty"`
	// NotDeleted counts the keys a failed (or interrupted) gc was
	// deleting when it stopped; the next gc deletes them.
	NotDeleted int `json:"not_deleted,omitempty"`
	// ForeignStreams are roots of other streams found under data/ (a
	// stream created inside this one's prefix): nothing under them is
	// deleted.
	ForeignStreams []string `json:"foreign_streams,omitempty"`
	// Busy: another gc holds the lease (GCLeaseKey); this one did nothing
	// and reports nothing.
	Busy *GCBusy `json:"busy,omitempty"`
}

// ConsumerHolds returns the live consumers (Heartbeat.LiveAt now, the
// store's time, with timeout; 0: ConsumerTimeout) positioned below target,
// slowest first, and the target capped at the slowest one's step. A
// consumer that has read nothing yet holds nothing: it starts at a
// retained checkpoint.
func ConsumerHolds(consumers []Heartbeat, target int64, now time.Time, timeout time.Duration) ([]ConsumerHold, int64) {
	var holds []ConsumerHold
	capped := target
	for _, h := range consumers {
		if h.Step == nil || !h.LiveAt(now, timeout) || *h.Step >= target {
			continue
		}
		holds = append(holds, ConsumerHold{Node: h.NodeID, Step: *h.Step})
		capped = min(capped, *h.Step)
	}
	slices.SortFunc(holds, func(a, b ConsumerHold) int { return cmp.Compare(a.Step, b.Step) })
	return holds, capped
}

// ReclaimTarget is the LiveFrom that the checkpoints allow: the step after
// the oldest of the newest RetainCheckpoints checkpoints. A job restarting
// from any retained checkpoint C reads C+1.., all of which stay. ok is false
// when fewer checkpoints than that are recorded.
func ReclaimTarget(st *State) (int64, bool) {
	k := st.Config.RetainCheckpoints
	if k < 1 || len(st.Checkpoints) < k {
		return 0, false
	}
	return st.Checkpoints[len(st.Checkpoints)-k] + 1, true
}

// GC runs the lifecycle in order, each phase idempotent and safe to run
// from several processes at once (though one at a time holds the lease,
// GCLeaseKey, and the others return a report that says only Busy):
//
//  1. reclaim: commit a reclamation record below ReclaimTarget (capped
//     at the slowest live consumer unless Force): those steps leave every
//     view at once; their packs become pending deletes.
//  2. purgeReclaimed: delete pending packs reclaimed longer than Grace
//     ago, then commit a purge record naming them.
//  3. sweepLog: delete log versions and snapshots no reader needs.
//  4. sweepOrphans: delete data objects no version references, older than
//     Grace, that no commit can still reference (see orphanable).
//  5. sweepProbes: delete create-if-absent probe keys (_probe/) a failed
//     delete left, older than Grace and than ten minutes.
//  6. abortStaleUploads: abort multipart uploads under data/ begun longer
//     than Grace ago (stores that have them).
//
// With DryRun each phase reports what it would do and changes nothing;
// the phases after reclaim go on from the state the reclamation would
// make, so the report lists what the same real run deletes.
func GC(ctx context.Context, l *Log, o GCOptions) (*GCReport, error) {
	if o.Grace == 0 && o.Now == nil {
		o.Grace = DefaultGrace
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	// Every phase judges an age: a consumer's heartbeat, a grace period,
	// the log retention. By an unmeasured clock an hour ahead a live
	// reader looks dead and fresh objects look old.
	if err := l.ClockErr(); err != nil {
		o.Logger.Warn("gc: not run; the store's clock is not measured", "err", err)
		return nil, fmt.Errorf("gc reclaims nothing while %w; it judges heartbeats and grace periods by that clock: "+
			"check that these credentials can write and delete under %s and that the store answers a small write within 5 s", err, store.ProbePrefix)
	}
	if o.Now == nil {
		o.Now = l.StoreTime
	}
	if !o.DryRun {
		release, busy, err := takeGCLease(ctx, l, o.Now)
		if err != nil {
			return nil, err
		}
		if busy != nil {
			return &GCReport{Busy: busy}, nil
		}
		defer release()
	}
	g := &gcRun{l: l, GCOptions: o, rep: &GCReport{}}
	st, err := l.Load(ctx)
	if err != nil {
		return nil, err
	}
	if st, err = g.reclaim(ctx, st); err != nil {
		return nil, err
	}
	// From here on a failure (or a signal) leaves a committed reclamation
	// and deletes not done: the report so far comes back with the error,
	// so the caller can say what a rerun will do.
	g.rep.Version = st.Version
	for _, phase := range []func(context.Context, *State) error{g.purgeReclaimed, g.sweepLog, g.sweepOrphans, g.sweepProbes, g.abortStaleUploads} {
		// A gc whose stream was deleted and created again at its URL (a
		// producer's periodic gc) would take the new stream's objects for
		// its own pending deletes and orphans: each phase that deletes
		// first checks that the stream is still the one it read.
		if err := l.CheckIdentity(ctx); err != nil {
			return g.rep, err
		}
		if err := phase(ctx, st); err != nil {
			return g.rep, err
		}
	}
	g.rep.Version = st.Version
	return g.rep, nil
}

// progress reports n keys handled so far in phase, if asked to.
func (g *gcRun) progress(phase string, n int) {
	if g.Progress != nil {
		g.Progress(phase, int64(n))
	}
}

// deleteKeys deletes keys for phase, counting them as not deleted when the
// delete fails (a rerun deletes them). Each batch first checks that the
// stream is still the one gc read: keys of a stream created since at its
// URL may have the same names (identity.go).
func (g *gcRun) deleteKeys(ctx context.Context, keys []string) error {
	if err := g.l.CheckIdentity(ctx); err != nil {
		g.rep.NotDeleted += len(keys)
		return err
	}
	if err := g.l.Store.Delete(ctx, keys...); err != nil {
		g.rep.NotDeleted += len(keys)
		return err
	}
	return nil
}

// gcRun is one GC: its options (Now set) and the report its phases fill.
type gcRun struct {
	GCOptions
	l   *Log
	rep *GCReport
}

// reclaim commits the reclamation the checkpoints allow, never at or
// above a live consumer's step unless forced. It returns the state to go
// on from: the committed one, or with DryRun the one it would commit.
func (g *gcRun) reclaim(ctx context.Context, st *State) (*State, error) {
	target, ok := ReclaimTarget(st)
	target = min(target, st.NextStep())
	if !ok || target <= st.LiveFrom {
		return st, nil
	}
	cons, err := Consumers(ctx, g.l.Store)
	if err != nil {
		return nil, err
	}
	if holds, capped := ConsumerHolds(cons, target, g.Now(), g.ConsumerTimeout); len(holds) > 0 {
		allowed := target
		g.rep.HeldBy, g.rep.AllowedBelow, g.rep.Forced = holds, &allowed, g.Force
		if !g.Force {
			target = capped
		}
	}
	if target <= st.LiveFrom {
		return st, nil
	}
	g.rep.ReclaimedSteps = target - st.LiveFrom
	g.rep.ReclaimedBelow = target
	if g.DryRun {
		sim := st.Clone()
		if err := sim.Apply(&Version{Version: st.Version + 1, Time: g.Now(), Reclaim: &Reclaim{Below: target}}); err != nil {
			return nil, err
		}
		return sim, nil
	}
	_, err = g.l.Commit(ctx, st, func(st *State) (*Version, error) {
		if st.LiveFrom >= target {
			return nil, nil // another gc did it
		}
		return &Version{Reclaim: &Reclaim{Below: target}}, nil
	}, g.Logger)
	if err != nil {
		return nil, fmt.Errorf("committing reclamation below step %d: %w", target, err)
	}
	g.Logger.Info("reclaimed steps", "below", target, "steps", g.rep.ReclaimedSteps)
	return st, nil
}

// purgeReclaimed deletes the packs reclaimed longer than Grace ago, then
// commits a purge record naming those still pending.
func (g *gcRun) purgeReclaimed(ctx context.Context, st *State) error {
	var due []string
	for _, pd := range st.Pending {
		ok, err := g.reclaimedLongAgo(ctx, pd)
		if err != nil {
			return err
		}
		if ok {
			due = append(due, pd.Keys...)
		}
	}
	if len(due) == 0 {
		return nil
	}
	g.rep.DataDeleted = due
	g.rep.Bytes += sizes(ctx, g.l.Store, due)
	if g.DryRun {
		return nil
	}
	if err := g.deleteKeys(ctx, due); err != nil {
		return fmt.Errorf("deleting reclaimed data: %w", err)
	}
	purged := make(map[string]bool, len(due))
	for _, k := range due {
		purged[k] = true
	}
	_, err := g.l.Commit(ctx, st, func(st *State) (*Version, error) {
		var still []string
		for _, pd := range st.Pending {
			for _, k := range pd.Keys {
				if purged[k] {
					still = append(still, k)
				}
			}
		}
		if len(still) == 0 {
			return nil, nil
		}
		return &Version{Purged: still}, nil
	}, g.Logger)
	if err != nil {
		return fmt.Errorf("committing purge record: %w", err)
	}
	return nil
}

// reclaimedLongAgo reports whether pd was reclaimed at least Grace ago by
// both times that say when: the one its record carries (its writer's
// store clock, Log.Now) and the record's Last-Modified (the store's own).
// The later counts: a writer whose clock was wrong, or never measured,
// cannot make reclaimed data go early; one that read ahead delays it by
// its error. A record already gone from the log (older than LogRetention)
// is judged by its time alone.
func (g *gcRun) reclaimedLongAgo(ctx context.Context, pd PendingDelete) (bool, error) {
	now := g.Now()
	if g.Grace <= 0 {
		return true, nil
	}
	if now.Sub(pd.Time) < g.Grace {
		return false, nil
	}
	info, err := g.l.Store.Stat(ctx, VersionKey(pd.Version))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("reading when reclamation record %s was written: %w", VersionKey(pd.Version), err)
	}
	return now.Sub(info.ModTime) >= g.Grace, nil
}

// sweepLog deletes the log objects no reader needs (see gcLog), a batch
// at a time as the listing goes.
func (g *gcRun) sweepLog(ctx context.Context, _ *State) error {
	return g.l.gcLog(ctx, g.Now(), func(keys []string) error {
		if room := maxReportedKeys - len(g.rep.LogDeleted); room > 0 {
			g.rep.LogDeleted = append(g.rep.LogDeleted, keys[:min(room, len(keys))]...)
		}
		if !g.DryRun {
			if err := g.deleteKeys(ctx, keys); err != nil {
				return fmt.Errorf("deleting old log objects: %w", err)
			}
		}
		g.rep.LogDeletedCount += len(keys)
		g.progress("old log objects deleted", g.rep.LogDeletedCount)
		return nil
	}, func(n int) { g.progress("log objects listed", n) })
}

// maxReportedKeys bounds the log keys a GCReport names.
const maxReportedKeys = 1000

// sweepOrphans deletes unreferenced data past the grace period, judged
// against the newest state (a commit may have landed meanwhile).
func (g *gcRun) sweepOrphans(ctx context.Context, st *State) error {
	if !g.DryRun {
		if _, err := g.l.Refresh(ctx, st); err != nil {
			return err
		}
	}
	orphans, bytes, foreign, err := g.l.orphans(ctx, st, g.Now().Add(-g.Grace))
	if err != nil {
		return err
	}
	g.rep.Orphans, g.rep.Bytes, g.rep.ForeignStreams = orphans, g.rep.Bytes+bytes, foreign
	if g.DryRun {
		return nil
	}
	if err := g.deleteKeys(ctx, orphans); err != nil {
		return fmt.Errorf("deleting orphans: %w", err)
	}
	return nil
}

// probeMinAge is the least age of a _probe/ key gc deletes, whatever the
// grace period: a probe lives for four requests, and one deleted between
// its two creates would look like a store without create-if-absent.
const probeMinAge = 10 * time.Minute

// sweepProbes deletes what store.Probe left under _probe/ when its own
// delete failed (a store that flaps while run probes it at every connect
// attempt): keys older than the grace period and than probeMinAge.
func (g *gcRun) sweepProbes(ctx context.Context, _ *State) error {
	cutoff := g.Now().Add(-max(g.Grace, probeMinAge))
	var old []string
	var foreign []string
	err := store.Walk(ctx, g.l.Store, store.ProbePrefix, "", func(o store.Info) error {
		if root, ok := streamRoot(o.Key); ok {
			foreign = append(foreign, root)
		}
		if o.ModTime.Before(cutoff) {
			old = append(old, o.Key)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing %s: %w", store.ProbePrefix, err)
	}
	for _, k := range old {
		if !under(k, foreign) {
			g.rep.Probes = append(g.rep.Probes, k)
		}
	}
	g.rep.ForeignStreams = append(g.rep.ForeignStreams, foreign...)
	if g.DryRun || len(g.rep.Probes) == 0 {
		return nil
	}
	if err := g.deleteKeys(ctx, g.rep.Probes); err != nil {
		return fmt.Errorf("deleting probe leftovers: %w", err)
	}
	return nil
}

// abortStaleUploads aborts multipart uploads under data/ begun longer
// than Grace ago: a writer killed mid-upload leaves its parts, billed and
// in no object listing. A live upload that old is aborted too; its writer
// sees the failure and uploads again.
func (g *gcRun) abortStaleUploads(ctx context.Context, _ *State) error {
	ul, ok := g.l.Store.(store.UploadLister)
	if !ok {
		return nil
	}
	ups, err := ul.ListUploads(ctx, DataPrefix)
	if err != nil {
		return fmt.Errorf("listing multipart uploads under %s: %w", DataPrefix, err)
	}
	cutoff := g.Now().Add(-g.Grace)
	for _, u := range ups {
		if !u.Initiated.Before(cutoff) {
			continue
		}
		g.rep.UploadsAborted = append(g.rep.UploadsAborted, u)
		if g.DryRun {
			continue
		}
		if err := ul.AbortUpload(ctx, u.Key, u.ID); err != nil {
			return fmt.Errorf("aborting multipart upload of %s: %w", u.Key, err)
		}
	}
	return nil
}

func sizes(ctx context.Context, s store.Store, keys []string) int64 {
	var n int64
	for _, k := range keys {
		if info, err := s.Stat(ctx, k); err == nil {
			n += info.Size
		}
	}
	return n
}

// gcLog picks the log objects no reader needs and hands them to del, in
// batches. A reader starts from a snapshot (the hinted one, else the
// newest listed) and reads every version after it, so:
//   - the newest snapshot stays, and so does every snapshot younger than
//     LogRetention (a reader may have just read a hint naming it);
//   - a version stays if it follows the oldest surviving snapshot, or is
//     younger than LogRetention (see Refresh: a reader that saw the head
//     recently trusts "v+1 absent").
//
// The hint is left alone: one naming a deleted snapshot makes readers list
// the log after it.
//
// It decides in one ascending listing, holding at most a snapshot
// interval of versions: the oldest surviving snapshot is the first young
// one listed (else the newest), so an old version is kept or dropped when
// the next snapshot is listed, and an old snapshot once a later one is. A
// log of a million versions nobody swept is swept in a few MiB.
func (l *Log) gcLog(ctx context.Context, now time.Time, del func([]string) error, listed func(int)) error {
	old := func(mod time.Time) bool { return now.Sub(mod) > LogRetention }
	var (
		pending []uint64 // old versions since the last snapshot
		batch   []string
		prev    string // the last snapshot listed, if old: dropped once another follows
		kept    bool   // a young snapshot was listed: every later version stays
	)
	add := func(key string) error {
		if batch = append(batch, key); len(batch) < maxDeleteBatch {
			return nil
		}
		err := del(batch)
		batch = batch[:0]
		return err
	}
	n := 0
	err := store.Walk(ctx, l.Store, LogPrefix, "", func(o store.Info) error {
		if n++; n%1000 == 0 {
			listed(n)
		}
		if v, ok := ParseVersionKey(o.Key); ok {
			if !kept && old(o.ModTime) {
				pending = append(pending, v)
			}
			return nil
		}
		if _, ok := ParseSnapshotKey(o.Key); !ok {
			return nil
		}
		for _, v := range pending {
			if err := add(VersionKey(v)); err != nil {
				return err
			}
		}
		pending = pending[:0]
		if prev != "" {
			if err := add(prev); err != nil {
				return err
			}
		}
		prev = ""
		if old(o.ModTime) {
			prev = o.Key
		} else {
			kept = true
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("listing %s: %w", LogPrefix, err)
	}
	if len(batch) > 0 {
		return del(batch)
	}
	return nil
}

// maxDeleteBatch is how many log keys gc deletes at once (an S3
// DeleteObjects takes 1,000).
const maxDeleteBatch = 1000

// orphans lists data objects that no version references and that no commit
// can reference any more, last modified before cutoff, outside the roots
// of other streams found under data/ (foreign, also returned). A pack
// data/<p>/<epoch>/<seq>/... may still be committed if producer p's current
// incarnation is <epoch> and <seq> is beyond its committed seq: its
// committer may be retrying (a lost response, a store outage). Such objects
// wait until that incarnation is superseded; every other unreferenced pack
// is garbage once it is older than the grace period.
func (l *Log) orphans(ctx context.Context, st *State, cutoff time.Time) (out []string, bytes int64, foreign []string, err error) {
	live := map[string]bool{}
	for _, t := range st.Steps {
		live[t.Object.Key] = true
	}
	for _, pd := range st.Pending {
		for _, k := range pd.Keys {
			live[k] = true
		}
	}
	var candidates []store.Info
	err = store.Walk(ctx, l.Store, DataPrefix, "", func(o store.Info) error {
		if root, ok := streamRoot(o.Key); ok {
			foreign = append(foreign, root)
		}
		if live[o.Key] || !o.ModTime.Before(cutoff) || !orphanable(st, o.Key) {
			return nil
		}
		candidates = append(candidates, o)
		return nil
	})
	if err != nil {
		return nil, 0, nil, fmt.Errorf("listing %s: %w", DataPrefix, err)
	}
	// Another stream's objects are never ours to delete, whatever their
	// names: its _stream.json sorts after its _log/, so this is judged
	// once the listing is whole.
	for _, o := range candidates {
		if !under(o.Key, foreign) {
			out = append(out, o.Key)
			bytes += o.Size
		}
	}
	return out, bytes, foreign, nil
}

func orphanable(st *State, key string) bool {
	producer, epoch, seq, ok := ParseDataKey(key)
	if !ok {
		return true // not a pack this system writes
	}
	p := st.Producers[producer]
	if p == nil {
		return true
	}
	return epoch < p.Epoch || seq <= p.Seq
}
