package mount

import (
	"errors"
	"testing"
	"time"
)

// hbSim runs a heartbeatPolicy on a simulated clock, checking every tick
// as the heartbeat goroutine does; position and head are functions of the
// time. It returns the times of the writes.
func hbSim(p *heartbeatPolicy, from, to time.Time, tick time.Duration, step, head func(time.Time) int64, fail func(time.Time) bool) []time.Time {
	var writes []time.Time
	for now := from; now.Before(to); now = now.Add(tick) {
		s := step(now)
		if p.due(now, s, head(now)) {
			var err error
			if fail != nil && fail(now) {
				err = errors.New("injected")
			}
			p.done(now, s, err)
			writes = append(writes, now)
		}
	}
	return writes
}

// TestHeartbeatPolicy: following a moving head, a node writes its
// heartbeat once a minute (it was every 10 s); when the head stands still
// (producers held back by --max-lead wait for it) and its position moves,
// it writes within about half an interval; a failed write is retried an
// interval later; no two writes are ever within an interval; a node whose
// position does not move writes once a minute.
func TestHeartbeatPolicy(t *testing.T) {
	const interval = 10 * time.Second
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tick := interval / 5
	newPolicy := func() *heartbeatPolicy {
		return &heartbeatPolicy{interval: interval, refresh: heartbeatRefresh(interval)}
	}
	if r := heartbeatRefresh(interval); r != time.Minute {
		t.Fatalf("refresh at a 10s interval: %v, want 1m", r)
	}
	if r := heartbeatRefresh(20 * time.Millisecond); r != 120*time.Millisecond {
		t.Fatalf("refresh at a 20ms interval: %v, want 6 intervals", r)
	}
	bySecond := func(now time.Time) int64 { return int64(now.Sub(t0) / time.Second) }
	spaced := func(t *testing.T, ws []time.Time) {
		t.Helper()
		for i := 1; i < len(ws); i++ {
			if d := ws[i].Sub(ws[i-1]); d < interval {
				t.Fatalf("writes %v apart (at %v and %v), less than the interval %v", d, ws[i-1].Sub(t0), ws[i].Sub(t0), interval)
			}
		}
	}

	t.Run("following the head", func(t *testing.T) {
		// Head and position move every second for 10 minutes.
		ws := hbSim(newPolicy(), t0, t0.Add(10*time.Minute), tick, bySecond, bySecond, nil)
		spaced(t, ws)
		if len(ws) != 10 { // at start, then each minute
			t.Fatalf("%d writes in 10 minutes following the head, want 10 (one at start, then one a minute)", len(ws))
		}
	})
	t.Run("head stands still", func(t *testing.T) {
		// Producers stop at 5.5 minutes (head 330); the node reads on
		// until it catches up 20 s later.
		stop := t0.Add(330 * time.Second)
		head := func(now time.Time) int64 { return min(bySecond(now), 330) }
		step := func(now time.Time) int64 { return min(bySecond(now)-20, 330) }
		ws := hbSim(newPolicy(), t0, t0.Add(7*time.Minute), tick, step, head, nil)
		spaced(t, ws)
		var first time.Time
		for _, w := range ws {
			if w.After(stop) {
				first = w
				break
			}
		}
		if first.IsZero() || first.Sub(stop) > interval/2+tick {
			t.Fatalf("head still from %v, position moving: first write %v after, want within %v", stop.Sub(t0), first.Sub(stop), interval/2+tick)
		}
		// While the head stands still and the position moves: a write
		// each interval, and none once the position stops.
		after := 0
		for _, w := range ws {
			if w.After(stop.Add(40 * time.Second)) {
				after++
			}
		}
		if after > 2 { // the once-a-minute write of the still position
			t.Fatalf("%d writes after the position stopped, want at most the minute's", after)
		}
	})
	t.Run("idle node", func(t *testing.T) {
		never := func(time.Time) int64 { return -1 }
		ws := hbSim(newPolicy(), t0, t0.Add(5*time.Minute), tick, never, bySecond, nil)
		if len(ws) != 5 {
			t.Fatalf("%d writes in 5 minutes by a node that reads nothing, want 5", len(ws))
		}
	})
	t.Run("failures retried", func(t *testing.T) {
		failUntil := t0.Add(35 * time.Second)
		ws := hbSim(newPolicy(), t0, t0.Add(2*time.Minute), tick, bySecond, bySecond, func(now time.Time) bool { return now.Before(failUntil) })
		spaced(t, ws)
		// Failing: one attempt per interval (0, 10, 20, 30 s), then the
		// one at 40 s succeeds and the next is a minute later.
		want := []time.Duration{0, 10 * time.Second, 20 * time.Second, 30 * time.Second, 40 * time.Second, 100 * time.Second}
		if len(ws) != len(want) {
			t.Fatalf("writes at %v, want at %v", offsets(ws, t0), want)
		}
		for i, w := range ws {
			if w.Sub(t0) != want[i] {
				t.Fatalf("writes at %v, want at %v", offsets(ws, t0), want)
			}
		}
	})
}

func offsets(ws []time.Time, t0 time.Time) []time.Duration {
	out := make([]time.Duration, len(ws))
	for i, w := range ws {
		out[i] = w.Sub(t0)
	}
	return out
}
