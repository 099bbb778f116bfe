package txn_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// listsFirst holds each delete under data/ until n listings of data/ were
// made, or for a second: gcs running side by side then all list the
// orphans before any deletes them, as they did in the run.
type listsFirst struct {
	store.Store
	n      int64
	listed atomic.Int64
}

func (s *listsFirst) List(ctx context.Context, prefix, after string, limit int) ([]store.Info, bool, error) {
	if strings.HasPrefix(prefix, txn.DataPrefix) {
		s.listed.Add(1)
	}
	return s.Store.List(ctx, prefix, after, limit)
}

func (s *listsFirst) Delete(ctx context.Context, keys ...string) error {
	if len(keys) > 0 && strings.HasPrefix(keys[0], txn.DataPrefix) {
		for end := time.Now().Add(time.Second); s.listed.Load() < s.n && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return s.Store.Delete(ctx, keys...)
}

// TestConcurrentGCsReportEachDeleteOnce (issue 55 item 15): three gcs at
// once delete 31 orphans and report 31 deletes between them, not 31 each
// (93 claimed for 31): one holds the lease, the others say another gc is
// running. The lease is gone afterwards.
func TestConcurrentGCsReportEachDeleteOnce(t *testing.T) {
	ctx := t.Context()
	w := &skewWorld{}
	mem := store.NewMemClock(w.clock(0))
	l := newLog(t, mem, txn.CreateOptions{Ranks: 1})
	for i := range 31 {
		if err := store.PutBytes(ctx, mem, fmt.Sprintf("data/ghost/1/%d/tgb.pack", i+1), []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	w.advance(time.Hour)
	reps := make([]*txn.GCReport, 3)
	gated := &txn.Log{Store: &listsFirst{Store: mem, n: int64(len(reps))}, Config: l.Config}
	var wg sync.WaitGroup
	for i := range reps {
		wg.Go(func() {
			reps[i] = gcRun(t, gated, txn.GCOptions{Grace: gcGrace, Now: w.clock(0), Logger: quietLogger()})
		})
	}
	wg.Wait()
	claimed, busy := 0, 0
	for _, r := range reps {
		claimed += len(r.Orphans)
		if r.Busy != nil {
			busy++
		}
	}
	if claimed != 31 {
		t.Fatalf("three gcs at once claimed %d deletes of 31 orphans (%d stood aside)", claimed, busy)
	}
	objs, _, err := mem.List(ctx, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.Key == txn.GCLeaseKey {
			t.Fatalf("the gc lease was left behind")
		}
	}
}

// TestGCLeaseOfAKilledGCExpires: a lease its holder left (a gc killed)
// holds other gcs off until it is gcLeaseTTL (2 min) old by the store's
// clock, then the next gc takes it over.
func TestGCLeaseOfAKilledGCExpires(t *testing.T) {
	ctx := t.Context()
	w := &skewWorld{}
	mem := store.NewMemClock(w.clock(0))
	l := newLog(t, mem, txn.CreateOptions{Ranks: 1})
	if err := store.PutBytes(ctx, mem, txn.GCLeaseKey, []byte(`{"holder":"dead pid 1","since":"2026-12-07T00:00:00Z"}`)); err != nil {
		t.Fatal(err)
	}
	o := txn.GCOptions{Grace: gcGrace, Now: w.clock(0), Logger: quietLogger()}
	if rep := gcRun(t, l, o); rep.Busy == nil || rep.Busy.Holder != "dead pid 1" {
		t.Fatalf("gc beside a fresh lease: busy %+v; want it to stand aside naming the holder", rep.Busy)
	}
	w.advance(2*time.Minute + time.Second)
	if rep := gcRun(t, l, o); rep.Busy != nil {
		t.Fatalf("gc beside a lease 2 minutes old: busy %+v; want it taken over", rep.Busy)
	}
	if _, err := mem.Stat(ctx, txn.GCLeaseKey); err == nil {
		t.Fatal("the taken-over lease was not released")
	}
}
