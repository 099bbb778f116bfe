package txn_test

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// flakyCreates fails the first n creates under each prefix it is given
// with ErrUnavailable.
type flakyCreates struct {
	store.Store
	left map[string]*atomic.Int64
}

func (s *flakyCreates) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	for prefix, n := range s.left {
		if strings.HasPrefix(key, prefix) && n.Add(-1) >= 0 {
			return fmt.Errorf("create %s: %w", key, store.ErrUnavailable)
		}
	}
	return s.Store.Create(ctx, key, r, size)
}

// TestOnStoreWaitReportsTxnWaits (issue 43 item 8): every retry loop of a
// producer that waits out a store error (the register's commit, an
// upload, a TGB's commit) tells OnStoreWait when it starts waiting, with
// the cause, and when it got through: so lakefs_produce_store_waiting is
// on during the outages met inside txn, not only at start.
func TestOnStoreWaitReportsTxnWaits(t *testing.T) {
	ctx := t.Context()
	mem := store.NewMem()
	l, err := txn.Create(ctx, mem, txn.CreateOptions{Ranks: 1})
	if err != nil {
		t.Fatal(err)
	}
	left := func(n int64) *atomic.Int64 { var a atomic.Int64; a.Store(n); return &a }
	fs := &flakyCreates{Store: mem, left: map[string]*atomic.Int64{"_log/": left(3), "data/": left(3)}}
	var mu sync.Mutex
	var on, peak, starts int
	var causes []error
	report := func(waiting bool, cause error) {
		mu.Lock()
		defer mu.Unlock()
		if waiting {
			on++
			starts++
			causes = append(causes, cause)
		} else {
			on--
		}
		peak = max(peak, on)
		if on < 0 {
			t.Errorf("OnStoreWait: more ends than starts")
		}
	}
	p, err := txn.OpenProducer(ctx, &txn.Log{Store: fs, Config: l.Config}, txn.ProducerOptions{ID: "p", OnStoreWait: report})
	if err != nil {
		t.Fatal(err)
	}
	fs.left["_log/"].Store(3) // the TGB's commit meets the outage too
	pd, err := p.Append(ctx, txn.Batch{Name: "b0", Ranks: [][]txn.FileSource{{txn.BytesFile("f", []byte("x"))}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pd.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if starts < 3 || peak < 1 || on != 0 {
		t.Fatalf("OnStoreWait: %d waits started (want one for the register, the upload and the commit), peak %d, %d still on at the end", starts, peak, on)
	}
	for _, c := range causes {
		if !strings.Contains(fmt.Sprint(c), store.ErrUnavailable.Error()) {
			t.Fatalf("a wait reported cause %v; want the store's error", c)
		}
	}
}
