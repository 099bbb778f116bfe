package store

import (
	"context"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sync/errgroup"
)

// SubURL is the store URL of prefix name under the store URL base: a
// subdirectory for file://, a longer key prefix for s3://, gs:// and az:// (the query, such
// as the endpoint, kept). A mem:// URL names no shared place, so it is
// ErrInvalid like any other scheme.
func SubURL(base, name string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("%w: store URL %q is not a URL; %s", ErrInvalid, Redact(base), schemesHint)
	}
	switch u.Scheme {
	case "file":
		u.Path = filepath.ToSlash(filepath.Join(u.Path, filepath.FromSlash(name)))
	case "s3", "gs", "az":
		u.Path = "/" + path.Join(strings.Trim(u.Path, "/"), name)
	default:
		return "", fmt.Errorf("%w: store URL %q: a prefix under it needs file://, s3://, gs:// or az://", ErrInvalid, Redact(base))
	}
	return u.String(), nil
}

// DeleteAll deletes every object of s, a page at a time.
func DeleteAll(ctx context.Context, s Store) error {
	for {
		objs, _, err := s.List(ctx, "", "", DefaultListLimit)
		if err != nil {
			return fmt.Errorf("listing the objects to delete: %w", err)
		}
		if len(objs) == 0 {
			return nil
		}
		keys := make([]string, len(objs))
		for i, o := range objs {
			keys[i] = o.Key
		}
		if err := s.Delete(ctx, keys...); err != nil {
			return fmt.Errorf("deleting %d objects: %w", len(keys), err)
		}
	}
}

// deleteEach deletes keys one request each, at most parallel at a time,
// for the APIs that delete one object per request (GCS, Azure). del
// returns nil for a key already gone; the first error stops the rest.
func deleteEach(ctx context.Context, keys []string, parallel int, del func(ctx context.Context, key string) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(parallel)
	for _, k := range keys {
		if gctx.Err() != nil {
			break
		}
		g.Go(func() error { return del(gctx, k) })
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctxErr(ctx, "delete", keysName(keys))
}
