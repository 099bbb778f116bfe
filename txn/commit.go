package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lakestream/lakestream/store"
)

// outcome of one commit attempt.
type outcome int

const (
	committed outcome = iota // v is now st's newest version
	lostRace                 // another writer took v's number; st refreshed
)

// tryCommit makes one attempt to append v (built from st, so v.Version ==
// st.Version+1) to the log:
//
//	check identity ─► create _log/<v> ──ok───────────► committed (apply v)
//	   │ ErrExists ──► read it: ours ─────────────────► committed
//	   │                        theirs (or void) ──► refresh st ─► lostRace
//	   │ other error (outcome unknown: 409, 5xx, lost response, timeout)
//	   └──► read _log/<v> until the read succeeds:
//	          absent ──► create again (same bytes)
//	          ours   ──────────────────────────────────► committed
//	          theirs ──► refresh st ───────────────────► lostRace
//
// "ours" is decided by the version's Txn, which is random per commit. The
// state is refreshed in place; on error it holds what was read so far.
//
// checked, if not nil, waits for the identity check the caller made
// before v was built (the combining committer overlaps it with its
// probes, or knows a recent one); nil checks now. Either way nothing is
// created in a stream that is no longer this process's, but in the moment
// between the check and the create. A create that raced a deletion landed
// in nobody's stream or in the new one (void there): committed is said
// before anyone acts on it only after the identity is confirmed again
// (Log.Commit; the committer before its TGBs complete, committer.saw).
func (l *Log) tryCommit(ctx context.Context, st *State, v *Version, log *slog.Logger, checked func() error) (outcome, error) {
	if v.Version != st.Version+1 {
		return 0, fmt.Errorf("internal: commit of version %d on state %d", v.Version, st.Version)
	}
	if err := l.Config.checkWritable(); err != nil {
		return 0, err
	}
	// gc deletes versions older than LogRetention once a snapshot covers
	// them: creating v+1 on a state that old could re-create a deleted
	// version number. Refresh first (it reloads from the newest snapshot).
	if st.seenHead.IsZero() || l.now().Sub(st.seenHead) > LogRetention/2 {
		n, err := l.refreshRetry(ctx, st, log)
		if err != nil || n > 0 {
			return lostRace, err
		}
	}
	if checked == nil {
		checked = func() error { return l.confirmIdentity(ctx, log) }
	}
	if err := checked(); err != nil {
		return 0, err
	}
	v.Stream = l.Config.StreamID
	body := encode(v)
	key := VersionKey(v.Version)
	bo := newRetryWait(ctx)
	defer bo.done()
	for {
		started := l.now()
		err := store.CreateBytes(ctx, l.Store, key, body)
		if err == nil {
			return l.created(st, v, started)
		}
		if errors.Is(err, store.ErrExists) {
			// Lost, or won by an earlier attempt of this very create whose
			// answer was lost (the SDK's own retry of a PUT that landed
			// answers 412): the version says which.
			got, rerr := l.ReadVersion(ctx, v.Version)
			if rerr == nil && got.Txn == v.Txn {
				return l.created(st, got, started)
			}
			_, rerr = l.refreshRetry(ctx, st, log)
			return lostRace, rerr
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("commit %s: %w", key, ctx.Err())
		}
		if errors.Is(err, store.ErrInvalid) {
			return 0, fmt.Errorf("commit %s: %w", key, err)
		}
		log.Warn("commit outcome unknown; reading the version to resolve it", "key", key, "err", err)
		// Resolve by reading what is there.
		for {
			got, rerr := l.ReadVersion(ctx, v.Version)
			switch {
			case rerr == nil && got.Txn == v.Txn:
				return l.created(st, got, started)
			case rerr == nil:
				_, rerr = l.refreshRetry(ctx, st, log)
				return lostRace, rerr
			case errors.Is(rerr, store.ErrNotFound):
				// Not written: create again.
			case Permanent(rerr):
				return 0, rerr
			default:
				if err := bo.wait(ctx, rerr); err != nil {
					return 0, fmt.Errorf("resolving commit %s: %w (last: %v)", key, err, rerr)
				}
				continue
			}
			break
		}
		if werr := bo.wait(ctx, err); werr != nil {
			return 0, fmt.Errorf("commit %s: %w", key, werr)
		}
	}
}

// created applies v (as stored), created at started.
func (l *Log) created(st *State, v *Version, started time.Time) (outcome, error) {
	st.seenHead = started
	return committed, st.Apply(v)
}

// refreshRetry refreshes st, retrying transient store errors with backoff
// until ctx ends. Permanent errors (a corrupt record, the stream gone or
// replaced) are returned at once.
func (l *Log) refreshRetry(ctx context.Context, st *State, log *slog.Logger) (int, error) {
	bo := newRetryWait(ctx)
	defer bo.done()
	total := 0
	for {
		n, err := l.Refresh(ctx, st)
		total += n
		if err == nil || Permanent(err) {
			return total, err
		}
		if ctx.Err() != nil {
			return total, fmt.Errorf("reading the log: %w", ctx.Err())
		}
		log.Warn("reading the log failed; retrying", "err", err)
		if werr := bo.wait(ctx, err); werr != nil {
			return total, fmt.Errorf("%w (last: %v)", werr, err)
		}
	}
}

// Commit appends one version built by build from the current state,
// rebuilding it from the refreshed state after each lost race. build may
// return (nil, nil) to say that nothing needs committing any more (an
// idempotent action found done). It is for administrative writes
// (checkpoints, reclamation, config) and registration; producers' TGBs go
// through the Producer's committer.
func (l *Log) Commit(ctx context.Context, st *State, build func(st *State) (*Version, error), log *slog.Logger) (*Version, error) {
	if log == nil {
		log = slog.Default()
	}
	for {
		v, err := build(st)
		if err != nil || v == nil {
			return nil, err
		}
		v.Format = l.Config.writerVersion()
		v.Version = st.Version + 1
		v.Time = l.now().UTC()
		if v.Txn == "" {
			v.Txn = randomID()
		}
		out, err := l.tryCommit(ctx, st, v, log, nil)
		if err != nil {
			return nil, err
		}
		if out == committed {
			// Not done before _stream.json is read again: a create that
			// raced the stream's deletion is in no stream of this one's.
			if err := l.confirmIdentity(ctx, log); err != nil {
				return nil, err
			}
			l.maybeSnapshot(ctx, st, log)
			return v, nil
		}
		v.Txn = "" // a rebuilt version is a new transaction
		if err := waitShort(ctx); err != nil {
			return nil, err
		}
	}
}

// maybeSnapshot writes a snapshot when st's version is a multiple of the
// stream's SnapshotEvery. A failure only costs readers some extra version
// reads, so it is logged, not returned.
func (l *Log) maybeSnapshot(ctx context.Context, st *State, log *slog.Logger) {
	if st.Version%l.Config.SnapshotEvery != 0 {
		return
	}
	if err := l.CheckIdentity(ctx); err != nil {
		// A snapshot of a version that raced the stream's deletion would be
		// another stream's in the new one; the commit's own check says why.
		log.Warn("snapshot not written", "version", st.Version, "err", err)
		return
	}
	if err := l.WriteSnapshot(ctx, st); err != nil {
		log.Warn("snapshot not written; readers will read more versions", "version", st.Version, "err", err)
	}
}
