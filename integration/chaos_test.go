package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/lakestream/lakestream/internal/s3test"
)

// The chaos run: the whole system as separate processes on a real S3
// server, under every fault at once. A writer process seals batches into
// four staging directories (on one small tmpfs), four `lakefs-produce run`
// processes commit them, two lakefs-mount processes ("nodes", half the
// ranks each, --wait) serve them, and a reader process per node reads every
// step in order, recording each file's SHA-256. The test checkpoints what
// both readers finished and runs gc, as a training job would. Meanwhile it
// SIGKILLs and restarts producers, SIGSTOPs one while a new incarnation
// takes over and then wakes it (a zombie), SIGKILLs a mount and its reader
// (which resumes after the last step it finished), kills the S3 server with
// -9 and stops it cleanly, restarting each on the same port and data, and
// fills the staging disk. Only the documented command lines are used
// (README.md), as an operator would.
//
// TestChaos is the short run of `make test`; LAKEFS_SOAK=<duration> makes
// it the soak of `make soak` (also on SeaweedFS when `weed` is installed).

// chaosRanks: ranks of the stream; node a reads 0-1, node b 2-3.
const chaosRanks = 4

// chaosS3 is an S3 server the chaos run can crash and restart.
type chaosS3 interface {
	Name() string
	NewBucketURL(t testing.TB) string
	Client() *s3.Client
	Stop(sig syscall.Signal)
	Restart() error
}

type chaosVersity struct{ *s3test.Server }

func (chaosVersity) Name() string { return "versitygw" }

// chaosOptions size one run.
type chaosOptions struct {
	Batches   int           // per producer
	Pause     time.Duration // the writer's random pause between batches, at most
	MinChaos  time.Duration // faults go on at least this long (and while the writer writes)
	Outage    time.Duration // how long the S3 server stays down
	StopFor   time.Duration // how long a producer stays SIGSTOPped
	TmpfsSize string
}

func TestChaos(t *testing.T) {
	mntRequireFUSE(t)
	srv := s3test.Start(t)
	o := chaosOptions{Batches: 80, Pause: 400 * time.Millisecond, MinChaos: 60 * time.Second,
		Outage: 4 * time.Second, StopFor: 6 * time.Second, TmpfsSize: "24m"}
	if d := os.Getenv("LAKEFS_SOAK"); d != "" {
		dur, err := time.ParseDuration(d)
		if err != nil {
			t.Fatalf("LAKEFS_SOAK=%q: want a duration such as 20m: %v", d, err)
		}
		o.MinChaos, o.Batches, o.Outage, o.StopFor = dur, int(dur/(600*time.Millisecond)), 10*time.Second, 15*time.Second
	}
	t.Run("versitygw", func(t *testing.T) { chaosRun(t, chaosVersity{srv}, o) })
	if os.Getenv("LAKEFS_SOAK") != "" {
		t.Run("seaweedfs", func(t *testing.T) {
			w := chaosStartWeed(t)
			o := o
			// Its conditional creates take seconds under contention.
			o.Batches /= 3
			chaosRun(t, w, o)
		})
	}
}

// chaosStats is what the run counts.
type chaosStats struct {
	mu     sync.Mutex
	faults map[string]int // GUARDED_BY(mu)
	exits  map[string]int // GUARDED_BY(mu): processes that ended by themselves, by kind
}

func (s *chaosStats) fault(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[kind]++
}

func (s *chaosStats) exit(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exits[kind]++
}

// chaosSup keeps one process running: it restarts it whenever it exits
// until ctx ends. The injector signals the current incarnation.
type chaosSup struct {
	name  string
	kind  string
	start func() *exec.Cmd
	stats *chaosStats
	t     testing.TB
	// reap frees a killed process that cannot exit by itself (a FUSE
	// daemon); nil for others.
	reap func()

	mu       sync.Mutex
	cur      *exec.Cmd     // GUARDED_BY(mu)
	out      *prdOutput    // GUARDED_BY(mu): the current incarnation's stderr
	exited   chan struct{} // GUARDED_BY(mu): closed when cur has exited
	killed   bool          // GUARDED_BY(mu): cur was killed on purpose
	detach   bool          // GUARDED_BY(mu): cur is left alone (a zombie to be)
	detachCh chan struct{} // GUARDED_BY(mu): closed when cur is detached
	last     string        // GUARDED_BY(mu): the tail of an incarnation that exited by itself
}

func (s *chaosSup) run(ctx context.Context) {
	for ctx.Err() == nil {
		cmd := s.start()
		out := &prdOutput{}
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			s.t.Errorf("%s: %v", s.name, err)
			return
		}
		exited, detached := make(chan struct{}), make(chan struct{})
		s.mu.Lock()
		s.cur, s.out, s.exited, s.killed, s.detach, s.detachCh = cmd, out, exited, false, false, detached
		s.mu.Unlock()
		go func() { _ = cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-detached:
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			s.waitExit(exited)
			return
		}
		s.mu.Lock()
		detach, killed := s.detach, s.killed
		if !killed && !detach {
			b := out.String()
			s.last = b[max(0, len(b)-2000):]
		}
		s.mu.Unlock()
		if !killed && !detach {
			s.stats.exit(s.kind)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(300 * time.Millisecond):
		}
	}
}

// waitExit waits for a killed incarnation, freeing it if it is stuck.
func (s *chaosSup) waitExit(exited <-chan struct{}) {
	select {
	case <-exited:
		return
	case <-time.After(5 * time.Second):
	}
	if s.reap != nil {
		s.reap()
	}
	select {
	case <-exited:
	case <-time.After(20 * time.Second):
		s.t.Errorf("%s: a killed incarnation did not exit", s.name)
	}
}

// kill SIGKILLs the current incarnation and waits until it is gone (the
// supervisor then starts the next one).
func (s *chaosSup) kill() {
	s.mu.Lock()
	cmd, exited := s.cur, s.exited
	s.killed = true
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	s.waitExit(exited)
}

// zombie SIGSTOPs the current incarnation and lets the supervisor start a
// new one at once; after d it wakes the stopped one, which must find itself
// fenced by the new epoch. It returns once the zombie has exited (or was
// killed after a minute awake).
func (s *chaosSup) zombie(d time.Duration) (code int, tail string) {
	s.mu.Lock()
	cmd, exited, out := s.cur, s.exited, s.out
	if cmd == nil || s.detach {
		s.mu.Unlock()
		return 0, "no incarnation"
	}
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	s.detach = true
	close(s.detachCh)
	s.mu.Unlock()
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exited
		return -1, "still running a minute after SIGCONT:\n" + out.String()
	}
	b := out.String()
	return cmd.ProcessState.ExitCode(), b[max(0, len(b)-1500):]
}

// tail is the end of the current incarnation's output.
func (s *chaosSup) tail() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.out == nil {
		return ""
	}
	b := s.out.String()
	return b[max(0, len(b)-3000):]
}

// pause SIGSTOPs the current incarnation for d (no new incarnation: a hung
// process that comes back).
func (s *chaosSup) pause(d time.Duration) {
	s.mu.Lock()
	cmd := s.cur
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(d)
	_ = cmd.Process.Signal(syscall.SIGCONT)
}

// chaosNode is one training node: a mount and its reader.
type chaosNode struct {
	name   string
	ranks  []int
	mnt    string
	out    string // the reader's record
	mount  *chaosSup
	reader *chaosSup
}

// chaosReaderSteps reads a reader's record.
func chaosReaderSteps(path string) ([]chaosStep, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []chaosStep
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		var s chaosStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// chaosStep is one line of a reader's record (testdata/reader).
type chaosStep struct {
	Step     int64     `json:"step"`
	Producer string    `json:"producer"`
	Batch    string    `json:"batch"`
	Files    []prdFile `json:"files"`
	WaitedMS int64     `json:"waited_ms"`
}

func chaosLastStep(path string) int64 {
	steps, err := chaosReaderSteps(path)
	if err != nil || len(steps) == 0 {
		return -1
	}
	return steps[len(steps)-1].Step
}

func chaosRun(t *testing.T, srv chaosS3, o chaosOptions) {
	const producers = 4
	bin, writer := prdBins(t)
	mountBin := mntBuildMount(t)
	reader := filepath.Join(t.TempDir(), "reader")
	if out, err := exec.Command("go", "build", "-o", reader, "./testdata/reader").CombinedOutput(); err != nil {
		t.Fatalf("building the reader: %v\n%s", err, out)
	}
	url := srv.NewBucketURL(t)
	prdMust(t, bin, "init", "--store", url, "--ranks", strconv.Itoa(chaosRanks), "--snapshot-every", "50")

	root := t.TempDir()
	staging := filepath.Join(root, "staging")
	if err := os.Mkdir(staging, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mount("tmpfs", staging, "tmpfs", 0, "size="+o.TmpfsSize); err != nil {
		t.Fatalf("mounting a tmpfs for the staging disk: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(staging, syscall.MNT_DETACH) })
	manifest := filepath.Join(root, "manifest.jsonl")
	dirs := map[string]string{}
	var ids []string
	for i := range producers {
		id := fmt.Sprintf("p%d", i)
		ids = append(ids, id)
		dirs[id] = filepath.Join(staging, id)
		if err := os.Mkdir(dirs[id], 0o755); err != nil {
			t.Fatal(err)
		}
	}

	stats := &chaosStats{faults: map[string]int{}, exits: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var procs sync.WaitGroup

	prods := map[string]*chaosSup{}
	for _, id := range ids {
		prods[id] = &chaosSup{name: "producer " + id, kind: "producer", stats: stats, t: t, start: func() *exec.Cmd {
			return exec.Command(bin, "run", "--store", url, "--staging", dirs[id], "--producer-id", id,
				"--poll", "100ms", "--max-lead", "40", "--progress", "log")
		}}
	}
	var nodes []*chaosNode
	for i, name := range []string{"a", "b"} {
		n := &chaosNode{name: name, mnt: filepath.Join(root, "mnt-"+name), out: filepath.Join(root, "read-"+name+".jsonl")}
		for r := i * chaosRanks / 2; r < (i+1)*chaosRanks/2; r++ {
			n.ranks = append(n.ranks, r)
		}
		if err := os.Mkdir(n.mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		rs := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(n.ranks)), ","), "[]")
		n.mount = &chaosSup{name: "mount " + name, kind: "mount", stats: stats, t: t,
			reap: func() { mntAbortFUSE(t, n.mnt, true) },
			start: func() *exec.Cmd {
				return exec.Command(mountBin, "--store", url, "--ranks", rs, "--wait", "20s", "--node-id", "node-"+name,
					"--cache-size", "128MiB", "--prefetch-steps", "4", "--poll-interval", "50ms", "--heartbeat-interval", "1s", n.mnt)
			}}
		n.reader = &chaosSup{name: "reader " + name, kind: "reader", stats: stats, t: t, start: func() *exec.Cmd {
			return exec.Command(reader, "-mnt", n.mnt, "-ranks", rs, "-out", n.out)
		}}
		nodes = append(nodes, n)
	}
	for _, p := range prods {
		procs.Go(func() { p.run(ctx) })
	}
	for _, n := range nodes {
		procs.Go(func() { n.mount.run(ctx) })
		mntWaitFor(t, 30*time.Second, "mount "+n.name, func() bool {
			_, err := os.Stat(filepath.Join(n.mnt, "head"))
			return err == nil
		})
		procs.Go(func() { n.reader.run(ctx) })
	}
	t.Cleanup(func() {
		cancel()
		procs.Wait()
		for _, n := range nodes {
			_ = syscall.Unmount(n.mnt, syscall.MNT_DETACH)
		}
	})

	// The writer: every sealed batch and every file's SHA-256 go to the
	// manifest before _SEALED.
	start := time.Now()
	wcmd, _, wstderr := prdCommand(ctx, writer, "-manifest", manifest, "-ranks", strconv.Itoa(chaosRanks),
		"-from", "0", "-count", strconv.Itoa(o.Batches), "-seed", "11", "-pause", o.Pause.String(),
		"-dir", "p0="+dirs["p0"], "-dir", "p1="+dirs["p1"], "-dir", "p2="+dirs["p2"], "-dir", "p3="+dirs["p3"])
	if err := wcmd.Start(); err != nil {
		t.Fatal(err)
	}
	writerDone := make(chan struct{})
	var writerErr error
	go func() { writerErr = wcmd.Wait(); close(writerDone) }()

	// Training's side: checkpoint what both readers finished, then gc.
	var train sync.WaitGroup
	trainCtx, stopTrain := context.WithCancel(ctx)
	var gcRuns, ckpts int
	train.Go(func() {
		last := int64(-1)
		for trainCtx.Err() == nil {
			select {
			case <-trainCtx.Done():
				return
			case <-time.After(3 * time.Second):
			}
			done := min(chaosLastStep(nodes[0].out), chaosLastStep(nodes[1].out))
			if done > last {
				// The store may be down: a failed checkpoint or gc is retried
				// on the next round, as a training script would.
				if _, _, code := prdExecCtx(trainCtx, bin, "checkpoint", "--store", url, "--step", strconv.FormatInt(done, 10)); code == 0 {
					last = done
					ckpts++
				}
			}
			if _, _, code := prdExecCtx(trainCtx, bin, "gc", "--store", url, "--grace", "2m"); code == 0 {
				gcRuns++
			}
		}
	})

	// The faults. Each kind is injected at least once, in random order,
	// then at random until the writer is done and MinChaos has passed.
	// Producer SIGKILLs run on their own, more often.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16))
	var zombies []string
	var zmu sync.Mutex
	killerDone := make(chan struct{})
	chaosUntil := time.Now().Add(o.MinChaos)
	chaosOver := func() bool {
		select {
		case <-writerDone:
			return time.Now().After(chaosUntil)
		default:
			return false
		}
	}
	krng := rand.New(rand.NewPCG(rng.Uint64(), 1)) // seeded here: rng is this goroutine's
	go func() {
		defer close(killerDone)
		for !chaosOver() && ctx.Err() == nil {
			time.Sleep(time.Second + time.Duration(krng.Int64N(int64(3*time.Second))))
			prods[ids[krng.IntN(len(ids))]].kill()
			stats.fault("producer SIGKILL")
		}
	}()
	kinds := []string{"mount SIGKILL", "mount SIGKILL", "producer SIGSTOP (zombie)", "producer SIGSTOP (hung)",
		"S3 SIGKILL", "S3 SIGTERM", "staging disk full", "mount SIGSTOP (hung)"}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	var zombieWG sync.WaitGroup
	for i := 0; ; i++ {
		if i >= len(kinds) && chaosOver() {
			break
		}
		kind := ""
		if i < len(kinds) {
			kind = kinds[i]
		} else {
			kind = kinds[rng.IntN(len(kinds))]
		}
		time.Sleep(2*time.Second + time.Duration(rng.Int64N(int64(3*time.Second))))
		stats.fault(kind)
		t.Logf("%6.1fs: %s", time.Since(start).Seconds(), kind)
		switch kind {
		case "mount SIGKILL":
			n := nodes[rng.IntN(len(nodes))]
			n.reader.kill()
			n.mount.kill()
		case "mount SIGSTOP (hung)":
			// Its reader blocks meanwhile; the mount answers again after.
			nodes[rng.IntN(len(nodes))].mount.pause(o.StopFor)
		case "producer SIGSTOP (zombie)":
			p := prods[ids[rng.IntN(len(ids))]]
			zombieWG.Go(func() {
				code, tail := p.zombie(o.StopFor)
				zmu.Lock()
				defer zmu.Unlock()
				zombies = append(zombies, fmt.Sprintf("%s: exit %d", p.name, code))
				t.Logf("zombie %s woke up and exited %d: %s", p.name, code, lastLine(tail))
				if code == 0 {
					t.Errorf("%s woke up as a zombie and exited 0; want it fenced: %s", p.name, tail)
				}
			})
		case "producer SIGSTOP (hung)":
			prods[ids[rng.IntN(len(ids))]].pause(o.StopFor)
		case "S3 SIGKILL", "S3 SIGTERM":
			sig := syscall.SIGKILL
			if kind == "S3 SIGTERM" {
				sig = syscall.SIGTERM
			}
			srv.Stop(sig)
			time.Sleep(o.Outage)
			if err := srv.Restart(); err != nil {
				t.Fatalf("restarting %s: %v", srv.Name(), err)
			}
		case "staging disk full":
			chaosFillDisk(t, staging, o.StopFor)
		}
	}
	<-killerDone
	zombieWG.Wait()
	<-writerDone
	if writerErr != nil {
		t.Fatalf("writer: %v\n%s", writerErr, wstderr)
	}
	chaosTime := time.Since(start)

	// Quiet: the supervised producers drain their staging directories.
	for id, dir := range dirs {
		if !prdWaitFor(3*time.Minute, func() bool {
			left, err := prdSealed(dir)
			return err == nil && len(left) == 0
		}) {
			left, _ := prdSealed(dir)
			t.Fatalf("producer %s: sealed batches %v left in %s after 3 min of quiet\nreaders at %d, %d\ncurrent incarnation:\n%s\nlast exit:\n%s",
				id, left, dir, chaosLastStep(nodes[0].out), chaosLastStep(nodes[1].out), prods[id].tail(), prods[id].last)
		}
	}
	want := prdReadManifest(t, manifest)
	if len(want) != producers*o.Batches {
		t.Fatalf("the writer recorded %d batches, want %d", len(want), producers*o.Batches)
	}
	total := int64(len(want))
	for _, n := range nodes {
		if !prdWaitFor(3*time.Minute, func() bool { return chaosLastStep(n.out) >= total-1 }) {
			t.Fatalf("reader %s: read up to step %d of %d in 3 min of quiet\nreader: %s\nmount: %s",
				n.name, chaosLastStep(n.out), total-1, n.reader.last, n.mount.last)
		}
	}
	stopTrain()
	train.Wait()
	cancel()
	procs.Wait()
	for _, id := range ids {
		prdCheckStagingEmpty(t, dirs[id])
	}

	// The checks.
	var bytesRead, files, mismatches, dups, losses int64
	var stall time.Duration
	stepOf := map[string]int64{}
	for _, n := range nodes {
		steps, err := chaosReaderSteps(n.out)
		if err != nil {
			t.Fatal(err)
		}
		for i, s := range steps {
			if s.Step != int64(i) {
				t.Errorf("reader %s: record %d is step %d: steps are not contiguous from 0", n.name, i, s.Step)
				break
			}
			stall = max(stall, time.Duration(s.WaitedMS)*time.Millisecond)
			k := prdKey(s.Producer, s.Batch)
			if prev, ok := stepOf[k]; ok && prev != s.Step {
				dups++
				t.Errorf("batch %s is step %d and step %d", k, prev, s.Step)
			}
			stepOf[k] = s.Step
			rec, ok := want[k]
			if !ok || !rec.Sealed {
				mismatches++
				t.Errorf("node %s step %d: batch %q was never sealed by the writer", n.name, s.Step, k)
				continue
			}
			wantFiles := map[string]prdFile{}
			for _, f := range rec.Files {
				if f.Rank == -1 || slices.Contains(n.ranks, f.Rank) {
					wantFiles[fmt.Sprintf("%d/%s", f.Rank, f.Name)] = f
				}
			}
			for _, f := range s.Files {
				files++
				bytesRead += f.Size
				key := fmt.Sprintf("%d/%s", f.Rank, f.Name)
				w, ok := wantFiles[key]
				delete(wantFiles, key)
				if !ok || w.SHA256 != f.SHA256 || w.Size != f.Size {
					mismatches++
					t.Errorf("node %s step %d (%s) file rank %d %s: read %d bytes sha256 %.12s, writer wrote %d bytes sha256 %.12s",
						n.name, s.Step, k, f.Rank, f.Name, f.Size, f.SHA256, w.Size, w.SHA256)
				}
			}
			for key := range wantFiles {
				mismatches++
				t.Errorf("node %s step %d (%s): file %s missing", n.name, s.Step, k, key)
			}
		}
	}
	for k := range want {
		if _, ok := stepOf[k]; !ok {
			losses++
			t.Errorf("sealed batch %s is no step", k)
		}
	}
	for _, w := range want {
		stall = max(stall, time.Duration(w.WaitedMS)*time.Millisecond)
	}
	if out, errs, code := prdExec(t, bin, "verify", "--store", url); code != 0 {
		t.Errorf("verify: exit %d\n%s\n%s", code, out, errs)
	}
	st := prdGetStatus(t, bin, url)
	if st.Head == nil || *st.Head != total-1 {
		t.Errorf("status: head %v, want %d", st.Head, total-1)
	}
	// A final checkpoint at the head and gc without grace: data/ then
	// holds exactly what the live steps need.
	prdMust(t, bin, "checkpoint", "--store", url, "--step", strconv.FormatInt(total-1, 10))
	prdMust(t, bin, "gc", "--store", url, "--grace", "0s")
	st = prdGetStatus(t, bin, url)
	dataObjs, dataBytes := chaosListData(t, srv, url)
	if dataBytes != st.DataBytes {
		t.Errorf("after the final gc data/ holds %d objects of %d bytes; the %d live steps need %d bytes", dataObjs, dataBytes, st.Live.Count, st.DataBytes)
	}
	if out, errs, code := prdExec(t, bin, "verify", "--store", url); code != 0 {
		t.Errorf("verify after the final gc: exit %d\n%s\n%s", code, out, errs)
	}

	// The summary.
	stats.mu.Lock()
	defer stats.mu.Unlock()
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "server\t%s\t\n", srv.Name())
	fmt.Fprintf(tw, "chaos phase\t%s\t\n", chaosTime.Round(time.Second))
	kindNames := slices.Sorted(maps.Keys(stats.faults))
	for _, k := range kindNames {
		fmt.Fprintf(tw, "fault: %s\t%d\t\n", k, stats.faults[k])
	}
	for _, k := range slices.Sorted(maps.Keys(stats.exits)) {
		fmt.Fprintf(tw, "exited by itself: %s\t%d\t\n", k, stats.exits[k])
	}
	fmt.Fprintf(tw, "zombies woken\t%d\t\n", len(zombies))
	fmt.Fprintf(tw, "checkpoints / gc runs\t%d / %d\t\n", ckpts, gcRuns)
	fmt.Fprintf(tw, "steps\t%d\t\n", total)
	fmt.Fprintf(tw, "files read\t%d\t\n", files)
	fmt.Fprintf(tw, "bytes read\t%d\t\n", bytesRead)
	fmt.Fprintf(tw, "mismatches\t%d\t\n", mismatches)
	fmt.Fprintf(tw, "duplicates\t%d\t\n", dups)
	fmt.Fprintf(tw, "losses\t%d\t\n", losses)
	fmt.Fprintf(tw, "longest stall\t%s\t\n", stall.Round(time.Millisecond))
	fmt.Fprintf(tw, "live steps / data objects after gc\t%d / %d\t\n", st.Live.Count, dataObjs)
	_ = tw.Flush()
	t.Logf("chaos summary:\n%s", table.String())
	for _, k := range []string{"producer SIGKILL", "mount SIGKILL", "producer SIGSTOP (zombie)", "S3 SIGKILL", "S3 SIGTERM", "staging disk full"} {
		if stats.faults[k] == 0 {
			t.Errorf("no %s was injected: the run did not test it", k)
		}
	}
}

// prdExecCtx runs bin to completion under ctx (bounded by prdCmdTimeout);
// it never fails the test: the caller judges the exit status.
func prdExecCtx(ctx context.Context, bin string, args ...string) (stdout, stderr string, code int) {
	ctx, cancel := context.WithTimeout(ctx, prdCmdTimeout)
	defer cancel()
	cmd, out, errb := prdCommand(ctx, bin, args...)
	if err := cmd.Run(); err != nil {
		code = -1
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
	}
	return out.String(), errb.String(), code
}

// chaosFillDisk fills the staging tmpfs for d: the writer must wait for
// space (it retries on ENOSPC) and nothing may be lost or half-sealed.
func chaosFillDisk(t testing.TB, dir string, d time.Duration) {
	path := filepath.Join(dir, ".filler")
	f, err := os.Create(path)
	if err != nil {
		t.Errorf("filling the staging disk: %v", err)
		return
	}
	buf := make([]byte, 1<<20)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Errorf("filling the staging disk: %v", err)
			}
			break
		}
	}
	time.Sleep(d)
	_ = f.Close()
	if err := os.Remove(path); err != nil {
		t.Errorf("freeing the staging disk: %v", err)
	}
}

// chaosListData lists the stream's data/ objects with a plain S3 client.
func chaosListData(t testing.TB, srv chaosS3, url string) (objects int, bytes int64) {
	t.Helper()
	rest, _ := strings.CutPrefix(url, "s3://")
	path, _, _ := strings.Cut(rest, "?")
	bucket, prefix, _ := strings.Cut(path, "/")
	p := s3.NewListObjectsV2Paginator(srv.Client(), &s3.ListObjectsV2Input{
		Bucket: aws.String(bucket), Prefix: aws.String(strings.Trim(prefix, "/") + "/data/")})
	for p.HasMorePages() {
		page, err := p.NextPage(t.Context())
		if err != nil {
			t.Fatalf("listing data/: %v", err)
		}
		for _, o := range page.Contents {
			objects++
			bytes += aws.ToInt64(o.Size)
		}
	}
	return objects, bytes
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndexByte(s, '\n')+1:]
}
