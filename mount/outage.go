package mount

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/lakestream/lakestream/cache"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// A mount rides out a store outage (cache/retry.go): reads wait out
// transient errors for up to Options.StoreRetry, the tailer keeps polling
// and serves the last good state, and each kind of store call says whether
// it is failing (lakefs_mount_degraded{source}, /health).

// DefaultStoreRetry is Options.StoreRetry when it is not set.
const DefaultStoreRetry = cache.DefaultRetryWindow

// sources are the kinds of store calls whose failures the mount reports.
type sources struct {
	index     *cache.Source // step indexes: a TGB's table and sections
	block     *cache.Source // blocks and passthrough memory files
	log       *cache.Source // manifest polls (the tailer)
	heartbeat *cache.Source // heartbeat writes
}

func newSources(log *slog.Logger) sources {
	return sources{
		index:     cache.NewSource("index", log),
		block:     cache.NewSource("block", log),
		log:       cache.NewSource("log", log),
		heartbeat: cache.NewSource("heartbeat", log),
	}
}

func (s sources) all() []*cache.Source { return []*cache.Source{s.index, s.block, s.log, s.heartbeat} }

// degraded says which sources are failing, for how long and why ("" when
// none is).
func (s sources) degraded() string {
	var parts []string
	for _, src := range s.all() {
		if since, cause, ok := src.Degraded(); ok {
			parts = append(parts, fmt.Sprintf("%s for %s (%v)", src.Name(), time.Since(since).Round(time.Second), cause))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "store calls failing: " + strings.Join(parts, ", ") + "; retrying, serving what is cached and the last good state"
}

// retryReads is the store as the pack loader reads it: reads wait out
// transient errors (cache.Retry); writes are not retried.
type retryReads struct {
	store.Store
	retry cache.Retry
}

func (s retryReads) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	var b []byte
	err := s.retry.Do(ctx, func(ctx context.Context) error {
		var err error
		b, err = s.Store.GetRange(ctx, key, off, n)
		return err
	})
	return b, err
}

func (s retryReads) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	var rc io.ReadCloser
	err := s.retry.Do(ctx, func(ctx context.Context) error {
		var err error
		rc, err = s.Store.Get(ctx, key)
		return err
	})
	return rc, err
}

func (s retryReads) Stat(ctx context.Context, key string) (store.Info, error) {
	var info store.Info
	err := s.retry.Do(ctx, func(ctx context.Context) error {
		var err error
		info, err = s.Store.Stat(ctx, key)
		return err
	})
	return info, err
}

// indexLog is l reading through retry: the log the pack loader reads step
// indexes with.
func indexLog(l *txn.Log, retry cache.Retry) *txn.Log {
	return &txn.Log{Store: retryReads{Store: l.Store, retry: retry}, Config: l.Config, Now: l.Now}
}
