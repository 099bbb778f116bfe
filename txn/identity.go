package txn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/lakestream/lakestream/store"
)

// A stream is its _stream.json and the random stream id in it. Someone may
// delete every object under a stream's URL and run init there again while
// producers and mounts of the old stream still run: version numbers,
// producer ids, epochs and data keys of the new stream then collide with
// the old ones. Every process holds the id it opened (Log.Config.StreamID)
// and:
//
//   - stamps it on every version it writes (Version.Stream), so a reader
//     holding another id never applies that version (ReadVersion);
//   - confirms that _stream.json still names its id (CheckIdentity)
//     before it creates a version, after the create (a create that raced
//     the deletion landed in nobody's stream or in the new one, and the
//     confirmation, made after it, tells) and before it acts on a version
//     that commits its TGBs (removing staged batches);
//   - a record of another stream found in a stream whose _stream.json is
//     the reader's own (a process of the deleted stream created it in the
//     moment before its confirmation) is void: it takes its version number
//     and changes nothing, for every reader alike (Version.Void). Nobody
//     deletes it: a delete racing a committer that took the number would
//     delete a committed version, and readers that had skipped it would
//     miss the one created in its place.
//
// A process that learns its stream is gone or replaced stops (ErrStreamGone,
// ErrStreamReplaced): a producer with its batches still staged, a mount
// serving what it had and never extending it.

// ErrStreamReplaced: _stream.json names another stream than the one this
// process opened: the stream was deleted and another created at its URL.
var ErrStreamReplaced = errors.New("the stream was replaced by another at its URL")

// ErrStreamGone: the stream this process opened has no _stream.json any
// more: it was deleted.
var ErrStreamGone = errors.New("the stream is gone from its URL")

// CheckIdentity reads _stream.json and returns nil when it still names the
// stream this Log opened, ErrStreamGone or ErrStreamReplaced (with what to
// do) when not, or the store's error.
func (l *Log) CheckIdentity(ctx context.Context) error {
	b, err := readBounded(ctx, l.Store, StreamKey, maxConfigBytes)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s is missing (stream %s was deleted); restart against a stream that exists", ErrStreamGone, StreamKey, l.Config.StreamID)
	}
	if err != nil {
		return fmt.Errorf("checking %s: %w", StreamKey, err)
	}
	var cfg StreamConfig
	if err := json.Unmarshal(b, &cfg); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrCorrupt, StreamKey, err)
	}
	if cfg.StreamID != l.Config.StreamID {
		return fmt.Errorf("%w: %s names stream %s, this process holds stream %s (deleted, and a new stream created at its URL); restart to follow the new stream",
			ErrStreamReplaced, StreamKey, cfg.StreamID, l.Config.StreamID)
	}
	return nil
}

// confirmIdentity is CheckIdentity retried through transient store errors
// until ctx ends.
func (l *Log) confirmIdentity(ctx context.Context, log *slog.Logger) error {
	bo := newRetryWait(ctx)
	defer bo.done()
	for {
		err := l.CheckIdentity(ctx)
		if err == nil || Permanent(err) || ctx.Err() != nil {
			return err
		}
		log.Warn("checking the stream's identity failed; retrying", "err", err)
		if werr := bo.wait(ctx, err); werr != nil {
			return fmt.Errorf("%w (last: %v)", werr, err)
		}
	}
}

// foreign handles a record stamped with stream id other than this Log's:
// ErrStreamGone or ErrStreamReplaced when this process's stream is no
// longer at its URL, else a void version v.
func (l *Log) foreign(ctx context.Context, v uint64) (*Version, error) {
	if err := l.CheckIdentity(ctx); err != nil {
		return nil, err
	}
	return &Version{Version: v, void: true}, nil
}

// Permanent reports an error reading or writing the log that no retry
// cures: a record failing validation, the stream gone from its URL or
// replaced, a request the store calls invalid.
func Permanent(err error) bool {
	return errors.Is(err, ErrCorrupt) || StreamChanged(err) || errors.Is(err, store.ErrInvalid)
}

// foreignStream is a decoded record stamped with another stream's id: to
// DecodeVersion's callers a foreign record (ErrCorrupt); ReadVersion tells
// the stream replaced from a leftover (Log.foreign).
type foreignStream struct{ id string }

func (f foreignStream) Error() string { return ErrCorrupt.Error() + ": a record of stream " + f.id }
func (f foreignStream) Unwrap() error { return ErrCorrupt }

// StreamChanged reports ErrStreamGone or ErrStreamReplaced.
func StreamChanged(err error) bool {
	return errors.Is(err, ErrStreamGone) || errors.Is(err, ErrStreamReplaced)
}
