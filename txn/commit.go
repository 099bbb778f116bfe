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
//	create _log/<v> ──ok──► confirm identity ─────────► committed (apply v)
//	   │ ErrExists ──► read it: ours ──► confirm identity ► committed
//	   │                        theirs (or void) ──► refresh st ─► lostRace
//	   │ other error (outcome unknown: 409, 5xx, lost response, timeout)
//	   └──► read _log/<v> until the read succeeds:
//	          absent ──► create again (same bytes)
//	          ours   ──► confirm identity ─────────────► committed
//	          theirs ──► refresh st ───────────────────► lostRace
//
// "ours" is decided by the version's Txn, which is random per commit.
// Confirming identity (identity.go) reads _stream.json after the create:
// a stream deleted or replaced meanwhile fails the commit with
// ErrStreamGone or ErrStreamReplaced; the version, created in no stream of
// this process's, stays there void. The state is refreshed in place; on
// error it holds what was read so far.
//
// checked, if not nil, delivers the result of an identity check begun
// before v was built (the combining committer overlaps it with its
// probes); nil checks now. Either way nothing is created in a stream
// that is no longer this process's, but in the moment between the check
// and the create.
func (l *Log) tryCommit(ctx context.Context, st *State, v *Version, log *slog.Logger, checked <-chan error) (outcome, error) {
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
		checked = l.checkIdentityAsync(ctx, log)
	}
	if err := <-checked; err != nil {
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
			return l.created(ctx, st, v, started, log)
		}
		if errors.Is(err, store.ErrExists) {
			// Lost, or won by an earlier attempt of this very create whose
			// answer was lost (the SDK's own retry of a PUT that landed
			// answers 412): the version says which.
			got, rerr := l.ReadVersion(ctx, v.Version)
			if rerr == nil && got.Txn == v.Txn {
				return l.created(ctx, st, got, started, log)
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
				return l.created(ctx, st, got, started, log)
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

// created settles a create of v (as stored) that succeeded at started:
// committed once _stream.json still names this stream. A stream deleted
// or replaced before the create landed makes it a version of no stream of
// this process's (void to the stream now there): the commit fails with
// ErrStreamGone or ErrStreamReplaced.
func (l *Log) created(ctx context.Context, st *State, v *Version, started time.Time, log *slog.Logger) (outcome, error) {
	if err := l.confirmIdentity(ctx, log); err != nil {
		return 0, err
	}
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
	if err := l.WriteSnapshot(ctx, st); err != nil {
		log.Warn("snapshot not written; readers will read more versions", "version", st.Version, "err", err)
	}
}
