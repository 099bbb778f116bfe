package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// The combining commit through real processes (the commit path of
// docs/ARCHITECTURE.md, guarantee 3): a producer's TGB object, once
// uploaded, is announced, and whoever creates the next version commits
// it, exactly once, also when its own producer was killed before it could
// commit it; a restarted producer learns from the log that its batch is
// committed and neither uploads nor commits it again.

var cmbBuild struct {
	once sync.Once
	bin  string
	err  error
}

// cmbAnnouncer builds testdata/announcer (a producer whose log writes
// block once its first TGB is announced) beside prdBins' binaries.
func cmbAnnouncer(t testing.TB) string {
	t.Helper()
	produce, _ := prdBins(t)
	cmbBuild.once.Do(func() {
		cmbBuild.bin = filepath.Join(filepath.Dir(produce), "announcer")
		cmd := exec.Command("go", "build", "-o", cmbBuild.bin, "./testdata/announcer")
		if out, err := cmd.CombinedOutput(); err != nil {
			cmbBuild.err = fmt.Errorf("go build ./testdata/announcer: %w\n%s", err, out)
		}
	})
	if cmbBuild.err != nil {
		t.Fatal(cmbBuild.err)
	}
	return cmbBuild.bin
}

// cmbMkdirs makes one staging directory per id under root.
func cmbMkdirs(t testing.TB, root string, ids ...string) map[string]string {
	t.Helper()
	dirs := map[string]string{}
	for _, id := range ids {
		dirs[id] = filepath.Join(root, "staging-"+id)
		if err := os.Mkdir(dirs[id], 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dirs
}

// cmbKeys lists the keys under prefix.
func cmbKeys(t testing.TB, s store.Store, prefix string) []string {
	t.Helper()
	var keys []string
	if err := store.Walk(t.Context(), s, prefix, "", func(o store.Info) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatalf("listing %s: %v", prefix, err)
	}
	return keys
}

// cmbCommit is one commit of a TGB as the log records it.
type cmbCommit struct {
	version uint64
	writer  txn.Writer
	tgb     *txn.TGB
}

// cmbCommits reads versions 1..head and returns every TGB commit in log
// order. It also checks, independently of State.Apply, what fencing
// promises: each TGB is committed at its producer's registered epoch (the
// newest Register before it) as that producer's next seq.
func cmbCommits(t testing.TB, l *txn.Log, head uint64) []cmbCommit {
	t.Helper()
	vers := make([]*txn.Version, head+1)
	g, ctx := errgroup.WithContext(t.Context())
	g.SetLimit(16)
	for v := uint64(1); v <= head; v++ {
		g.Go(func() error {
			ver, err := l.ReadVersion(ctx, v)
			if err != nil {
				return fmt.Errorf("reading version %d: %w", v, err)
			}
			vers[v] = ver
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	epoch := map[string]uint64{}
	seq := map[string]uint64{}
	var out []cmbCommit
	for _, ver := range vers[1:] {
		if ver.Register != nil {
			epoch[ver.Writer.Producer] = ver.Writer.Epoch
		}
		for _, tgb := range ver.TGBs {
			if e, ok := epoch[tgb.Producer]; !ok || tgb.Epoch != e {
				t.Errorf("version %d (by %s) commits %s/%s at epoch %d; the registered epoch is %d", ver.Version, ver.Writer.Producer, tgb.Producer, tgb.Batch, tgb.Epoch, e)
			}
			if tgb.Seq != seq[tgb.Producer]+1 {
				t.Errorf("version %d (by %s) commits %s/%s as seq %d after seq %d", ver.Version, ver.Writer.Producer, tgb.Producer, tgb.Batch, tgb.Seq, seq[tgb.Producer])
			}
			seq[tgb.Producer] = tgb.Seq
			out = append(out, cmbCommit{version: ver.Version, writer: ver.Writer, tgb: tgb})
		}
	}
	return out
}

// TestKilledProducerCommittedByAnother: producer A uploads (announces) a
// batch and is SIGKILLed before any version includes it; producer B, a
// `lakefs-produce run` process, commits it exactly once in a version B
// writes. A restarted with the same id and staging directory learns from
// the log that the batch is committed: it removes it from staging without
// uploading it again under its new epoch, and commits its next batch.
func TestKilledProducerCommittedByAnother(t *testing.T) {
	bin, writer := prdBins(t)
	announcer := cmbAnnouncer(t)
	srv := s3test.Start(t)
	url := srv.NewBucketURL(t)
	prdMust(t, bin, "init", "--store", url, "--ranks", "2")
	root := t.TempDir()
	manifest := filepath.Join(root, "manifest.jsonl")
	dirs := cmbMkdirs(t, root, "A", "B")
	s, l := prdOpen(t, url)
	const batch = "b000000"
	stepsOf := func(st *txn.State, producer string) (n int) {
		for _, tgb := range st.Steps {
			if tgb.Producer == producer {
				n++
			}
		}
		return n
	}

	// A: announces b000000, then its committer blocks on its first log
	// write; killed there.
	prdWrite(t, writer, manifest, map[string]string{"A": dirs["A"]}, 0, 1, "-seed", "5")
	actx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	acmd, aout, aerr := prdCommand(actx, announcer, "-store", url, "-staging", dirs["A"], "-producer-id", "A")
	if err := acmd.Start(); err != nil {
		t.Fatal(err)
	}
	adone := make(chan struct{})
	go func() {
		_ = acmd.Wait()
		close(adone)
	}()
	killA := func() {
		_ = acmd.Process.Kill()
		<-adone
	}
	defer killA()
	select {
	case <-aout.when("BLOCKED "):
	case <-adone:
		t.Fatalf("announcer A exited before it announced and tried to commit; stdout:\n%s\nstderr:\n%s", aout, aerr)
	case <-time.After(time.Minute):
		t.Fatalf("announcer A did not announce and try to commit in a minute; stdout:\n%s\nstderr:\n%s", aout, aerr)
	}
	key := txn.ObjectKey("A", 1, 1)
	if !strings.Contains(aout.String(), "ANNOUNCED "+key+"\n") {
		t.Fatalf("announcer A announced something other than %s:\n%s", key, aout)
	}
	if st := prdLoad(t, l); stepsOf(st, "A") != 0 {
		t.Fatalf("A's TGB was committed before A was killed (version %d): the window between announcing and committing was not held", st.Version)
	}
	killA()
	if _, err := s.Stat(t.Context(), key); err != nil {
		t.Fatalf("A's announced TGB object: %v", err)
	}
	st := prdLoad(t, l)
	if a := st.Producers["A"]; a == nil || a.Epoch != 1 || a.Seq != 0 || stepsOf(st, "A") != 0 {
		t.Fatalf("after A's kill: producer state %+v, %d steps of A; want epoch 1, seq 0, none committed", a, stepsOf(st, "A"))
	}
	killedAt := st.Version

	// B commits a batch of its own, and A's with it.
	prdWrite(t, writer, manifest, map[string]string{"B": dirs["B"]}, 0, 1, "-seed", "5")
	prdMust(t, bin, "run", "--store", url, "--staging", dirs["B"], "--producer-id", "B", "--once", "--progress", "log")
	st = prdLoad(t, l)
	var hits []cmbCommit
	for _, c := range cmbCommits(t, l, st.Version) {
		if c.tgb.Producer == "A" {
			hits = append(hits, c)
		}
	}
	if len(hits) != 1 {
		t.Fatalf("A's TGBs were committed %d times after B ran, want once: %+v", len(hits), hits)
	}
	h := hits[0]
	if h.writer.Producer != "B" || h.tgb.Batch != batch || h.tgb.Epoch != 1 || h.tgb.Seq != 1 || h.version <= killedAt {
		t.Errorf("A's TGB %s (epoch %d seq %d) committed in version %d by %s (epoch %d); want %s epoch 1 seq 1, after version %d, by B",
			h.tgb.Batch, h.tgb.Epoch, h.tgb.Seq, h.version, h.writer.Producer, h.writer.Epoch, batch, killedAt)
	}
	if h.tgb.Object == nil || h.tgb.Object.Key != key {
		t.Errorf("A's committed TGB references %+v, want the announced object %s", h.tgb.Object, key)
	}
	if a := st.Producers["A"]; a == nil || a.Epoch != 1 || a.Seq != 1 || a.Cursor != batch {
		t.Errorf("after B's commit: producer A's state %+v, want epoch 1, seq 1, cursor %s", a, batch)
	}
	if left, err := prdSealed(dirs["A"]); err != nil || !slices.Equal(left, []string{batch}) {
		t.Fatalf("A's staging holds %v (%v), want the committed %s it had no time to remove", left, err, batch)
	}
	t.Logf("A's %s announced as %s, committed at step %d in version %d by %s", batch, key, h.tgb.Step, h.version, h.writer.Producer)

	// A restarts (epoch 2) with a new batch staged after the committed one.
	prdWrite(t, writer, manifest, map[string]string{"A": dirs["A"]}, 1, 1, "-seed", "5")
	out := prdMust(t, bin, "run", "--store", url, "--staging", dirs["A"], "--producer-id", "A", "--once", "--progress", "log")
	if want := fmt.Sprintf("%s -> step %d (committed before; removed from staging)", batch, h.tgb.Step); !strings.Contains(out, want) {
		t.Errorf("restarted A's output lacks %q:\n%s", want, out)
	}
	st = prdLoad(t, l)
	if a := st.Producers["A"]; a == nil || a.Epoch != 2 || a.Seq != 2 || a.Cursor != "b000001" {
		t.Errorf("after A's restart: producer A's state %+v, want epoch 2, seq 2, cursor b000001", a)
	}
	// Under epoch 2 A uploaded b000001 only, at seq 2.
	if got, want := cmbKeys(t, s, "data/A/"), []string{key, txn.ObjectKey("A", 2, 2)}; !slices.Equal(got, want) {
		t.Errorf("A's data objects: %v, want %v (the committed batch uploaded once, under epoch 1)", got, want)
	}
	want := prdSealedOnly(prdReadManifest(t, manifest))
	if len(want) != 3 {
		t.Fatalf("the writer sealed %d batches, want 3", len(want))
	}
	prdCheckCommitted(t, s, st, want)
	for _, c := range cmbCommits(t, l, st.Version) {
		if c.tgb.Producer == "A" && c.tgb.Batch == "b000001" && c.tgb.Object.Key != txn.ObjectKey("A", 2, 2) {
			t.Errorf("A's b000001 committed from %s", c.tgb.Object.Key)
		}
	}
	for _, dir := range dirs {
		prdCheckStagingEmpty(t, dir)
	}
	prdMust(t, bin, "verify", "--store", url)
}

// TestProduceKill9Combining16: sixteen `lakefs-produce run` processes on
// a real S3 server, one staging tree each, while a writer process seals
// batches into all of them; every 100-300ms one producer chosen at random
// is SIGKILLed and restarted. Then every producer drains with --once.
// Every sealed batch must be exactly one step, in order, with the bytes
// the writer wrote; every TGB committed at its producer's registered
// epoch; and during the chaos some TGBs must have been committed by a
// producer other than their own (else the combining path went untested).
func TestProduceKill9Combining16(t *testing.T) {
	longtest.Skip(t, "a kill -9 storm of 16 combining producers")
	const (
		producers = 16
		batches   = 30
		chaosMax  = 50 * time.Second
	)
	bin, writer := prdBins(t)
	srv := s3test.Start(t)
	url := srv.NewBucketURL(t)
	prdMust(t, bin, "init", "--store", url, "--ranks", "2")
	root := t.TempDir()
	manifest := filepath.Join(root, "manifest.jsonl")
	var ids []string
	for i := range producers {
		ids = append(ids, fmt.Sprintf("p%02d", i))
	}
	dirs := cmbMkdirs(t, root, ids...)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 16))

	start := time.Now()
	wctx, cancel := context.WithTimeout(t.Context(), prdCmdTimeout)
	defer cancel()
	wcmd, _, wstderr := prdCommand(wctx, writer, prdWriterArgs(manifest, dirs, 0, batches, "-pause", "1500ms", "-seed", fmt.Sprint(seed%1000))...)
	if err := wcmd.Start(); err != nil {
		t.Fatal(err)
	}
	writerDone := make(chan struct{})
	var writerErr error
	go func() {
		writerErr = wcmd.Wait()
		close(writerDone)
	}()

	procs := make([]*prdProc, producers)
	defer func() {
		for _, p := range procs {
			if p != nil {
				p.kill()
			}
		}
	}()
	for i, id := range ids {
		p, err := prdStart(bin, url, dirs[id], id, "--poll", "50ms")
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
	}
	kills := make([]int, producers)
	deadline := start.Add(chaosMax)
chaos:
	for round := 0; round < 10000; round++ {
		select {
		case <-writerDone:
			break chaos
		case <-time.After(100*time.Millisecond + time.Duration(rng.Int64N(int64(200*time.Millisecond)))):
		}
		if time.Now().After(deadline) {
			t.Logf("stopping the kills at the deadline (%s)", chaosMax)
			break
		}
		for i, p := range procs {
			if p.exited() {
				t.Fatalf("producer %s exited by itself (status %d, %v); stderr:\n%s", ids[i], p.code(), p.err, p.tail())
			}
		}
		i := rng.IntN(producers)
		procs[i].kill()
		kills[i]++
		p, err := prdStart(bin, url, dirs[ids[i]], ids[i], "--poll", "50ms")
		if err != nil {
			t.Fatal(err)
		}
		procs[i] = p
	}
	for i, p := range procs {
		if p.exited() {
			t.Errorf("producer %s exited by itself (status %d, %v); stderr:\n%s", ids[i], p.code(), p.err, p.tail())
		}
		p.kill()
	}
	<-writerDone
	if writerErr != nil {
		t.Fatalf("writer: %v\n%s", writerErr, wstderr)
	}
	chaos := time.Since(start)
	s, l := prdOpen(t, url)
	chaosHead := prdLoad(t, l).Version
	if t.Failed() {
		t.FailNow()
	}

	// Drain: every producer at once, so the drain combines too.
	g, gctx := errgroup.WithContext(t.Context())
	for _, id := range ids {
		g.Go(func() error {
			out, errs, code, err := prdExecCtx(gctx, bin, "run", "--store", url, "--staging", dirs[id], "--producer-id", id, "--once", "--progress", "log")
			if err != nil || code != 0 {
				return fmt.Errorf("run --once %s: exit %d, %v\nstdout:\n%s\nstderr:\n%s", id, code, err, out, errs)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}

	want := prdReadManifest(t, manifest)
	if len(want) != producers*batches || len(prdSealedOnly(want)) != len(want) {
		t.Fatalf("the writer recorded %d batches (%d sealed), want %d sealed", len(want), len(prdSealedOnly(want)), producers*batches)
	}
	st := prdLoad(t, l)
	order := prdCheckCommitted(t, s, st, want)
	prdCheckStatus(t, bin, url, producers*batches, order)
	for _, dir := range dirs {
		prdCheckStagingEmpty(t, dir)
	}
	prdMust(t, bin, "verify", "--store", url)

	commits := cmbCommits(t, l, st.Version)
	var byOther, byOtherChaos, chaosTGBs int
	for _, c := range commits {
		if c.version <= chaosHead {
			chaosTGBs++
		}
		if c.writer.Producer == c.tgb.Producer {
			continue
		}
		byOther++
		if c.version <= chaosHead {
			byOtherChaos++
		}
	}
	total := 0
	for _, k := range kills {
		total += k
	}
	t.Logf("%d SIGKILLs %v; %d steps in %d versions (%d after the chaos phase); chaos %s, total %s",
		total, kills, len(commits), st.Version, st.Version-chaosHead, chaos.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	t.Logf("TGBs committed by a producer other than their own: %d of %d (%d of the %d committed during the chaos)", byOther, len(commits), byOtherChaos, chaosTGBs)
	if byOtherChaos == 0 {
		t.Errorf("no TGB was committed by another producer during the chaos: the combining commit was not exercised")
	}
	if total < producers {
		t.Errorf("only %d SIGKILLs: the test did not test crashes", total)
	}
}
