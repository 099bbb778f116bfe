package txn_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// expiring refuses every write under prefix once expired is set:
// credentials (an Azure SAS, a token) that expired while the producer ran.
type expiring struct {
	store.Store
	prefix  string
	expired atomic.Bool
}

func (s *expiring) refuse(key string) error {
	if s.expired.Load() && strings.HasPrefix(key, s.prefix) {
		return fmt.Errorf("put %s: AuthenticationFailed (HTTP 403): %w", key, store.ErrCredentials)
	}
	return nil
}

func (s *expiring) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.refuse(key); err != nil {
		return err
	}
	return s.Store.Create(ctx, key, r, size)
}

func (s *expiring) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := s.refuse(key); err != nil {
		return err
	}
	return s.Store.Put(ctx, key, r, size)
}

// TestCredentialsExpiredStopProducer (issue 55 item 12): a producer whose
// credentials the store starts refusing (403) retries for
// txn.CredentialsGrace, in case the refusal passes, then stops with an
// error wrapping store.ErrCredentials that says to restart with fresh
// credentials: they are read once, at start, and retrying for ever looked
// like an outage that could never end. Virtual time (testing/synctest):
// the minute of retries takes none.
func TestCredentialsExpiredStopProducer(t *testing.T) {
	for what, prefix := range map[string]string{"upload": txn.DataPrefix, "commit": txn.LogPrefix} {
		t.Run(what, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := t.Context()
				s := &expiring{Store: store.NewMem(), prefix: prefix}
				l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
				if err != nil {
					t.Fatal(err)
				}
				p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "p", Logger: quietLogger()})
				if err != nil {
					t.Fatal(err)
				}
				txnCommit(t, p, batchFor("p", 1, 1))
				s.expired.Store(true)
				start := time.Now()
				pd, err := p.Append(ctx, batchFor("p", 2, 1))
				if err == nil {
					_, err = pd.Wait(ctx)
				}
				took := time.Since(start)
				if !errors.Is(err, store.ErrCredentials) || !strings.Contains(err.Error(), "fresh") {
					t.Fatalf("%s with refused credentials: %v; want ErrCredentials saying to restart with fresh ones", what, err)
				}
				if took < txn.CredentialsGrace || took > 2*txn.CredentialsGrace {
					t.Fatalf("gave up after %s, want about %s", took, txn.CredentialsGrace)
				}
				_ = p.Close(ctx)
			})
		})
	}
}
