package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// TestGCUnmeasuredClock (issue 55 item 2), real processes on file:// and
// versitygw: a mount reads step 1 and heartbeats; checkpoints allow
// reclaiming below step 5. gc runs on a machine an hour ahead whose probe
// of the store's clock fails (an object named _probe leaves no key under
// _probe/). By its own clock the reader's fresh heartbeat is an hour old:
// before, gc reclaimed below step 5 under the reader, exit 0, no warning.
// Now it refuses, exit 1, in one line saying why, and reclaims nothing;
// status says the clock is unmeasured. Once the probe can be written, gc
// (still an hour ahead) measures the store's clock and holds at the
// reader's step.
func TestGCUnmeasuredClock(t *testing.T) {
	mntRequireFUSE(t)
	produce, _ := prdBins(t)
	mountBin := mntBuildMount(t)
	for name, newURL := range skewStores() {
		t.Run(name, func(t *testing.T) {
			ctx := t.Context()
			c := &skewRun{produce: produce, mount: mountBin, url: newURL(t)}
			c.l = newStream(t, c.url, txn.CreateOptions{Ranks: 2, ChunkSize: 64 << 10, SnapshotEvery: 10, RetainCheckpoints: 1})
			c.p = mntNewProducer(t, c.l, "p1", 100<<10, 1)
			c.p.addN(t, 8)
			mnt := t.TempDir()
			c.startMount(t, "reader", "0s", mnt)
			c.readStep(t, mnt, 1)
			waitFor(t, 10*time.Second, "the reader's heartbeat at step 1", func() bool {
				hb, err := txn.ReadHeartbeat(ctx, c.l.Store, "reader")
				return err == nil && hb.Step != nil && *hb.Step == 1
			})
			prdMust(t, produce, "checkpoint", "--store", c.url, "--step", "4")

			blocker := strings.TrimSuffix(store.ProbePrefix, "/")
			if err := store.PutBytes(ctx, c.l.Store, blocker, []byte("no probe can be written under me\n")); err != nil {
				t.Fatal(err)
			}
			stdout, stderr, code := prdExec(t, produce, "gc", "--store", c.url, "--clock-offset", "1h", "--grace", "0s")
			if code != 1 || !strings.Contains(stderr, "clock is not measured") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Fatalf("gc by an unmeasured clock: exit %d, stderr %q; want exit 1 and one line saying the clock is not measured", code, stderr)
			}
			if strings.Contains(stdout, "reclaimed") {
				t.Fatalf("gc by an unmeasured clock reported %q", stdout)
			}
			if st := prdLoad(t, c.l); st.LiveFrom != 0 {
				t.Fatalf("live from step %d after a refused gc; the reader at step 1 lost its steps", st.LiveFrom)
			}
			if out := prdMust(t, produce, "status", "--store", c.url, "--clock-offset", "1h"); !strings.Contains(out, "not measured") {
				t.Fatalf("status by an unmeasured clock does not say so:\n%s", out)
			}

			if err := c.l.Store.Delete(ctx, blocker); err != nil {
				t.Fatal(err)
			}
			out := prdMust(t, produce, "gc", "--store", c.url, "--clock-offset", "1h", "--grace", "0s")
			if !strings.Contains(out, "held back") || !strings.Contains(out, "reader at step 1") {
				t.Fatalf("gc with its clock measured: %q; want it held back by the reader at step 1", out)
			}
			if st := prdLoad(t, c.l); st.LiveFrom != 1 {
				t.Fatalf("live from step %d, want 1 (the reader's step stays)", st.LiveFrom)
			}
			c.readStep(t, mnt, 1)
		})
	}
}
