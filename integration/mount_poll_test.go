package integration

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lakestream/lakestream/mount"
	"github.com/lakestream/lakestream/txn"
)

// TestMountPollsOnDemand: a mount polls the log only as fast as its
// readers need. With a fast PollInterval and an hour-long
// IdlePollInterval, an idle mount does not poll at all, yet a reader
// blocked on a step that is not committed yet (--wait) gets it: the wait
// itself turns fast polling on, and off again once nobody waits.
func TestMountPollsOnDemand(t *testing.T) {
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 8<<10, 1)
	p.addN(t, 2)
	mnt, info := mntMountInProcess(t, mount.Options{
		Store: url, MetricsAddr: "127.0.0.1:0",
		PollInterval: 20 * time.Millisecond, IdlePollInterval: time.Hour, Wait: 30 * time.Second,
	})
	polls := func() float64 { return scrapeValues(t, info.MetricsAddr)["lakefs_mount_log_polls_total"] }

	// Idle: 50 fast intervals pass without a poll.
	time.Sleep(time.Second)
	if n := polls(); n != 0 {
		t.Fatalf("an idle mount polled %v times in 1s with an hour-long idle interval", n)
	}

	// A reader waits for step 2, which is committed only after it started
	// waiting: it must see it although the idle interval is an hour.
	got := make(chan error, 1)
	go func() {
		_, err := os.ReadDir(filepath.Join(mnt, "steps", "2", "rank-0"))
		got <- err
	}()
	waitFor(t, 10*time.Second, "the reader to wait and polling to start", func() bool { return polls() >= 2 })
	p.addN(t, 1)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("waiting reader: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a reader waiting for step 2 did not see it within 20s of its commit")
	}

	// Nobody waits and nobody reads near the head any more: polling stops
	// (allow the poll in flight and one more before the interval turns).
	before := polls()
	time.Sleep(time.Second)
	if n := polls() - before; n > 2 {
		t.Fatalf("%v polls in the second after the wait ended; want at most 2", n)
	}

	// A read near the head keeps polling fast for a while (a trainer at
	// the head will want the next step soon).
	if _, err := mntReadFile(filepath.Join(mnt, "steps", "2", "rank-0", "sample-00.bin")); err != nil {
		t.Fatal(err)
	}
	before = polls()
	waitFor(t, 10*time.Second, "fast polling after a read at the head", func() bool { return polls() >= before+5 })
}

// TestMountEmptyStreamDates: a stream with no version at all shows an
// empty head and steps/ dated from the stream's creation, not year 1.
func TestMountEmptyStreamDates(t *testing.T) {
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	mnt, _ := mntMountInProcess(t, mount.Options{Store: url})
	for _, name := range []string{"head", "steps", "."} {
		fi, err := os.Stat(filepath.Join(mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(l.Config.CreatedAt) {
			t.Fatalf("%s of an empty stream: mtime %v, want the stream's creation %v", name, fi.ModTime(), l.Config.CreatedAt)
		}
	}
}

// TestMountOpenFileOutlivesReclaim: a file opened before its step is
// reclaimed keeps reading its bytes (the objects stay for the grace
// period), while the step leaves the view for new lookups.
func TestMountOpenFileOutlivesReclaim(t *testing.T) {
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 300<<10, 9)
	p.addN(t, 4)
	mnt, _ := mntMountInProcess(t, mount.Options{Store: url, PrefetchSteps: 0, IdlePollInterval: 50 * time.Millisecond})
	path := filepath.Join(mnt, "steps", "0", "rank-1", "sample-00.bin")
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := t.Context()
	for _, s := range []int64{1, 2} {
		if _, err := txn.RecordCheckpoint(ctx, l, s, testLogger(t, slog.LevelInfo)); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := txn.GC(ctx, l, txn.GCOptions{Grace: 10 * time.Minute, Force: true, Logger: testLogger(t, slog.LevelInfo)})
	if err != nil || rep.ReclaimedBelow != 2 {
		t.Fatalf("gc: %+v, %v; want steps below 2 reclaimed", rep, err)
	}
	waitFor(t, 10*time.Second, "step 0 to leave the view", func() bool {
		_, err := os.Stat(filepath.Join(mnt, "steps", "0"))
		return os.IsNotExist(err)
	})
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatalf("reading a file opened before its step was reclaimed: %v", err)
	}
	if _, err := mntCheckContent(b, 1, "sample-00.bin"); err != nil {
		t.Fatal(err)
	}
}

// TestMountWaitingAtHeadIsAtHead: a node whose reader waits for the step
// after the head (a trainer restarted at the head) reports the head as its
// position although it has served nothing, so producers held by
// --max-lead go on and commit the step it waits for (a restarted mount
// used to count as "read nothing" and hold them back forever).
func TestMountWaitingAtHeadIsAtHead(t *testing.T) {
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10})
	p := mntNewProducer(t, l, "p1", 8<<10, 4)
	p.addN(t, 3)
	mnt, _ := mntMountInProcess(t, mount.Options{Store: url, Wait: 30 * time.Second, HeartbeatInterval: 50 * time.Millisecond})
	got := make(chan error, 1)
	go func() {
		_, err := os.ReadDir(filepath.Join(mnt, "steps", "3"))
		got <- err
	}()
	waitFor(t, 10*time.Second, "the waiting node's heartbeat at step 2", func() bool {
		cons, err := txn.Consumers(t.Context(), l.Store)
		return err == nil && len(cons) == 1 && cons[0].Step != nil && *cons[0].Step == 2
	})
	p.addN(t, 1)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// TestMountStopDeletesHeartbeat: a mount that stops cleanly deletes its
// heartbeat, so gc and --max-lead producers stop waiting for it at once
// instead of for txn.ConsumerTimeout (issue 32 item 12).
func TestMountStopDeletesHeartbeat(t *testing.T) {
	url, _ := mntFileURL(t)
	l := newStream(t, url, txn.CreateOptions{Ranks: 1, ChunkSize: 64 << 10, SnapshotEvery: 10})
	mntNewProducer(t, l, "p1", 8<<10, 4).addN(t, 2)
	mnt, _, stop := mntRun(t, mount.Options{Store: url, NodeID: "hb-node", PollInterval: 20 * time.Millisecond, HeartbeatInterval: 50 * time.Millisecond})
	if _, err := mntReadFile(filepath.Join(mnt, "steps", "1", "rank-0", "sample-00.bin")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the heartbeat at step 1", func() bool {
		cons, err := txn.Consumers(t.Context(), l.Store)
		return err == nil && len(cons) == 1 && cons[0].Step != nil && *cons[0].Step == 1
	})
	stop()
	if cons, err := txn.Consumers(t.Context(), l.Store); err != nil || len(cons) != 0 {
		t.Fatalf("after a clean stop: consumers %+v, %v; want none", cons, err)
	}
}
