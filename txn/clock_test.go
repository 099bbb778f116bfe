package txn_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
	"github.com/lakestream/lakestream/txn/txntest"
)

// skewWorld is a test's time: "true" time is the wall clock moved on by
// advance, and the store and every process read it through a clock of
// their own, a fixed offset off it (a machine whose clock is wrong).
type skewWorld struct{ adv atomic.Int64 }

func (w *skewWorld) clock(off time.Duration) func() time.Time {
	return func() time.Time { return time.Now().Add(time.Duration(w.adv.Load()) + off) }
}

func (w *skewWorld) advance(d time.Duration) { w.adv.Add(int64(d)) }

// measured is a process's store clock: its local clock off true time by
// off, measured against s.
func (w *skewWorld) measured(t *testing.T, s store.Store, off time.Duration) *store.Clock {
	t.Helper()
	c := store.NewClock(s, w.clock(off), quietLogger())
	if err := c.Measure(t.Context()); err != nil {
		t.Fatal(err)
	}
	return c
}

// skewGCs are gc processes whose clocks are minutes ahead of and behind
// the store's, each measured against it.
func skewGCs(t *testing.T, w *skewWorld, s store.Store) map[string]*store.Clock {
	return map[string]*store.Clock{
		"gc 10m ahead": w.measured(t, s, 10*time.Minute),
		"gc 7m behind": w.measured(t, s, -7*time.Minute),
	}
}

// gcOn runs gc with clk as the log's clock (GC takes the log's by default).
func gcOn(t *testing.T, l *txn.Log, clk func() time.Time, dry bool) *txn.GCReport {
	t.Helper()
	return gcRun(t, &txn.Log{Store: l.Store, Config: l.Config, Now: clk}, txn.GCOptions{Grace: gcGrace, DryRun: dry, Logger: quietLogger()})
}

// beatAt writes node's heartbeat at step with the time its own clock
// reads, unmeasured: the worst a mount can write.
func beatAt(t *testing.T, s store.Store, node string, step int64, clock func() time.Time) {
	t.Helper()
	b, _ := json.Marshal(txn.Heartbeat{NodeID: node, Step: &step, Time: clock()})
	if err := store.PutBytes(t.Context(), s, txn.HeartbeatKey(node), b); err != nil {
		t.Fatal(err)
	}
}

// TestGCClockSkewConsumers (issue 45): heartbeats are aged by the store's
// clock, whatever the clocks of the mounts and of gc say. A live reader
// whose clock is 10 minutes behind holds gc at its step, for a gc 10
// minutes ahead as for one 7 minutes behind (before, the gc ahead took
// its heartbeat for 20 minutes old and reclaimed under it). A reader
// whose clock was 10 minutes ahead and that died holds gc for
// ConsumerTimeout of the store's time, then no more (before, a gc behind
// it counted it live for 17 minutes more).
func TestGCClockSkewConsumers(t *testing.T) {
	w := &skewWorld{}
	s := store.NewMemClock(w.clock(time.Minute))
	l := newLog(t, s, txn.CreateOptions{Ranks: 1, RetainCheckpoints: 1})
	gcProduce(t, l, "p", 20)
	gcCheckpoints(t, l, 15) // allows reclaiming below 16
	behind, ahead := w.clock(-10*time.Minute), w.clock(10*time.Minute)
	reader, dead := txn.ConsumerHold{Node: "reader", Step: 5}, txn.ConsumerHold{Node: "dead", Step: 8}
	beatAt(t, s, reader.Node, reader.Step, behind)
	beatAt(t, s, dead.Node, dead.Step, ahead)
	gcs := skewGCs(t, w, s)
	held := func(what string, want ...txn.ConsumerHold) {
		t.Helper()
		for name, clk := range gcs {
			rep := gcOn(t, l, clk.Now, true)
			if !slices.Equal(rep.HeldBy, want) || rep.ReclaimedBelow != 5 {
				t.Errorf("%s, %s: held by %v, reclaiming below %d; want held by %v, below 5", what, name, rep.HeldBy, rep.ReclaimedBelow, want)
			}
		}
	}
	held("both fresh", reader, dead)
	w.advance(txn.ConsumerTimeout - 10*time.Second)
	beatAt(t, s, reader.Node, reader.Step, behind)
	held("the dead reader silent for just under the timeout", reader, dead)
	w.advance(20 * time.Second)
	beatAt(t, s, reader.Node, reader.Step, behind)
	held("the dead reader silent for longer than the timeout", reader)
	if rep := gcOn(t, l, gcs["gc 10m ahead"].Now, false); rep.ReclaimedBelow != 5 {
		t.Fatalf("gc reclaimed below %d, want 5", rep.ReclaimedBelow)
	}
	if st := txntest.Load(t, l); st.LiveFrom != 5 {
		t.Fatalf("live from %d, want 5: the live reader's step stays", st.LiveFrom)
	}
}

// TestGCClockSkewGrace (issue 45): reclaimed packs, orphans and probe
// leftovers wait the grace period and log objects the log retention, by
// the store's clock, for gc processes minutes ahead of it and behind it,
// and whatever time the reclamation record carries: one committed by a gc
// whose clock was 15 minutes behind and never measured (an older build)
// does not make its packs go early (before: at once), and a gc behind the
// store does not keep them for its skew longer.
func TestGCClockSkewGrace(t *testing.T) {
	ctx := t.Context()
	w := &skewWorld{}
	s := store.NewMemClock(w.clock(time.Minute))
	l := newLog(t, s, txn.CreateOptions{Ranks: 1, RetainCheckpoints: 1, SnapshotEvery: 10})
	txntest.Produce(t, l, txn.ProducerOptions{ID: "p", Solo: true}, batchesFor("p", 1, 30, 1)...) // one version each
	gcCheckpoints(t, l, 15)
	if rep := gcOn(t, l, w.clock(-15*time.Minute), false); rep.ReclaimedBelow != 16 {
		t.Fatalf("reclaimed below %d, want 16", rep.ReclaimedBelow)
	}
	reclaimed := gcPendingKeys(txntest.Load(t, l))
	orphan, probe := "data/ghost/1/1/rank-0.pack", store.ProbePrefix+"0123456789abcdef"
	for _, k := range []string{orphan, probe} {
		if err := store.PutBytes(ctx, s, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	gcs := skewGCs(t, w, s)
	check := func(what string, data, orphans, probes []string, logDeleted bool) {
		t.Helper()
		for name, clk := range gcs {
			rep := gcOn(t, l, clk.Now, true)
			if !gcSameSet(rep.DataDeleted, data) || !gcSameSet(rep.Orphans, orphans) || !gcSameSet(rep.Probes, probes) || (rep.LogDeletedCount > 0) != logDeleted {
				t.Errorf("%s, %s: would delete %d reclaimed packs, orphans %v, probes %v, %d log objects; want %d, %v, %v, log objects %v",
					what, name, len(rep.DataDeleted), rep.Orphans, rep.Probes, rep.LogDeletedCount, len(data), orphans, probes, logDeleted)
			}
		}
	}
	check("at once", nil, nil, nil, false)
	w.advance(gcGrace - time.Minute)
	check("a minute before the grace period ends", nil, nil, nil, false)
	w.advance(2 * time.Minute)
	all := []string{orphan}
	check("a minute after it", reclaimed, all, []string{probe}, false)
	gcOn(t, l, gcs["gc 7m behind"].Now, false)
	w.advance(txn.LogRetention - gcGrace - 3*time.Minute)
	check("two minutes before the log retention ends", nil, nil, nil, false)
	w.advance(4 * time.Minute)
	check("two minutes after it", nil, nil, nil, true)
	gcCheck(t, l)
}

// TestGCRefusesUnmeasuredClock (issue 55 item 2): a gc on a machine an
// hour ahead whose store clock could not be measured (its probe write
// fails) reclaims nothing and deletes nothing: by its own clock a consumer
// that heartbeated a second ago at step 1 looks an hour dead. It says why
// (store.ErrClockUnmeasured, the probe's cause), and status says its
// consumers' liveness is by this machine's clock. Once the clock is
// measured, gc holds at the live consumer's step. Before, it reclaimed
// below step 5 under the reader, exit 0, with the record stamped an hour
// in the future.
func TestGCRefusesUnmeasuredClock(t *testing.T) {
	ctx := t.Context()
	w := &skewWorld{}
	mem := store.NewMemClock(w.clock(0))
	l := newLog(t, mem, txn.CreateOptions{Ranks: 1, RetainCheckpoints: 1})
	gcProduce(t, l, "p", 8)
	gcCheckpoints(t, l, 4) // allows reclaiming below 5
	beatAt(t, mem, "reader", 1, w.clock(0))

	faulty := store.NewFaulty(mem, 1)
	faulty.Set(store.Fault{ErrRate: 1}, store.OpPut) // the probe write fails; nothing else
	ahead := &txn.Log{Store: faulty, Config: l.Config}
	clk := ahead.UseStoreClock(ctx, time.Hour, quietLogger())
	before := txntest.Load(t, l).Version

	for _, dry := range []bool{true, false} {
		rep, err := txn.GC(ctx, ahead, txn.GCOptions{Grace: gcGrace, DryRun: dry, Logger: quietLogger()})
		if !errors.Is(err, store.ErrClockUnmeasured) || !errors.Is(err, store.ErrInjected) || rep != nil {
			t.Fatalf("gc (dry run %v) by an unmeasured clock: report %v, err %v; want a refusal naming the probe's failure", dry, rep, err)
		}
	}
	if st := txntest.Load(t, l); st.LiveFrom != 0 || st.Version != before {
		t.Fatalf("live from %d, version %d after a refused gc; want 0 and %d", st.LiveFrom, st.Version, before)
	}
	rep, err := txn.StreamStatus(ctx, ahead)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rep.ClockUnmeasured, "injected") {
		t.Fatalf("status's clock_unmeasured %q does not say why", rep.ClockUnmeasured)
	}

	faulty.Set(store.Fault{}, store.OpPut)
	if err := clk.Measure(ctx); err != nil {
		t.Fatal(err)
	}
	rep2, err := txn.GC(ctx, ahead, txn.GCOptions{Grace: gcGrace, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if rep2.ReclaimedBelow != 1 || len(rep2.HeldBy) != 1 || rep2.HeldBy[0].Node != "reader" {
		t.Fatalf("measured gc reclaimed below %d, held by %v; want below 1, held by the reader", rep2.ReclaimedBelow, rep2.HeldBy)
	}
	if rep, _ := txn.StreamStatus(ctx, ahead); rep.ClockUnmeasured != "" {
		t.Fatalf("status still says the clock is unmeasured: %s", rep.ClockUnmeasured)
	}
}
