package txn

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/lakestream/lakestream/store"
)

// A stream owns its root's _stream.json and everything under the prefixes
// below: its gc deletes there what its log does not reference. Another
// stream under one of them (s3://b/x/data/imagenet inside s3://b/x) would
// be taken for garbage, its log, data and _stream.json deleted. So init
// refuses to place a stream there (or to place one around an existing
// one), and gc never deletes under a _stream.json that is not its own.

// ownedPrefixes are the prefixes a stream's own writes and gc use.
var ownedPrefixes = []string{DataPrefix, LogPrefix, ConsumerDir, store.ProbePrefix}

// ErrNested: a stream would lie inside what another stream owns, or would
// own another stream.
var ErrNested = errors.New("stream inside another stream")

// owned reports whether rel (a path below a stream's root) lies under
// one of the prefixes that stream owns.
func owned(rel string) bool {
	for _, p := range ownedPrefixes {
		if strings.HasPrefix(rel+"/", p) {
			return true
		}
	}
	return false
}

// CheckPlacement refuses a new stream at rawURL (opened as s) that lies
// inside the data/, _log/, _consumers/ or _probe/ of a stream above it, or
// whose own such prefixes hold a stream. A prefix above it that cannot be
// read (credentials scoped to this prefix) is not held against it; a
// store that is down is an error.
func CheckPlacement(ctx context.Context, rawURL string, s store.Store) error {
	for _, a := range store.Ancestors(rawURL) {
		if !owned(a.Rel) {
			continue
		}
		up, err := store.Open(ctx, a.URL)
		if err == nil {
			_, err = up.Stat(ctx, StreamKey)
		}
		switch {
		case err == nil:
			first, _, _ := strings.Cut(a.Rel, "/")
			return fmt.Errorf("%w: %s lies in the %s/ of the stream at %s, whose gc would delete it as garbage; choose a prefix outside that stream's data/, _log/, _consumers/ and _probe/",
				ErrNested, store.Redact(rawURL), first, store.Redact(a.URL))
		case store.Transient(err) || ctx.Err() != nil:
			return fmt.Errorf("looking for a stream above %s at %s: %w", store.Redact(rawURL), store.Redact(a.URL), err)
		}
	}
	inner, err := NestedStreams(ctx, s)
	if err != nil {
		return err
	}
	if len(inner) > 0 {
		return fmt.Errorf("%w: %s would hold the stream at its %s (%d in all) in what it owns, and its gc would delete it as garbage; choose another prefix",
			ErrNested, store.Redact(rawURL), inner[0], len(inner))
	}
	return nil
}

// NestedStreams lists the roots ("data/x/") of other streams found under
// the prefixes s's stream owns.
func NestedStreams(ctx context.Context, s store.Store) ([]string, error) {
	var roots []string
	for _, p := range ownedPrefixes {
		err := store.Walk(ctx, s, p, "", func(o store.Info) error {
			if root, ok := streamRoot(o.Key); ok {
				roots = append(roots, root)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", p, err)
		}
	}
	return roots, nil
}

// streamRoot is the root ("data/x/") of the stream whose _stream.json is
// key, if key is one below the top.
func streamRoot(key string) (string, bool) {
	dir, base := path.Split(key)
	return dir, base == StreamKey && dir != ""
}

// under reports whether key lies under one of roots.
func under(key string, roots []string) bool {
	for _, r := range roots {
		if strings.HasPrefix(key, r) {
			return true
		}
	}
	return false
}
