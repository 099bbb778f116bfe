package txn_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestContentionNoStarvation: 32 producers with the combining commit
// append concurrently to one stream. Every TGB becomes exactly one step, in
// its producer's order, steps contiguous from FirstStep; and every producer
// gets all its TGBs committed, none waiting unboundedly. The wait bound is
// deliberately loose (the machine is shared): the point is that nobody
// waits forever, not how fast commits are.
func TestContentionNoStarvation(t *testing.T) {
	const (
		producers   = 32
		perProducer = 40
		firstStep   = 500
		maxWait     = 60 * time.Second
	)
	s := store.NewMem()
	l := newLog(t, s, txn.CreateOptions{Ranks: 2, FirstStep: firstStep, ChunkSize: 4096, SnapshotEvery: 64})
	ctx := t.Context()

	var wg sync.WaitGroup
	results := make([]*contender, producers)
	want := map[string]uint64{}
	for i := range producers {
		c := &contender{id: fmt.Sprintf("prod-%02d", i)}
		results[i] = c
		want[c.id] = perProducer
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.err = c.run(ctx, l, perProducer)
		}()
	}
	wg.Wait()

	var versions, attempts, tgbs int
	var worst time.Duration
	for _, c := range results {
		if c.err != nil {
			t.Fatalf("%s: %v", c.id, c.err)
		}
		if c.committed != perProducer {
			t.Errorf("%s: observed %d committed TGBs, want %d", c.id, c.committed, perProducer)
		}
		if c.maxWait > maxWait {
			t.Errorf("%s: a TGB waited %v from Append to its commit (bound %v): starved", c.id, c.maxWait, maxWait)
		}
		if c.badStats != "" {
			t.Errorf("%s: %s", c.id, c.badStats)
		}
		versions += c.versions
		attempts += c.attempts
		tgbs += c.carried
		worst = max(worst, c.maxWait)
	}
	st := checkLog(t, s, want)
	if st.LiveFrom != firstStep {
		t.Fatalf("live from %d, want first step %d", st.LiveFrom, firstStep)
	}
	if head, ok := st.Head(); !ok || head != firstStep+producers*perProducer-1 {
		t.Fatalf("head %d (ok %v), want %d", head, ok, firstStep+producers*perProducer-1)
	}
	t.Logf("%d producers x %d TGBs: %d versions carried them (%.2f TGBs/version), %.2f attempts/version, longest wait %v",
		producers, perProducer, versions, float64(tgbs)/float64(versions), float64(attempts)/float64(versions), worst.Round(time.Millisecond))
}

// contender is one producer of TestContentionNoStarvation and what its
// Observe hook saw.
type contender struct {
	id  string
	err error

	mu        sync.Mutex
	appended  []time.Time // GUARDED_BY(mu): when Append of seq i+1 was called
	committed int         // GUARDED_BY(mu): TGBs seen committed, in seq order
	versions  int         // GUARDED_BY(mu)
	attempts  int         // GUARDED_BY(mu)
	carried   int         // GUARDED_BY(mu): TGBs of anyone in the versions it created
	maxWait   time.Duration
	badStats  string // GUARDED_BY(mu): first inconsistent CommitStats
}

// observe runs on the committer goroutine. Versions commit TGBs in seq
// order, so the i-th TGB it sees is seq i.
func (c *contender) observe(cs txn.CommitStats) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cs.Created {
		c.versions++
		c.attempts += cs.Attempts
		c.carried += cs.VersionTGBs
	}
	if c.badStats == "" && ((cs.Created && (cs.Attempts < 1 || cs.VersionTGBs < 1)) || len(cs.Uploaded) != cs.TGBs) {
		c.badStats = fmt.Sprintf("commit stats %+v", cs)
	}
	for _, up := range cs.Uploaded {
		if c.committed >= len(c.appended) {
			c.badStats = fmt.Sprintf("a commit reports more TGBs (%d) than were appended (%d)", c.committed+1, len(c.appended))
			return
		}
		if c.badStats == "" && (up.Before(c.appended[c.committed]) || cs.Committed.Before(up)) {
			c.badStats = fmt.Sprintf("seq %d: appended %v, uploaded %v, committed %v: out of order",
				c.committed+1, c.appended[c.committed], up, cs.Committed)
		}
		c.maxWait = max(c.maxWait, cs.Committed.Sub(c.appended[c.committed]))
		c.committed++
	}
}

func (c *contender) run(ctx context.Context, l *txn.Log, n int) error {
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: c.id, Logger: quietLogger(), Observe: c.observe})
	if err != nil {
		return err
	}
	for seq := uint64(1); seq <= uint64(n); seq++ {
		c.mu.Lock()
		c.appended = append(c.appended, time.Now())
		c.mu.Unlock()
		pd, err := p.Append(ctx, batchFor(c.id, seq, l.Config.Ranks))
		if err != nil {
			return fmt.Errorf("append %d: %w", seq, err)
		}
		if pd.Seq != seq {
			return fmt.Errorf("append %d got seq %d", seq, pd.Seq)
		}
	}
	// Close flushes: every TGB is committed (or the error says why not).
	return p.Close(ctx)
}
