package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
)

// wholeSeconds stamps objects as S3 and Azure do: Last-Modified truncated
// to the second.
type wholeSeconds struct{ store.Store }

func (w wholeSeconds) Stat(ctx context.Context, key string) (store.Info, error) {
	info, err := w.Store.Stat(ctx, key)
	info.ModTime = info.ModTime.Truncate(time.Second)
	return info, err
}

// TestClockReadsStoreTime: a process whose clock is minutes off the
// store's reads the store's time once the clock is measured, within the
// probe write's round trip plus the stamp's resolution, and never ahead
// of it (whole-second stamps included); before a measurement, and after a
// failed one, the offset is what it was; the probe is deleted.
func TestClockReadsStoreTime(t *testing.T) {
	ctx := t.Context()
	storeAhead := func() time.Time { return time.Now().Add(7 * time.Minute) }
	local := func() time.Time { return time.Now().Add(-3 * time.Minute) }
	// within checks c reads the store's time: not ahead, at most slack behind.
	within := func(t *testing.T, c *store.Clock, storeNow func() time.Time, slack time.Duration) {
		t.Helper()
		for range 4 {
			before := storeNow()
			got := c.Now()
			after := storeNow()
			if got.After(after) || got.Before(before.Add(-slack)) {
				t.Fatalf("clock reads %s, the store's clock %s..%s: want at most %s behind, never ahead",
					got.Format(time.RFC3339Nano), before.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano), slack)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for name, c := range map[string]struct {
		s     store.Store
		slack time.Duration
	}{
		"fine stamps":  {store.NewMemClock(storeAhead), 100 * time.Millisecond},
		"whole second": {wholeSeconds{store.NewMemClock(storeAhead)}, time.Second + 100*time.Millisecond},
	} {
		t.Run(name, func(t *testing.T) {
			clk := store.NewClock(c.s, local, nil)
			if off, ok := clk.Offset(); off != 0 || ok {
				t.Fatalf("unmeasured clock: offset %s, measured %v; want 0, false", off, ok)
			}
			within(t, clk, local, 50*time.Millisecond)
			if err := clk.Measure(ctx); err != nil {
				t.Fatal(err)
			}
			if off, ok := clk.Offset(); !ok || off < 10*time.Minute-c.slack || off > 10*time.Minute {
				t.Fatalf("offset %s (measured %v), want about 10m", off, ok)
			}
			within(t, clk, storeAhead, c.slack)
			objs, _, err := c.s.List(ctx, store.ProbePrefix, "", 0)
			if err != nil || len(objs) > 0 {
				t.Fatalf("probes left: %v, %v", objs, err)
			}
		})
	}
	t.Run("failure keeps the offset", func(t *testing.T) {
		f := store.NewFaulty(store.NewMemClock(storeAhead), 1)
		clk := store.NewClock(f, local, nil)
		if err := clk.Measure(ctx); err != nil {
			t.Fatal(err)
		}
		was, _ := clk.Offset()
		f.Set(store.Fault{ErrRate: 1}, store.OpPut)
		if err := clk.Measure(ctx); !errors.Is(err, store.ErrInjected) {
			t.Fatalf("measure through a failing store: %v", err)
		}
		if off, ok := clk.Offset(); off != was || !ok {
			t.Fatalf("after a failed measurement: offset %s (measured %v), want %s kept", off, ok, was)
		}
	})
	t.Run("unmeasured until a measurement succeeds", func(t *testing.T) {
		f := store.NewFaulty(store.NewMemClock(storeAhead), 1)
		clk := store.NewClock(f, local, nil)
		if err := clk.Unmeasured(); !errors.Is(err, store.ErrClockUnmeasured) {
			t.Fatalf("a new clock: %v, want ErrClockUnmeasured", err)
		}
		f.Set(store.Fault{ErrRate: 1}, store.OpPut)
		_ = clk.Measure(ctx)
		if err := clk.Unmeasured(); !errors.Is(err, store.ErrClockUnmeasured) || !errors.Is(err, store.ErrInjected) {
			t.Fatalf("after a failed measurement: %v, want ErrClockUnmeasured naming the probe's failure", err)
		}
		f.Set(store.Fault{}, store.OpPut)
		if err := clk.Measure(ctx); err != nil {
			t.Fatal(err)
		}
		f.Set(store.Fault{ErrRate: 1}, store.OpPut)
		_ = clk.Measure(ctx)
		if err := clk.Unmeasured(); err != nil {
			t.Fatalf("a failure after a measurement: %v; the last offset stays good", err)
		}
	})
	t.Run("file", func(t *testing.T) {
		s, err := store.Open(ctx, "file://"+t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		clk := store.NewClock(s, local, nil)
		if err := clk.Measure(ctx); err != nil {
			t.Fatal(err)
		}
		within(t, clk, time.Now, 500*time.Millisecond)
	})
}
