package backoff

import (
	"context"
	"math"
	"testing"
	"time"
)

func TestNextStaysInUpperHalfAndCaps(t *testing.T) {
	b := New(Policy{First: 100 * time.Millisecond, Max: time.Second})
	step := 100 * time.Millisecond
	for i := 0; i < 50; i++ {
		d := b.Next()
		if d < step/2 || d > step {
			t.Fatalf("wait %d = %v; want within [%v, %v]", i, d, step/2, step)
		}
		step = min(2*step, time.Second)
	}
	if b.Step() != time.Second || b.Waits() != 50 {
		t.Fatalf("step %v after 50 waits (%d); want the cap 1s", b.Step(), b.Waits())
	}
	b.Reset()
	if b.Step() != 100*time.Millisecond || b.Waits() != 0 {
		t.Fatalf("after Reset: step %v, waits %d", b.Step(), b.Waits())
	}
}

// A step of hours doubled many times must cap, never wrap negative (a
// shift does: 2h << 20 overflows int64 nanoseconds).
func TestGrowNeverOverflows(t *testing.T) {
	for _, first := range []time.Duration{time.Millisecond, 2 * time.Hour, 12 * time.Hour, math.MaxInt64 / 3} {
		for _, n := range []int{0, 1, 20, 63, 64, 1000} {
			limit := time.Duration(math.MaxInt64)
			d := Grow(first, n, limit)
			if d < first || d <= 0 {
				t.Fatalf("Grow(%v, %d) = %v; want >= first and positive", first, n, d)
			}
		}
	}
	if d := Grow(2*time.Hour, 25, 24*time.Hour); d != 24*time.Hour {
		t.Fatalf("Grow(2h, 25, 24h) = %v; want the cap", d)
	}
	if d := Grow(time.Second, 3, time.Minute); d != 8*time.Second {
		t.Fatalf("Grow(1s, 3) = %v; want 8s", d)
	}
}

func TestWaitUntilCapsAtDeadline(t *testing.T) {
	b := New(Policy{First: time.Hour, Max: time.Hour})
	deadline := time.Now().Add(50 * time.Millisecond)
	start := time.Now()
	more, err := b.WaitUntil(context.Background(), deadline)
	if err != nil || !more {
		t.Fatalf("first wait: more=%v err=%v", more, err)
	}
	if time.Now().Before(deadline) {
		t.Fatalf("woke %v after start, before the deadline", time.Since(start))
	}
	if more, _ := b.WaitUntil(context.Background(), deadline); more {
		t.Fatal("a wait after the deadline says there is time for another attempt")
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Sleep(ctx, time.Hour); err != context.Canceled {
		t.Fatalf("Sleep on a cancelled context = %v", err)
	}
	if err := Sleep(ctx, 0); err != context.Canceled {
		t.Fatalf("Sleep(0) on a cancelled context = %v", err)
	}
	if err := Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep(0) = %v", err)
	}
}
