package store

import (
	"errors"
	"sync"
	"testing"
	"time"
)

// TestGroupSync: concurrent publishes into one directory share fsyncs,
// and every caller returns only after an fsync that started after it
// called (what makes its link durable); an fsync's error reaches exactly
// the callers it covered.
func TestGroupSync(t *testing.T) {
	type span struct{ start, end time.Time }
	var mu sync.Mutex
	var syncs []span
	fail := false
	g := &groupSync{dirs: map[string]*dirSync{}, fsync: func(string) error {
		s := span{start: time.Now()}
		time.Sleep(20 * time.Millisecond)
		s.end = time.Now()
		mu.Lock()
		defer mu.Unlock()
		syncs = append(syncs, s)
		if fail {
			return errors.New("disk on fire")
		}
		return nil
	}}
	const callers = 32
	calls := make([]span, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			// Spread the arrivals over about three fsyncs.
			time.Sleep(time.Duration(i) * 2 * time.Millisecond)
			calls[i].start = time.Now()
			if err := g.sync("d"); err != nil {
				t.Errorf("caller %d: %v", i, err)
			}
			calls[i].end = time.Now()
		})
	}
	wg.Wait()
	if len(syncs) >= callers/2 {
		t.Errorf("%d callers made %d fsyncs; concurrent callers should share them", callers, len(syncs))
	}
	for i, c := range calls {
		covered := false
		for _, s := range syncs {
			if !s.start.Before(c.start) && !s.end.After(c.end) {
				covered = true
			}
		}
		if !covered {
			t.Errorf("caller %d returned without an fsync that started after it called", i)
		}
	}
	if len(g.dirs) != 0 {
		t.Errorf("%d directory entries left after every caller returned", len(g.dirs))
	}
	fail = true // no caller is running: no race on it
	if err := g.sync("d"); err == nil {
		t.Error("a failed fsync was not reported to its caller")
	}
}
