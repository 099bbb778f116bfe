package txn

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/lakestream/lakestream/store"
)

// ErrNoStream: the store holds no _stream.json.
var ErrNoStream = errors.New("no stream at this store URL")

// ErrStreamExists: Create found a stream already there.
var ErrStreamExists = errors.New("a stream already exists at this store URL")

// Log is an opened stream: its store and its fixed configuration. It is
// safe for concurrent use; the State values it returns are not shared.
type Log struct {
	Store  store.Store
	Config StreamConfig
	// Now is the store's clock (store.Clock.Now): it stamps the versions
	// this process commits and ages what other processes wrote against it
	// (commit times against LogRetention; gc and status also take it for
	// heartbeats and the grace period), so times written on different
	// machines are compared on one clock. Nil: time.Now, this machine's
	// clock unmeasured. Commands set it from a measured store.Clock;
	// tests move it.
	Now func() time.Time

	// clock is the measured clock behind Now, set by UseStoreClock; nil
	// when the caller set Now itself (tests) or left it nil.
	clock *store.Clock
}

// StoreTime is the log's clock: Now, else time.Now.
func (l *Log) StoreTime() time.Time { return l.now() }

// ClockErr is nil when the log's clock may judge ages, and an error
// wrapping store.ErrClockUnmeasured (with the measurement's cause) while
// the store clock UseStoreClock installed has not been measured: gc,
// consumer liveness and back-pressure then refuse or wait rather than
// trust this machine's clock. A Log whose Now was set directly is trusted.
func (l *Log) ClockErr() error {
	if l.clock == nil {
		return nil
	}
	return l.clock.Unmeasured()
}

// UseStoreClock makes the store's clock the log's (Now): a store.Clock
// over this machine's clock moved by skew (0 but in tests: a machine whose
// clock is wrong), measured once now. A failed measurement leaves this
// machine's clock, logged at debug level. A long-running process keeps
// the returned clock measured (store.Clock.Keep).
func (l *Log) UseStoreClock(ctx context.Context, skew time.Duration, log *slog.Logger) *store.Clock {
	local := time.Now
	if skew != 0 {
		local = func() time.Time { return time.Now().Add(skew) }
	}
	c := store.NewClock(l.Store, local, log)
	_ = c.Measure(ctx) // logged
	l.Now, l.clock = c.Now, c
	return c
}

func (l *Log) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

// CreateOptions are the settings of a new stream.
type CreateOptions struct {
	Ranks             int
	FirstStep         int64
	ChunkSize         int64  // default DefaultChunkSize
	SnapshotEvery     uint64 // default DefaultSnapshotEvery
	RetainCheckpoints int    // default DefaultRetainCheckpoints
}

// Create makes a new stream: it probes the store for create-if-absent and
// writes _stream.json with create-if-absent, so it refuses an existing
// stream (ErrStreamExists) and two concurrent inits cannot both succeed.
func Create(ctx context.Context, s store.Store, o CreateOptions) (*Log, error) {
	cfg := StreamConfig{
		Format:            FormatVersion,
		ReaderVersion:     FormatVersion,
		WriterVersion:     FormatVersion,
		StreamID:          randomID(),
		Ranks:             o.Ranks,
		FirstStep:         o.FirstStep,
		ChunkSize:         o.ChunkSize,
		CreatedAt:         time.Now().UTC(),
		SnapshotEvery:     o.SnapshotEvery,
		RetainCheckpoints: o.RetainCheckpoints,
	}
	if cfg.ChunkSize == 0 {
		cfg.ChunkSize = DefaultChunkSize
	}
	if cfg.SnapshotEvery == 0 {
		cfg.SnapshotEvery = DefaultSnapshotEvery
	}
	if cfg.RetainCheckpoints == 0 {
		cfg.RetainCheckpoints = DefaultRetainCheckpoints
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("new stream: %w", err)
	}
	if err := store.Probe(ctx, s); err != nil {
		return nil, err
	}
	err := store.CreateBytes(ctx, s, StreamKey, encode(&cfg))
	if errors.Is(err, store.ErrExists) {
		return nil, fmt.Errorf("%w (%s exists); use it as it is, or choose another prefix", ErrStreamExists, StreamKey)
	}
	if err != nil {
		return nil, fmt.Errorf("writing %s: %w", StreamKey, err)
	}
	return &Log{Store: s, Config: cfg}, nil
}

// Open reads the stream's configuration.
func Open(ctx context.Context, s store.Store) (*Log, error) {
	b, err := readBounded(ctx, s, StreamKey, maxConfigBytes)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("%w (no %s); create one with `lakefs-produce init`", ErrNoStream, StreamKey)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", StreamKey, err)
	}
	var cfg StreamConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, StreamKey, err)
	}
	if err := cfg.validate(); err != nil {
		if errors.Is(err, ErrNewerFormat) {
			return nil, fmt.Errorf("%s: %w", StreamKey, err)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrCorrupt, StreamKey, err)
	}
	return &Log{Store: s, Config: cfg}, nil
}

// Load returns the newest state: the newest snapshot (found through the
// hint, which may be stale) plus the versions after it.
func (l *Log) Load(ctx context.Context) (*State, error) {
	st, err := l.loadSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := l.Refresh(ctx, st); err != nil {
		return nil, err
	}
	return st, nil
}

// loadSnapshot returns the state at the snapshot the hint names, or the
// empty state when there is no hint. A hint naming a missing snapshot (gc
// removed it after a newer one was hinted) falls back to listing the log
// after it: gc keeps the newest snapshot, so a newer one is there.
func (l *Log) loadSnapshot(ctx context.Context) (*State, error) {
	v, err := l.readHint(ctx)
	if err != nil {
		return nil, err
	}
	if v == 0 {
		return NewState(l.Config), nil
	}
	st, err := l.readSnapshot(ctx, v)
	if errors.Is(err, store.ErrNotFound) {
		if v, err = l.newestSnapshot(ctx, v); err != nil {
			return nil, err
		}
		if v == 0 {
			return NewState(l.Config), nil
		}
		st, err = l.readSnapshot(ctx, v)
	}
	return st, err
}

func (l *Log) readHint(ctx context.Context) (uint64, error) {
	b, err := readBounded(ctx, l.Store, HintKey, maxHintBytes)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", HintKey, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		// The hint is only a hint: a garbled one costs a listing, not the
		// stream.
		return l.newestSnapshot(ctx, 0)
	}
	return v, nil
}

// newestSnapshot lists _log/ after version from for the highest snapshot
// version (0 if none). Listing from a known version, not from the log's
// start, keeps a reader's start O(versions since it) on a log of a million
// versions that gc has not swept.
func (l *Log) newestSnapshot(ctx context.Context, from uint64) (uint64, error) {
	after := ""
	if from > 0 {
		after = VersionKey(from)
	}
	var newest uint64
	err := store.Walk(ctx, l.Store, LogPrefix, after, func(o store.Info) error {
		if v, ok := ParseSnapshotKey(o.Key); ok && v > newest {
			newest = v
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("listing %s: %w", LogPrefix, err)
	}
	return newest, nil
}

func (l *Log) readSnapshot(ctx context.Context, v uint64) (*State, error) {
	key := SnapshotKey(v)
	b, err := readBounded(ctx, l.Store, key, maxSnapshotBytes)
	if err != nil {
		return nil, fmt.Errorf("reading snapshot %s: %w", key, err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", ErrCorrupt, key, err)
	}
	if st.Version != v {
		return nil, fmt.Errorf("%w: snapshot %s says version %d", ErrCorrupt, key, st.Version)
	}
	if id := st.Config.StreamID; id != "" && id != l.Config.StreamID {
		if err := l.CheckIdentity(ctx); err != nil {
			return nil, err
		}
		// Written by a process of a deleted stream in the race the
		// identity checks leave (identity.go); rare enough to need a hand.
		return nil, fmt.Errorf("%w: snapshot %s belongs to stream %s, deleted from this URL; delete %s and %s", ErrCorrupt, key, id, key, HintKey)
	}
	if err := st.validate(&l.Config); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s: %v", ErrCorrupt, key, err)
	}
	return &st, nil
}

// ReadVersion reads and decodes version v; a missing one is ErrNotFound.
// A record of a deleted stream is a void version (Version.Void), or
// ErrStreamGone or ErrStreamReplaced when this Log's stream is the one no
// longer at its URL (identity.go).
func (l *Log) ReadVersion(ctx context.Context, v uint64) (*Version, error) {
	key := VersionKey(v)
	b, err := readBounded(ctx, l.Store, key, maxRecordBytes)
	if errors.Is(err, ErrCorrupt) {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if err != nil {
		return nil, err
	}
	ver, err := DecodeVersion(b, v, &l.Config)
	var other foreignStream
	if errors.As(err, &other) {
		return l.foreign(ctx, v)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	return ver, nil
}

// LogRetention is how long gc keeps a version after its commit time, even
// when a snapshot covers it. A State that last saw the head longer ago
// than LogRetention/2 is reloaded from the newest snapshot instead of
// refreshed, because "version v+1 is absent" could then mean "gc removed
// it": a committer trusting that would re-create an old version number.
const LogRetention = time.Hour

// Refresh applies the versions after st.Version, reading only those, until
// the next one is absent, and returns how many it applied. On an invalid
// version it stops there with an error naming the object; st then holds
// the versions before it, nothing past it.
func (l *Log) Refresh(ctx context.Context, st *State) (int, error) {
	if !st.seenHead.IsZero() && l.now().Sub(st.seenHead) > LogRetention/2 {
		fresh, err := l.Load(ctx)
		if err != nil {
			return 0, err
		}
		if fresh.Version < st.Version {
			return 0, fmt.Errorf("%w: reloaded state is at version %d, behind %d", ErrCorrupt, fresh.Version, st.Version)
		}
		n := int(fresh.Version - st.Version)
		*st = *fresh
		return n, nil
	}
	n := 0
	ahead := 1 // versions read at once: doubles while they keep existing
	var pending []readResult
	for {
		checked := l.now()
		if len(pending) == 0 {
			pending = l.readAhead(ctx, st.Version+1, ahead)
			ahead = min(ahead*2, maxReadAhead)
		}
		v, err := pending[0].v, pending[0].err
		pending = pending[1:]
		if err != nil {
			pending = nil // a prefix is applied; what follows a gap is reread
		}
		if errors.Is(err, store.ErrNotFound) {
			if cut, err := l.chainCut(ctx, st); err != nil || cut {
				if err != nil {
					return n, err
				}
				fresh, err := l.loadNewest(ctx, st.Version)
				if err != nil {
					return n, err
				}
				if fresh.Version < st.Version {
					return n, fmt.Errorf("%w: newest snapshot is at version %d, behind %d", ErrCorrupt, fresh.Version, st.Version)
				}
				n += int(fresh.Version - st.Version)
				*st = *fresh
				return n, nil
			}
			st.seenHead = checked
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if err := st.Apply(v); err != nil {
			return n, fmt.Errorf("%s: %w", VersionKey(v.Version), err)
		}
		n++
	}
}

// maxReadAhead bounds the versions a refresh reads in parallel. A producer
// that lost a race is usually a few versions behind; reading them one round
// trip at a time would let a busy writer stay ahead of it for good.
const maxReadAhead = 16

// readAhead reads versions from..from+n-1 in parallel. The results are in
// order, cut after the first error (a missing version ends the log).
func (l *Log) readAhead(ctx context.Context, from uint64, n int) []readResult {
	out := make([]readResult, n)
	if n == 1 {
		out[0].v, out[0].err = l.ReadVersion(ctx, from)
		return out
	}
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() { out[i].v, out[i].err = l.ReadVersion(ctx, from+uint64(i)) })
	}
	wg.Wait()
	for i, r := range out {
		if r.err != nil {
			return out[:i+1]
		}
	}
	return out
}

type readResult struct {
	v   *Version
	err error
}

// chainCut reports whether "version v+1 is absent" may be a lie: gc
// deletes versions older than LogRetention once a newer snapshot covers
// them, so a reader that started from an old snapshot (a stale hint) and
// finds the next version gone may be looking at a cut chain. When st's
// newest version is that old, one listing after it tells. (A version gc
// deleted was older than LogRetention, so the version before it, the
// newest a reader could have applied, is older still.) It is done once per
// version, so an idle stream is not listed on every poll, and a young
// stream never: Load's cost does not grow with the log.
func (l *Log) chainCut(ctx context.Context, st *State) (bool, error) {
	if st.Version == 0 || st.listedAt == st.Version || l.now().Sub(st.Time) < LogRetention/2 {
		return false, nil
	}
	objs, _, err := l.Store.List(ctx, LogPrefix, VersionKey(st.Version), 4)
	if err != nil {
		return false, fmt.Errorf("listing %s: %w", LogPrefix, err)
	}
	st.listedAt = st.Version
	for _, o := range objs {
		v, ok := ParseVersionKey(o.Key)
		if !ok {
			v, ok = ParseSnapshotKey(o.Key)
		}
		if ok && v > st.Version {
			return true, nil
		}
	}
	return false, nil
}

// loadNewest loads from the newest snapshot listed after version from,
// ignoring the hint.
func (l *Log) loadNewest(ctx context.Context, from uint64) (*State, error) {
	v, err := l.newestSnapshot(ctx, from)
	if err != nil {
		return nil, err
	}
	st := NewState(l.Config)
	if v > 0 {
		if st, err = l.readSnapshot(ctx, v); err != nil {
			return nil, err
		}
	}
	st.listedAt = st.Version // just listed
	if _, err := l.Refresh(ctx, st); err != nil {
		return nil, err
	}
	return st, nil
}

// WriteSnapshot stores the state as the snapshot of its version and moves
// the hint forward. Both writes are idempotent: a snapshot's content is a
// function of its version (so it is created once, create-if-absent, and a
// process of a deleted stream cannot overwrite the new stream's), and a
// stale hint is tolerated by readers.
func (l *Log) WriteSnapshot(ctx context.Context, st *State) error {
	if err := store.CreateBytes(ctx, l.Store, SnapshotKey(st.Version), encode(st)); err != nil && !errors.Is(err, store.ErrExists) {
		return fmt.Errorf("writing snapshot %s: %w", SnapshotKey(st.Version), err)
	}
	if err := store.PutBytes(ctx, l.Store, HintKey, []byte(strconv.FormatUint(st.Version, 10)+"\n")); err != nil {
		return fmt.Errorf("writing %s: %w", HintKey, err)
	}
	return nil
}

func randomID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
