package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/stage"
	"github.com/lakestream/lakestream/txn"
)

// Liveness under store outages (docs/RELIABILITY.md, Liveness): a producer
// waits for its store instead of exiting into a supervisor's restart loop,
// and a hung consumer holds producers back no longer than its heartbeat's
// staleness limit.

// TestProduceWaitsForStore: `lakefs-produce run` started while its store
// server (versitygw, fake-gcs-server, Azurite) is down waits for it (one line per attempt, the gauge at 1) and
// commits once it is back; an outage while it runs leaves the batches
// staged until the server returns, then each is committed exactly once.
// `--once` and `--start-timeout` still fail fast, with one line.
func TestProduceWaitsForStore(t *testing.T) {
	bin, _ := prdBins(t)
	forEachServer(t, true, func(t *testing.T, srv storeServer) { prdWaitsForStore(t, bin, srv) })
}

func prdWaitsForStore(t *testing.T, bin string, srv storeServer) {
	url := srv.NewBucketURL(t)
	prdMust(t, bin, "init", "--store", url, "--ranks", "2")
	_, staging, _ := prdStaging(t)
	srv.Stop(syscall.SIGKILL)

	// Scripts: fail fast.
	prdStageSmall(t, staging, "b001")
	_, stderr, code := prdExec(t, bin, "run", "--once", "--store", url, "--staging", staging, "--producer-id", "w")
	if code != 1 || !strings.Contains(stderr, "cannot reach") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("run --once with the store down: exit %d, stderr %q; want exit 1 and one line saying it cannot reach the store", code, stderr)
	}
	began := time.Now()
	_, stderr, code = prdExec(t, bin, "run", "--start-timeout", "2s", "--store", url, "--staging", staging, "--producer-id", "w")
	last := lastLine(stderr)
	if code != 1 || !strings.Contains(last, "--start-timeout") || !strings.Contains(last, "cannot reach") {
		t.Fatalf("run --start-timeout 2s with the store down: exit %d, last line %q; want exit 1 naming the timeout and the cause", code, last)
	}
	if took := time.Since(began); took > time.Minute {
		t.Fatalf("run --start-timeout 2s took %s to give up", took)
	}

	// A daemon: waits.
	addr := freeAddr(t)
	p, err := prdStart(bin, url, staging, "w", "--metrics-addr", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.kill()
	waitFor(t, time.Minute, "two attempts logged while the store is down", func() bool {
		return strings.Count(p.stderr.String(), "store not reachable; waiting for it") >= 2 || p.exited()
	})
	if p.exited() {
		t.Fatalf("run exited %d while the store was down:\n%s", p.code(), p.tail())
	}
	if v := scrapeValues(t, addr)["lakefs_produce_store_waiting"]; v != 1 {
		t.Errorf("lakefs_produce_store_waiting = %v while waiting; want 1", v)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	prdWaitStaged(t, p, staging, "b001")
	if v := scrapeValues(t, addr)["lakefs_produce_store_waiting"]; v != 0 {
		t.Errorf("lakefs_produce_store_waiting = %v once committing; want 0", v)
	}

	// An outage while it runs: the batches wait staged, then commit.
	srv.Stop(syscall.SIGKILL)
	prdStageSmall(t, staging, "b002")
	prdStageSmall(t, staging, "b003")
	// It waits inside the upload (retrying) or between passes (the batch
	// stays staged), depending on where the outage finds it.
	waitFor(t, time.Minute, "the run noticing the outage", func() bool {
		out := p.stderr.String()
		return strings.Contains(out, "upload failed; retrying") || strings.Contains(out, "waiting for the store") || p.exited()
	})
	if p.exited() {
		t.Fatalf("run exited %d during the outage:\n%s", p.code(), p.tail())
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	prdWaitStaged(t, p, staging, "b002", "b003")
	_, l := prdOpen(t, url)
	st := prdLoad(t, l)
	var got []string
	for _, tgb := range st.Steps {
		got = append(got, tgb.Batch)
	}
	if strings.Join(got, ",") != "b001,b002,b003" {
		t.Fatalf("steps hold batches %v; want b001,b002,b003, each once, in order", got)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-p.done
	if p.code() != 0 {
		t.Fatalf("run exited %d on SIGINT:\n%s", p.code(), p.tail())
	}
}

// TestBackPressureHungConsumer: a producer with --max-lead is held by a
// node that reads slowly, and when that node hangs (SIGSTOP: its
// heartbeat stops), the producer stays held only while the heartbeat is
// younger than the staleness limit, then goes on; the node, resumed, reads
// on. The limit is shortened here (8 s; production: txn.ConsumerTimeout).
func TestBackPressureHungConsumer(t *testing.T) {
	mntRequireFUSE(t)
	bin := mntBuildMount(t)
	url, _ := mntFileURL(t)
	const (
		node    = "hung-node"
		maxLead = 2
		staged  = 6
		stale   = 8 * time.Second
	)
	files := []ptFile{{"a.bin", 64 << 10}}
	l := ptProduce(t, url, txn.CreateOptions{Ranks: 1}, 4, files)
	m := ptStart(t, bin, url, "--passthrough", "off", "--node-id", node, "--heartbeat-interval", "50ms",
		"--poll-interval", "20ms", "--wait", "60s")
	if err := ptCheckFile(ptPath(m.mnt, 3, 0, "a.bin"), 0, "a.bin", ptBatch(3)); err != nil {
		t.Fatal(err)
	}
	ptConsumerAt(t, l, node, 3)
	if err := m.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = m.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()
	heard := prdHeartbeatTime(t, l, node)

	staging := t.TempDir()
	for i := range staged {
		prdStageSized(t, staging, fmt.Sprintf("c%06d", i), 1, 4096)
	}
	tree, err := stage.Open(staging)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(ctx, stage.RunOptions{Store: l.Store, Log: l, Tree: tree, ProducerID: "held",
			MaxLead: maxLead, ConsumerTimeout: stale, Poll: 20 * time.Millisecond, Logger: testLogger(t, slog.LevelWarn)})
	}()
	defer func() { cancel(); <-done }()

	// Held: no step past 3+maxLead while the hung node's heartbeat is
	// younger than the limit (a second of slack for the clock reads).
	last := int64(3 + staged)
	deadline := time.Now().Add(stale + 2*time.Minute) // liveness, not a benchmark
	for {
		head := prdLoad(t, l).NextStep() - 1
		if head > 3+maxLead && time.Since(heard) < stale-time.Second {
			t.Fatalf("head %d with the hung node at 3 and its heartbeat %s old: past --max-lead %d before the heartbeat went stale (%s)",
				head, time.Since(heard).Round(time.Millisecond), maxLead, stale)
		}
		if head == last {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("head %d after %s: the producer stayed held by a node hung for longer than the staleness limit %s",
				head, time.Since(heard).Round(time.Second), stale)
		}
		time.Sleep(50 * time.Millisecond)
	}
	resume()
	if err := ptCheckFile(ptPath(m.mnt, last, 0, "a.bin"), 0, "a.bin", fmt.Sprintf("c%06d", staged-1)); err != nil {
		t.Fatalf("the resumed node reading the newest step: %v", err)
	}
}

// prdStageSmall stages a sealed two-rank batch of one small file a rank.
func prdStageSmall(t *testing.T, staging, name string) {
	t.Helper()
	prdStageSized(t, staging, name, 2, 1000)
}

// prdStageSized stages a sealed batch of ranks ranks, each holding a.bin
// of size bytes with mntContent's bytes.
func prdStageSized(t *testing.T, staging, name string, ranks, size int) {
	t.Helper()
	for r := range ranks {
		p := filepath.Join(staging, name, "rank-"+strconv.Itoa(r), "a.bin")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, mntContent(name, r, "a.bin", size), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(staging, name, stage.Sealed), nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// prdWaitStaged waits until run has committed and removed the named
// batches (it must not exit meanwhile).
func prdWaitStaged(t *testing.T, p *prdProc, staging string, names ...string) {
	t.Helper()
	waitFor(t, 2*time.Minute, fmt.Sprintf("batches %v committed and removed", names), func() bool {
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(staging, n)); err == nil {
				return p.exited()
			}
		}
		return true
	})
	if p.exited() {
		t.Fatalf("run exited %d:\n%s", p.code(), p.tail())
	}
}

// prdHeartbeatTime is the time of node's heartbeat.
func prdHeartbeatTime(t *testing.T, l *txn.Log, node string) time.Time {
	t.Helper()
	cons, err := txn.Consumers(t.Context(), l.Store)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range cons {
		if h.NodeID == node {
			return h.Time
		}
	}
	t.Fatalf("no heartbeat of %s", node)
	return time.Time{}
}
