package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/stage"
)

// Exactly-once ingestion through real processes (guarantee 3 of
// docs/ARCHITECTURE.md):
// an external writer fills staging trees while `lakefs-produce run`
// processes are killed with SIGKILL at random moments and restarted, or
// run twice under one producer id; afterwards every sealed batch must be
// exactly one step, in order, with the bytes the writer wrote.

// TestProduceKill9ExactlyOnce: four producers on a real S3 server (and
// on the GCS and Azure emulators), each SIGKILLed and restarted over and
// over while a writer process seals 200 batches (60 on an emulator) into
// each one's staging tree.
func TestProduceKill9ExactlyOnce(t *testing.T) {
	bin, writer := prdBins(t)
	forEachServer(t, false, func(t *testing.T, srv storeServer) {
		// The emulators get fewer batches (still dozens of kills each):
		// the long run is versitygw's, in make test-all.
		batches := 200
		if _, ok := srv.(*s3test.Server); !ok || testing.Short() {
			batches = 60
		}
		prdKill9ExactlyOnce(t, bin, writer, srv.NewBucketURL(t), batches)
	})
}

func prdKill9ExactlyOnce(t *testing.T, bin, writer, url string, batches int) {
	const producers = 4
	prdMust(t, bin, "init", "--store", url, "--ranks", "2")

	root := t.TempDir()
	manifest := filepath.Join(root, "manifest.jsonl")
	dirs := map[string]string{}
	for i := range producers {
		id := fmt.Sprintf("p%d", i)
		dirs[id] = filepath.Join(root, "staging-"+id)
		if err := os.Mkdir(dirs[id], 0o755); err != nil {
			t.Fatal(err)
		}
	}

	start := time.Now()
	wctx, cancel := context.WithTimeout(t.Context(), prdCmdTimeout)
	defer cancel()
	wcmd, _, wstderr := prdCommand(wctx, writer, prdWriterArgs(manifest, dirs, 0, batches, "-pause", "40ms", "-seed", "7")...)
	if err := wcmd.Start(); err != nil {
		t.Fatal(err)
	}
	writerDone := make(chan struct{})
	var writerErr error
	go func() {
		writerErr = wcmd.Wait()
		close(writerDone)
	}()

	// Kill and restart each producer until the writer is done and its
	// staging tree holds no sealed batch; the deadline only bounds the
	// chaos (the final --once runs finish the work either way).
	killUntil := time.Now().Add(2 * time.Minute)
	var mu sync.Mutex
	kills := map[string]prdKills{}
	var wg sync.WaitGroup
	for i := range producers {
		id := fmt.Sprintf("p%d", i)
		rng := rand.New(rand.NewPCG(uint64(i), 42))
		wg.Go(func() {
			n := prdChaos(t, bin, url, dirs[id], id, rng, writerDone, killUntil)
			mu.Lock()
			kills[id] = n
			mu.Unlock()
		})
	}
	wg.Wait()
	<-writerDone
	if writerErr != nil {
		t.Fatalf("writer: %v\n%s", writerErr, wstderr)
	}
	chaos := time.Since(start)
	if t.Failed() {
		t.FailNow()
	}

	for id, dir := range dirs {
		prdMust(t, bin, "run", "--store", url, "--staging", dir, "--producer-id", id, "--once", "--progress", "log")
	}

	s, l := prdOpen(t, url)
	want := prdReadManifest(t, manifest)
	if len(want) != producers*batches || len(prdSealedOnly(want)) != len(want) {
		t.Fatalf("the writer recorded %d batches (%d sealed), want %d sealed", len(want), len(prdSealedOnly(want)), producers*batches)
	}
	order := prdCheckCommitted(t, s, prdLoad(t, l), want)
	prdCheckStatus(t, bin, url, int64(producers*batches), order)
	for _, dir := range dirs {
		prdCheckStagingEmpty(t, dir)
	}
	prdMust(t, bin, "verify", "--store", url)

	st := prdGetStatus(t, bin, url)
	for _, p := range st.Producers {
		t.Logf("producer %s: %d SIGKILLs after it registered, %d timed from its start; %d registrations (epoch)", p.ID, kills[p.ID].late, kills[p.ID].early, p.Epoch)
	}
	t.Logf("%d steps in %d versions; chaos phase %s, total %s", st.Live.Count, st.Version, chaos.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	for id, k := range kills {
		if k.late == 0 {
			t.Errorf("producer %s was never killed after it registered: the test did not test crashes", id)
		}
	}
}

// prdKills counts one producer's SIGKILLs: early ones (during start-up
// and registration) and late ones (after it registered: while it lists,
// uploads, commits and removes batches).
type prdKills struct{ early, late int }

// prdChaos runs producer id on dir, killing each incarnation with SIGKILL
// until the writer is done and dir holds no sealed batch (or until the
// deadline). Start-up takes a few hundred milliseconds on a loaded
// machine, so a sleep of 50-700ms from the start would mostly kill
// producers that never registered: one kill in four is timed from the
// start, the others from the "producer registered" log line. A process
// that exits by itself is an error: without --once, run only stops on a
// signal.
func prdChaos(t *testing.T, bin, url, dir, id string, rng *rand.Rand, writerDone <-chan struct{}, until time.Time) prdKills {
	var k prdKills
	ready := make(chan struct{})
	close(ready)
	var started <-chan struct{} = ready
	for round := 0; round < 2000; round++ {
		if time.Now().After(until) {
			t.Logf("producer %s: stopping the kills at the deadline", id)
			return k
		}
		p, err := prdStart(bin, url, dir, id, "--poll", "50ms")
		if err != nil {
			t.Error(err)
			return k
		}
		early := rng.IntN(4) == 0
		from := started
		if !early {
			from = p.stderr.when("producer registered")
		}
		select {
		case <-p.done:
			t.Errorf("producer %s exited by itself (status %d, %v); stderr:\n%s", id, p.code(), p.err, p.tail())
			return k
		case <-from:
		case <-time.After(time.Minute):
			t.Errorf("producer %s did not register in a minute; stderr:\n%s", id, p.tail())
			p.kill()
			return k
		}
		select {
		case <-p.done:
			t.Errorf("producer %s exited by itself (status %d, %v); stderr:\n%s", id, p.code(), p.err, p.tail())
			return k
		case <-time.After(50*time.Millisecond + time.Duration(rng.Int64N(int64(650*time.Millisecond)))):
		}
		p.kill()
		if early {
			k.early++
		} else {
			k.late++
		}
		select {
		case <-writerDone:
			left, err := prdSealed(dir)
			if err != nil {
				t.Error(err)
				return k
			}
			if len(left) == 0 {
				return k
			}
		default:
		}
	}
	return k
}

// TestProduceUnsealedUntouched: `run --once` commits the sealed batches
// around an unsealed one and leaves the unsealed one byte-identical in
// place, also once its name is below the producer's cursor; a batch sealed
// later with a name above the cursor is committed by the next run.
func TestProduceUnsealedUntouched(t *testing.T) {
	bin, writer := prdBins(t)
	url, _ := mntFileURL(t)
	prdMust(t, bin, "init", "--store", url, "--ranks", "2")
	_, staging, manifest := prdStaging(t)
	// b000002 (between sealed ones) and b000005 (the newest) stay unsealed.
	prdWrite(t, writer, manifest, map[string]string{"p": staging}, 0, 6, "-unsealed", "2,5")
	b2, b5 := filepath.Join(staging, "b000002"), filepath.Join(staging, "b000005")
	sum2, sum5 := prdTreeSum(t, b2), prdTreeSum(t, b5)

	run := func() {
		t.Helper()
		prdMust(t, bin, "run", "--store", url, "--staging", staging, "--producer-id", "p", "--once", "--progress", "log")
	}
	run()
	all := prdReadManifest(t, manifest)
	want := prdSealedOnly(all)
	if len(want) != 4 {
		t.Fatalf("the writer sealed %d batches, want 4", len(want))
	}
	s, l := prdOpen(t, url)
	prdCheckCommitted(t, s, prdLoad(t, l), want)
	prdCheckUntouched(t, b2, sum2)
	prdCheckUntouched(t, b5, sum5)
	left, err := os.ReadDir(staging)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range left {
		if e.Name() != stage.LockFile {
			names = append(names, e.Name())
		}
	}
	if len(names) != 2 {
		t.Fatalf("staging holds %v, want only the unsealed b000002 and b000005 (and the lock file)", names)
	}

	// Sealing b000005 (above the cursor b000004) gets it committed; the
	// unsealed b000002, now below the cursor, is still not touched.
	if err := os.WriteFile(filepath.Join(b5, "_SEALED"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	run()
	want[prdKey("p", "b000005")] = all[prdKey("p", "b000005")]
	order := prdCheckCommitted(t, s, prdLoad(t, l), want)
	if got := strings.Join(order["p"], " "); got != "b000000 b000001 b000003 b000004 b000005" {
		t.Errorf("committed batches %s", got)
	}
	prdCheckUntouched(t, b2, sum2)
	if _, err := os.Lstat(b5); !os.IsNotExist(err) {
		t.Errorf("committed batch b000005 still in staging (%v)", err)
	}
	prdMust(t, bin, "verify", "--store", url)
}

// prdCheckUntouched fails unless the tree at dir is still exactly sum.
func prdCheckUntouched(t testing.TB, dir string, sum map[string]string) {
	t.Helper()
	got := prdTreeSum(t, dir)
	for k, v := range sum {
		if got[k] != v {
			t.Errorf("unsealed batch %s: %s changed: %q, was %q", filepath.Base(dir), k, got[k], v)
		}
	}
	for k := range got {
		if _, ok := sum[k]; !ok {
			t.Errorf("unsealed batch %s: %s appeared", filepath.Base(dir), k)
		}
	}
}

// TestProduceSameIDFenced: a second `run` with the same producer id (on its
// own staging tree) registers a new epoch; the first one, trying to commit
// after that, is fenced and exits non-zero; nothing is committed twice and
// every sealed batch ends up committed exactly once.
func TestProduceSameIDFenced(t *testing.T) {
	bin, writer := prdBins(t)
	srv := s3test.Start(t)
	url := srv.NewBucketURL(t)
	prdMust(t, bin, "init", "--store", url, "--ranks", "2")
	root, staging, manifest := prdStaging(t)
	dirs := map[string]string{"dup": staging}
	s, l := prdOpen(t, url)
	seqEpoch := func() (uint64, uint64) {
		st := prdLoad(t, l)
		if p := st.Producers["dup"]; p != nil {
			return p.Seq, p.Epoch
		}
		return 0, 0
	}
	noneSealed := func() bool {
		left, err := prdSealed(staging)
		return err == nil && len(left) == 0
	}

	next := 0
	write := func(n int) {
		t.Helper()
		prdWrite(t, writer, manifest, dirs, next, n, "-seed", "3")
		next += n
	}
	write(10)
	a, err := prdStart(bin, url, staging, "dup", "--poll", "50ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.kill)
	if !within(time.Minute, func() bool { return a.exited() || noneSealed() }) || a.exited() {
		t.Fatalf("producer A did not commit its first batches (exited: %v); stderr:\n%s", a.exited(), a.stderr)
	}
	if !within(time.Minute, func() bool { seq, _ := seqEpoch(); return seq == 10 }) {
		t.Fatal("producer A's batches were removed from staging but not committed")
	}
	_, epochA := seqEpoch()

	// B, the same id on another machine (its own staging directory: a
	// staging directory is locked by its producer), registers a new epoch;
	// batches written after that reach A, which tries to commit them.
	stagingB := filepath.Join(root, "staging-b")
	if err := os.Mkdir(stagingB, 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := prdStart(bin, url, stagingB, "dup", "--poll", "3s")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.kill)
	if !within(time.Minute, func() bool { _, e := seqEpoch(); return e > epochA || b.exited() }) || b.exited() {
		t.Fatalf("producer B did not register (exited: %v)", b.exited())
	}
	for round := 0; round < 100 && !a.exited(); round++ {
		write(2)
		within(300*time.Millisecond, a.exited)
	}
	if !a.exited() {
		t.Fatal("producer A was never fenced: it kept running after B registered")
	}
	<-a.done
	if a.code() == 0 || !strings.Contains(a.stderr.String(), "fenced") {
		t.Errorf("producer A: exit status %d, want non-zero with a line saying it was fenced; stderr:\n%s", a.code(), a.tail())
	}
	t.Logf("producer A (epoch %d): exit %d: %s", epochA, a.code(), lastLine(a.stderr.String()))

	// B stops cleanly on SIGTERM; a producer with A's id and staging
	// directory commits what A left, and new work.
	if b.exited() {
		t.Errorf("producer B exited: %s", b.tail())
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	<-b.done
	if b.code() != 0 {
		t.Errorf("producer B: exit status %d after SIGTERM, want 0; stderr:\n%s", b.code(), b.tail())
	}

	write(7)
	prdMust(t, bin, "run", "--store", url, "--staging", staging, "--producer-id", "dup", "--once", "--progress", "log")

	st := prdLoad(t, l)
	want := prdSealedOnly(prdReadManifest(t, manifest))
	if len(want) != next {
		t.Fatalf("the writer sealed %d batches, want %d", len(want), next)
	}
	order := prdCheckCommitted(t, s, st, want)
	prdCheckStatus(t, bin, url, int64(next), order)
	prdCheckStagingEmpty(t, staging)
	prdCheckFenced(t, l, st.Version, epochA)
	prdMust(t, bin, "verify", "--store", url)
}

// TestProduceSlowCommitNotRejected: a batch whose commit is still in flight
// when run scans its staging tree again is neither rejected nor committed
// twice. A 1ms poll makes every commit (an fsynced create, and the
// leader's gap of half a round trip after it) slower than a scan, as a
// slow store or contention would.
func TestProduceSlowCommitNotRejected(t *testing.T) {
	bin, writer := prdBins(t)
	url, _ := mntFileURL(t)
	prdMust(t, bin, "init", "--store", url, "--ranks", "2")
	_, staging, manifest := prdStaging(t)
	p, err := prdStart(bin, url, staging, "p", "--poll", "1ms")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.kill)
	if !within(time.Minute, func() bool {
		select {
		case <-p.stderr.when("producer registered"):
			return true
		default:
			return p.exited()
		}
	}) || p.exited() {
		t.Fatalf("producer did not start; stderr:\n%s", p.tail())
	}
	prdWrite(t, writer, manifest, map[string]string{"p": staging}, 0, 10, "-pause", "15ms")
	drained := within(time.Minute, func() bool {
		left, err := prdSealed(staging)
		return err == nil && len(left) == 0 || p.exited()
	})
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	if !drained || p.code() != 0 {
		t.Errorf("producer: drained %v, exit status %d; stderr:\n%s", drained, p.code(), p.tail())
	}
	prdCheckStagingEmpty(t, staging)
	s, l := prdOpen(t, url)
	prdCheckCommitted(t, s, prdLoad(t, l), prdSealedOnly(prdReadManifest(t, manifest)))
}
