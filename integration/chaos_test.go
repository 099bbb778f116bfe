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

	"github.com/lakestream/lakestream/internal/longtest"
	"github.com/lakestream/lakestream/store"
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

// chaosServer is a store server the chaos run can crash and restart.
type chaosServer interface {
	Name() string
	NewBucketURL(t testing.TB) string
	Stop(sig syscall.Signal)
	Restart() error
}

// chaosNamed names a test's store server in the run's summary.
type chaosNamed struct {
	storeServer
	name string
}

func (n chaosNamed) Name() string { return n.name }

// chaosOptions size one run.
type chaosOptions struct {
	Batches   int           // per producer
	Pause     time.Duration // the writer's random pause between batches, at most
	MinChaos  time.Duration // faults go on at least this long (and while the writer writes)
	Outage    time.Duration // how long the S3 server stays down
	StopFor   time.Duration // how long a producer stays SIGSTOPped
	TmpfsSize string
	// Net puts every process behind its own faulty link (chaos_net_test.go).
	Net     bool
	NetFor  [2]time.Duration // a partition, half-open, cut, reset or refused link lasts this long
	SlowFor [2]time.Duration // a slow link or a storm lasts this long
	// ZombieFor is how long a rescheduled zombie's partition lasts at
	// least (then until its successor has committed what it was given).
	ZombieFor [2]time.Duration
	// Rescheduled is how many rescheduled zombies the run must see, at
	// least (with Net).
	Rescheduled int
}

func TestChaos(t *testing.T) {
	longtest.Skip(t, "the chaos run: kill -9, SIGSTOP, store restarts and network faults for minutes on three servers")
	mntRequireFUSE(t)
	o := chaosOptions{Batches: 80, Pause: 400 * time.Millisecond, MinChaos: 60 * time.Second,
		Outage: 4 * time.Second, StopFor: 6 * time.Second, TmpfsSize: "24m"}
	soak := os.Getenv("LAKEFS_SOAK") != ""
	if soak {
		dur, err := time.ParseDuration(os.Getenv("LAKEFS_SOAK"))
		if err != nil {
			t.Fatalf("LAKEFS_SOAK=%q: want a duration such as 20m: %v", os.Getenv("LAKEFS_SOAK"), err)
		}
		// About what four producers commit in dur under these faults
		// (1.5-2.2 batches/s in all, measured on versitygw): the writer
		// is the run's clock, so more batches only make the run longer.
		o.MinChaos, o.Batches, o.Outage, o.StopFor = dur, int(dur/(2*time.Second)), 10*time.Second, 15*time.Second
	}
	// The network faults run on the S3 servers; the soak's are longer:
	// partitions up to 90 s, slow links for minutes, 10 rescheduled
	// zombies at least.
	net := o
	net.Net, net.NetFor, net.SlowFor, net.Rescheduled = true, [2]time.Duration{5 * time.Second, 12 * time.Second},
		[2]time.Duration{10 * time.Second, 20 * time.Second}, 1
	net.ZombieFor = net.NetFor
	if soak {
		// The zombie's partitions are shorter than the others' so that
		// SeaweedFS, whose commits take seconds, still sees ten of them.
		net.NetFor, net.SlowFor, net.ZombieFor, net.Rescheduled = [2]time.Duration{5 * time.Second, 90 * time.Second},
			[2]time.Duration{60 * time.Second, 180 * time.Second}, [2]time.Duration{5 * time.Second, 30 * time.Second}, 10
	}
	runs := chaosServers(t)
	if runs["versitygw"] {
		t.Run("versitygw", func(t *testing.T) { chaosRun(t, chaosNamed{startServer(t, "s3", true), "versitygw"}, net) })
	}
	// A shorter run on each emulator: the same faults (the emulator
	// killed and restarted on its files, producers killed, a zombie, a
	// mount killed), fewer batches.
	short := o
	if !soak {
		short.Batches, short.MinChaos = 16, 20*time.Second
	}
	if runs["fake-gcs-server"] {
		t.Run("fake-gcs-server", func(t *testing.T) { chaosRun(t, chaosNamed{startServer(t, "gs", true), "fake-gcs-server"}, short) })
	}
	if runs["azurite"] {
		t.Run("azurite", func(t *testing.T) { chaosRun(t, chaosNamed{startServer(t, "az", true), "azurite"}, short) })
	}
	if runs["seaweedfs"] {
		t.Run("seaweedfs", func(t *testing.T) {
			w := chaosStartWeed(t)
			o := net
			// Its conditional creates take seconds under contention.
			o.Batches /= 3
			chaosRun(t, w, o)
		})
	}
}

// chaosServers are the servers TestChaos runs on: LAKEFS_CHAOS_SERVERS
// (comma-separated) names them; by default versitygw and the two
// emulators, and under the soak versitygw and SeaweedFS.
func chaosServers(t *testing.T) map[string]bool {
	list := os.Getenv("LAKEFS_CHAOS_SERVERS")
	if list == "" {
		list = "versitygw,fake-gcs-server,azurite"
		if os.Getenv("LAKEFS_SOAK") != "" {
			list = "versitygw,seaweedfs"
		}
	}
	runs := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		switch n = strings.TrimSpace(n); n {
		case "versitygw", "fake-gcs-server", "azurite", "seaweedfs":
			runs[n] = true
		default:
			t.Fatalf("LAKEFS_CHAOS_SERVERS: no chaos server %q; use versitygw, fake-gcs-server, azurite or seaweedfs", n)
		}
	}
	return runs
}

// chaosStats is what the run counts.
type chaosStats struct {
	mu     sync.Mutex
	faults map[string]int // GUARDED_BY(mu)
	exits  map[string]int // GUARDED_BY(mu): processes that ended by themselves, by role and cause
	ends   []chaosExit    // GUARDED_BY(mu): the same, one by one
}

// chaosExit is one process ending by itself.
type chaosExit struct {
	who, kind, link, cause string
	line                   string // its last line of output
	started                bool   // it got going: mounted, or registered as the producer
	at                     time.Time
}

func (s *chaosStats) fault(kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[kind]++
}

func (s *chaosStats) exit(e chaosExit) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.exits[e.kind+" "+e.cause]++
	s.ends = append(s.ends, e)
}

// chaosSup keeps one process running: it restarts it whenever it exits
// until ctx ends. The injector signals the current incarnation.
type chaosSup struct {
	name  string
	kind  string
	link  string // the network link whose faults it sees: its own, a reader its mount's
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
			b := out.String()
			s.stats.exit(chaosExit{who: s.name, kind: s.kind, link: s.link, cause: chaosExitCause(b), line: lastLine(b),
				started: strings.Contains(b, "msg=mounted") || strings.Contains(b, `msg="producer registered"`), at: time.Now()})
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
// supervisor then starts the next one). A detached incarnation (a zombie
// to be) is not the supervisor's to kill: kill then says it did nothing.
func (s *chaosSup) kill() bool {
	s.mu.Lock()
	cmd, exited := s.cur, s.exited
	if cmd == nil || s.detach {
		s.mu.Unlock()
		return false
	}
	s.killed = true
	s.mu.Unlock()
	_ = cmd.Process.Kill()
	s.waitExit(exited)
	return true
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

// chaosRun runs the chaos against srv in phases: set up (the cluster
// starts), the fault loop (the writer writes while the faults go on),
// drain (the cluster quiets down), verification (every read against what
// the writer sealed, the store against its status) and the summary (with
// every stall attributed, and the liveness bound checked).
func chaosRun(t *testing.T, srv chaosServer, o chaosOptions) {
	c := chaosSetUp(t, srv, o)
	c.startCluster()
	ph := c.faultLoop()
	summarized := false
	defer func() {
		// A run that failed before its summary still says who stalled.
		if !summarized {
			c.logStalls(ph.monitor.stop())
		}
	}()
	want := c.drain()
	stalls := ph.monitor.stop()
	ph.training.stop()
	c.stop()

	sum := c.checkReads(want)
	sum.liveSteps, sum.dataObjs = c.checkStore(int64(len(want)))
	sum.server, sum.chaosTime, sum.zombies, sum.rescheduled = srv.Name(), ph.chaosTime, ph.zombies, ph.rescheduled
	sum.ckpts, sum.gcRuns, sum.steps = ph.training.ckpts, ph.training.gcRuns, int64(len(want))
	faults, outages := c.timeline.snapshot()
	sum.stalls = attribute(stalls, faults, outages)
	var names []string
	for _, n := range c.nodes {
		names = append(names, n.name)
	}
	checkHealthyLag(t, ph.monitor.lags, faults, outages, names)
	c.stats.mu.Lock()
	checkNetExits(t, c.stats.ends, faults)
	c.stats.mu.Unlock()
	c.summarize(sum)
	summarized = true
}

// chaosPhase is what the fault loop leaves running or learned.
type chaosPhase struct {
	chaosTime   time.Duration
	zombies     []string
	rescheduled []string
	training    *chaosTraining
	monitor     *chaosMonitor
}

// faultLoop starts the writer, training and the stall monitor, and
// injects faults until the writer is done and MinChaos has passed.
func (c *chaosCluster) faultLoop() chaosPhase {
	c.start = time.Now()
	w := c.startWriter()
	ph := chaosPhase{monitor: c.startMonitor(w.done), training: c.startTraining()}
	ph.zombies, ph.rescheduled = c.injectFaults(w.done)
	<-w.done
	if w.err != nil {
		c.t.Fatalf("writer: %v\n%s", w.err, w.stderr)
	}
	ph.chaosTime = time.Since(c.start)
	return ph
}

// chaosCluster is one chaos run's stream, staging disk and processes.
type chaosCluster struct {
	t        *testing.T
	srv      chaosServer
	o        chaosOptions
	bin      string // lakefs-produce
	writer   string // testdata/writer
	url      string
	staging  string // the tmpfs
	manifest string // the writer's record
	ids      []string
	dirs     map[string]string // producer id: its staging directory
	prods    map[string]*chaosSup
	nodes    []*chaosNode
	net      *chaosNet // nil: every process reaches the store directly
	// zombieRoot holds the staging directories of rescheduled zombies'
	// successors.
	zombieRoot string
	stats      *chaosStats
	timeline   *chaosTimeline
	start      time.Time // of the fault loop
	ctx        context.Context
	cancel     context.CancelFunc
	procs      sync.WaitGroup
}

// chaosProducers is how many `lakefs-produce run` processes commit.
const chaosProducers = 4

// chaosClocks are the machines' clocks, as offsets from the true time
// (hidden --clock-offset): minutes apart, as unsynchronised nodes' are.
// Decisions by time read the store's clock (docs/RELIABILITY.md, Clocks),
// so none of this may show.
var chaosClocks = map[string]string{"p0": "0s", "p1": "6m", "p2": "-3m", "p3": "0s", "a": "0s", "b": "-4m", "training": "7m"}

// chaosSetUp builds the binaries, creates the stream and the staging
// tmpfs, and says how to start each supervised process.
func chaosSetUp(t *testing.T, srv chaosServer, o chaosOptions) *chaosCluster {
	bin, writer := prdBins(t)
	mountBin := mntBuildMount(t)
	reader := filepath.Join(t.TempDir(), "reader")
	if out, err := exec.Command("go", "build", "-o", reader, "./testdata/reader").CombinedOutput(); err != nil {
		t.Fatalf("building the reader: %v\n%s", err, out)
	}
	url := srv.NewBucketURL(t)
	prdMust(t, bin, "init", "--store", url, "--ranks", strconv.Itoa(chaosRanks), "--snapshot-every", "50")

	root := t.TempDir()
	c := &chaosCluster{t: t, srv: srv, o: o, bin: bin, writer: writer, url: url,
		staging: filepath.Join(root, "staging"), manifest: filepath.Join(root, "manifest.jsonl"),
		dirs: map[string]string{}, prods: map[string]*chaosSup{},
		stats: &chaosStats{faults: map[string]int{}, exits: map[string]int{}}, timeline: &chaosTimeline{}}
	if err := os.Mkdir(c.staging, 0o755); err != nil {
		t.Fatal(err)
	}
	if o.Net {
		c.startNet()
		c.zombieRoot = t.TempDir()
	}
	if err := syscall.Mount("tmpfs", c.staging, "tmpfs", 0, "size="+o.TmpfsSize); err != nil {
		t.Fatalf("mounting a tmpfs for the staging disk: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(c.staging, syscall.MNT_DETACH) })
	for i := range chaosProducers {
		id := fmt.Sprintf("p%d", i)
		c.ids = append(c.ids, id)
		c.dirs[id] = filepath.Join(c.staging, id)
		if err := os.Mkdir(c.dirs[id], 0o755); err != nil {
			t.Fatal(err)
		}
		c.prods[id] = &chaosSup{name: "producer " + id, kind: "producer", link: "producer " + id, stats: c.stats, t: t, start: func() *exec.Cmd {
			return exec.Command(bin, "run", "--store", c.urlFor("producer "+id), "--staging", c.dirs[id], "--producer-id", id,
				"--poll", "100ms", "--max-lead", "40", "--progress", "log", "--clock-offset", chaosClocks[id])
		}}
	}
	for i, name := range []string{"a", "b"} {
		c.nodes = append(c.nodes, c.node(root, name, i, mountBin, reader))
	}
	return c
}

// node is training node name: a mount of its half of the ranks and its
// reader.
func (c *chaosCluster) node(root, name string, i int, mountBin, reader string) *chaosNode {
	t := c.t
	n := &chaosNode{name: name, mnt: filepath.Join(root, "mnt-"+name), out: filepath.Join(root, "read-"+name+".jsonl")}
	for r := i * chaosRanks / 2; r < (i+1)*chaosRanks/2; r++ {
		n.ranks = append(n.ranks, r)
	}
	if err := os.Mkdir(n.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	rs := strings.Trim(strings.Join(strings.Fields(fmt.Sprint(n.ranks)), ","), "[]")
	n.mount = &chaosSup{name: "mount " + name, kind: "mount", link: "mount " + name, stats: c.stats, t: t,
		reap: func() { mntAbortFUSE(t, n.mnt, true) },
		start: func() *exec.Cmd {
			return exec.Command(mountBin, "--store", c.urlFor("mount "+name), "--clock-offset", chaosClocks[name],
				"--ranks", rs, "--wait", "20s", "--node-id", "node-"+name,
				"--cache-size", "128MiB", "--prefetch-steps", "4", "--poll-interval", "50ms", "--heartbeat-interval", "1s", n.mnt)
		}}
	n.reader = &chaosSup{name: "reader " + name, kind: "reader", link: "mount " + name, stats: c.stats, t: t, start: func() *exec.Cmd {
		return exec.Command(reader, "-mnt", n.mnt, "-ranks", rs, "-out", n.out)
	}}
	return n
}

// startCluster starts the supervised producers, mounts and readers.
func (c *chaosCluster) startCluster() {
	c.ctx, c.cancel = context.WithCancel(context.Background())
	for _, p := range c.prods {
		c.procs.Go(func() { p.run(c.ctx) })
	}
	for _, n := range c.nodes {
		c.procs.Go(func() { n.mount.run(c.ctx) })
		waitFor(c.t, 30*time.Second, "mount "+n.name, func() bool {
			_, err := os.Stat(filepath.Join(n.mnt, "head"))
			return err == nil
		})
		c.procs.Go(func() { n.reader.run(c.ctx) })
	}
	c.t.Cleanup(func() {
		c.cancel()
		c.procs.Wait()
		for _, n := range c.nodes {
			_ = syscall.Unmount(n.mnt, syscall.MNT_DETACH)
		}
	})
}

// chaosWriter is the running writer process.
type chaosWriter struct {
	done   chan struct{} // closed when it has exited
	err    error         // its exit, once done
	stderr *prdOutput
}

// startWriter starts the writer: every sealed batch and every file's
// SHA-256 go to the manifest before _SEALED.
func (c *chaosCluster) startWriter() *chaosWriter {
	args := []string{"-manifest", c.manifest, "-ranks", strconv.Itoa(chaosRanks),
		"-from", "0", "-count", strconv.Itoa(c.o.Batches), "-seed", "11", "-pause", c.o.Pause.String()}
	for _, id := range c.ids {
		args = append(args, "-dir", id+"="+c.dirs[id])
	}
	cmd, _, stderr := prdCommand(c.ctx, c.writer, args...)
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	w := &chaosWriter{done: make(chan struct{}), stderr: stderr}
	go func() { w.err = cmd.Wait(); close(w.done) }()
	return w
}

// chaosTraining is training's side of the run: it checkpoints what both
// readers finished, then runs gc, every few seconds.
type chaosTraining struct {
	cancel        context.CancelFunc
	wg            sync.WaitGroup
	ckpts, gcRuns int // read after stop
}

func (tr *chaosTraining) stop() {
	tr.cancel()
	tr.wg.Wait()
}

func (c *chaosCluster) startTraining() *chaosTraining {
	tr := &chaosTraining{}
	ctx, cancel := context.WithCancel(c.ctx)
	tr.cancel = cancel
	tr.wg.Go(func() {
		last := int64(-1)
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(3 * time.Second):
			}
			done := min(chaosLastStep(c.nodes[0].out), chaosLastStep(c.nodes[1].out))
			if done > last {
				// The store may be down: a failed checkpoint or gc is retried
				// on the next round, as a training script would.
				if _, _, code, _ := prdExecCtx(ctx, c.bin, "checkpoint", "--store", c.url, "--clock-offset", chaosClocks["training"],
					"--step", strconv.FormatInt(done, 10)); code == 0 {
					last = done
					tr.ckpts++
				}
			}
			if _, _, code, _ := prdExecCtx(ctx, c.bin, "gc", "--store", c.url, "--clock-offset", chaosClocks["training"], "--grace", "2m"); code == 0 {
				tr.gcRuns++
			}
		}
	})
	return tr
}

// chaosKinds are the faults besides producer SIGKILLs; each is injected
// at least once.
var chaosKinds = []string{"mount SIGKILL", "mount SIGKILL", "producer SIGSTOP (zombie)", "producer SIGSTOP (hung)",
	"store SIGKILL", "store SIGTERM", "staging disk full", "mount SIGSTOP (hung)"}

// injectFaults injects each kind of fault at least once, in random order,
// then at random until the writer is done and MinChaos has passed.
// Producer SIGKILLs run on their own, more often; with a network, its
// faults and the rescheduled zombies run on their own too, mixed with
// the others. It returns how each woken zombie and each rescheduled
// zombie's old incarnation ended.
func (c *chaosCluster) injectFaults(writerDone <-chan struct{}) (zombies, rescheduled []string) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 16))
	chaosUntil := time.Now().Add(c.o.MinChaos)
	over := func() bool {
		select {
		case <-writerDone:
			return time.Now().After(chaosUntil)
		default:
			return false
		}
	}
	var loops sync.WaitGroup
	var mu sync.Mutex
	krng := rand.New(rand.NewPCG(rng.Uint64(), 1)) // each loop's rng is seeded here: rng is this goroutine's
	loops.Go(func() {
		for !over() && c.ctx.Err() == nil {
			time.Sleep(time.Second + time.Duration(krng.Int64N(int64(3*time.Second))))
			id := c.ids[krng.IntN(len(c.ids))]
			c.timeline.begin("producer SIGKILL " + id)
			if c.prods[id].kill() {
				c.stats.fault("producer SIGKILL")
			}
		}
	})
	if c.net != nil {
		nrng, zrng := rand.New(rand.NewPCG(rng.Uint64(), 2)), rand.New(rand.NewPCG(rng.Uint64(), 3))
		loops.Go(func() { c.faultLoopOf(chaosNetKinds, nrng, over, c.netFault) })
		loops.Go(func() {
			for !over() && c.ctx.Err() == nil {
				time.Sleep(3*time.Second + time.Duration(zrng.Int64N(int64(7*time.Second))))
				how := c.reschedule(c.ids[zrng.IntN(len(c.ids))], zrng)
				if how != "" {
					c.stats.fault("net zombie (rescheduled)")
					mu.Lock()
					rescheduled = append(rescheduled, how)
					mu.Unlock()
				}
			}
		})
	}
	var zombieWG sync.WaitGroup
	c.faultLoopOf(chaosKinds, rng, over, func(kind string, rng *rand.Rand) {
		if kind != "producer SIGSTOP (zombie)" {
			c.inject(kind, rng)
			return
		}
		// It is stopped for StopFor and then woken (in p.zombie).
		id := c.ids[rng.IntN(len(c.ids))]
		fi := c.timeline.begin(kind + " " + id)
		time.AfterFunc(c.o.StopFor, func() { c.timeline.end(fi, time.Now()) })
		p := c.prods[id]
		zombieWG.Go(func() {
			z := c.wakeZombie(p)
			mu.Lock()
			zombies = append(zombies, z)
			mu.Unlock()
		})
	})
	loops.Wait()
	zombieWG.Wait()
	return zombies, rescheduled
}

// faultLoopOf injects each of kinds once, in random order, 2-5 s apart,
// then kinds drawn at random until over.
func (c *chaosCluster) faultLoopOf(kinds []string, rng *rand.Rand, over func() bool, inject func(string, *rand.Rand)) {
	kinds = slices.Clone(kinds)
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for i := 0; (i < len(kinds) || !over()) && c.ctx.Err() == nil; i++ {
		kind := kinds[rng.IntN(len(kinds))]
		if i < len(kinds) {
			kind = kinds[i]
		}
		time.Sleep(2*time.Second + time.Duration(rng.Int64N(int64(3*time.Second))))
		c.stats.fault(kind)
		if !strings.HasPrefix(kind, "net ") {
			c.t.Logf("%6.1fs: %s", time.Since(c.start).Seconds(), kind)
		}
		inject(kind, rng)
	}
}

// wakeZombie SIGSTOPs p while the supervisor starts a new incarnation,
// wakes it and says how it ended. The zombie holds the staging
// directory's flock, so on one host its successors are refused ("staging
// directory in use") and no newer epoch exists: woken, it carries on as
// the producer until killed a minute later. A successor that took over
// anyway would fence it (exit non-zero, "fenced"); exit 0 is a failure.
func (c *chaosCluster) wakeZombie(p *chaosSup) string {
	code, tail := p.zombie(c.o.StopFor)
	c.t.Logf("zombie %s woke up and exited %d: %s", p.name, code, lastLine(tail))
	switch {
	case code == 0:
		c.t.Errorf("%s woke up as a zombie and exited 0; want it fenced or still the producer: %s", p.name, tail)
		return "exited 0"
	case code == -1:
		return "kept its staging lock, went on"
	case strings.Contains(strings.ToLower(tail), "fenced"):
		return "fenced"
	}
	return "exited " + strconv.Itoa(code) + ": " + chaosExitCause(tail)
}

// inject injects one fault of kind (not a zombie), records it on the
// timeline with its target, and returns when it is over.
func (c *chaosCluster) inject(kind string, rng *rand.Rand) {
	switch kind {
	case "mount SIGKILL":
		n := c.nodes[rng.IntN(len(c.nodes))]
		i := c.timeline.begin(kind + " " + n.name)
		n.reader.kill()
		n.mount.kill()
		c.timeline.end(i, time.Now())
	case "mount SIGSTOP (hung)":
		// Its reader blocks meanwhile; the mount answers again after.
		n := c.nodes[rng.IntN(len(c.nodes))]
		i := c.timeline.begin(kind + " " + n.name)
		n.mount.pause(c.o.StopFor)
		c.timeline.end(i, time.Now())
	case "producer SIGSTOP (hung)":
		id := c.ids[rng.IntN(len(c.ids))]
		i := c.timeline.begin(kind + " " + id)
		c.prods[id].pause(c.o.StopFor)
		c.timeline.end(i, time.Now())
	case "store SIGKILL", "store SIGTERM":
		c.storeOutage(kind)
	case "staging disk full":
		i := c.timeline.begin(kind)
		chaosFillDisk(c.t, c.staging, c.o.StopFor)
		c.timeline.end(i, time.Now())
	}
}

// storeOutage stops the S3 server, restarts it after Outage and returns
// once it accepts a write again: the outage's end on the timeline.
func (c *chaosCluster) storeOutage(kind string) {
	sig := syscall.SIGKILL
	if kind == "store SIGTERM" {
		sig = syscall.SIGTERM
	}
	i := c.timeline.begin(kind)
	c.timeline.storeDown()
	c.srv.Stop(sig)
	time.Sleep(c.o.Outage)
	if err := c.srv.Restart(); err != nil {
		c.t.Fatalf("restarting %s: %v", c.srv.Name(), err)
	}
	up, err := waitStoreWrites(c.ctx, c.url)
	if err != nil {
		c.t.Errorf("%s: %v", c.srv.Name(), err)
	}
	c.timeline.storeUp(up)
	c.timeline.end(i, up)
}

// drain lets the supervised producers drain their staging directories and
// the readers read to the head, and returns what the writer sealed.
func (c *chaosCluster) drain() map[string]prdRecord {
	t := c.t
	for id, dir := range c.dirs {
		if !within(3*time.Minute, func() bool {
			left, err := prdSealed(dir)
			return err == nil && len(left) == 0
		}) {
			left, _ := prdSealed(dir)
			t.Fatalf("producer %s: sealed batches %v left in %s after 3 min of quiet\nreaders at %d, %d\ncurrent incarnation:\n%s\nlast exit:\n%s",
				id, left, dir, chaosLastStep(c.nodes[0].out), chaosLastStep(c.nodes[1].out), c.prods[id].tail(), c.prods[id].last)
		}
	}
	want := prdReadManifest(t, c.manifest)
	if len(want) != chaosProducers*c.o.Batches {
		t.Fatalf("the writer recorded %d batches, want %d", len(want), chaosProducers*c.o.Batches)
	}
	total := int64(len(want))
	for _, n := range c.nodes {
		if !within(3*time.Minute, func() bool { return chaosLastStep(n.out) >= total-1 }) {
			t.Fatalf("reader %s: read up to step %d of %d in 3 min of quiet\nreader: %s\nmount: %s",
				n.name, chaosLastStep(n.out), total-1, n.reader.last, n.mount.last)
		}
	}
	return want
}

// stop stops every supervised process and checks the staging directories
// were left empty.
func (c *chaosCluster) stop() {
	c.cancel()
	c.procs.Wait()
	for _, id := range c.ids {
		prdCheckStagingEmpty(c.t, c.dirs[id])
	}
}

// chaosSummary is what the run ends with.
type chaosSummary struct {
	server                   string
	chaosTime, stall         time.Duration
	zombies                  []string // how each woken zombie ended
	rescheduled              []string // how each rescheduled zombie's old incarnation ended
	ckpts, gcRuns            int
	steps, files, bytesRead  int64
	mismatches, dups, losses int64
	liveSteps                int
	dataObjs                 int
	stalls                   []chaosStallRow
}

// checkReads checks that each reader read every step once, contiguous
// from 0, each the batch the writer sealed with every file of the node's
// ranks byte for byte, and that every sealed batch is a step.
func (c *chaosCluster) checkReads(want map[string]prdRecord) chaosSummary {
	var sum chaosSummary
	stepOf := map[string]int64{}
	for _, n := range c.nodes {
		steps, err := chaosReaderSteps(n.out)
		if err != nil {
			c.t.Fatal(err)
		}
		for i, s := range steps {
			if s.Step != int64(i) {
				c.t.Errorf("reader %s: record %d is step %d: steps are not contiguous from 0", n.name, i, s.Step)
				break
			}
			sum.stall = max(sum.stall, time.Duration(s.WaitedMS)*time.Millisecond)
			k := prdKey(s.Producer, s.Batch)
			if prev, ok := stepOf[k]; ok && prev != s.Step {
				sum.dups++
				c.t.Errorf("batch %s is step %d and step %d", k, prev, s.Step)
			}
			stepOf[k] = s.Step
			c.checkStep(n, s, want[k], &sum)
		}
	}
	for k := range want {
		if _, ok := stepOf[k]; !ok {
			sum.losses++
			c.t.Errorf("sealed batch %s is no step", k)
		}
	}
	for _, w := range want {
		sum.stall = max(sum.stall, time.Duration(w.WaitedMS)*time.Millisecond)
	}
	return sum
}

// checkStep checks one step node n read against rec, the batch the writer
// sealed under the same name.
func (c *chaosCluster) checkStep(n *chaosNode, s chaosStep, rec prdRecord, sum *chaosSummary) {
	k := prdKey(s.Producer, s.Batch)
	if !rec.Sealed {
		sum.mismatches++
		c.t.Errorf("node %s step %d: batch %q was never sealed by the writer", n.name, s.Step, k)
		return
	}
	wantFiles := map[string]prdFile{}
	for _, f := range rec.Files {
		if f.Rank == -1 || slices.Contains(n.ranks, f.Rank) {
			wantFiles[fmt.Sprintf("%d/%s", f.Rank, f.Name)] = f
		}
	}
	for _, f := range s.Files {
		sum.files++
		sum.bytesRead += f.Size
		key := fmt.Sprintf("%d/%s", f.Rank, f.Name)
		w, ok := wantFiles[key]
		delete(wantFiles, key)
		if !ok || w.SHA256 != f.SHA256 || w.Size != f.Size {
			sum.mismatches++
			c.t.Errorf("node %s step %d (%s) file rank %d %s: read %d bytes sha256 %.12s, writer wrote %d bytes sha256 %.12s",
				n.name, s.Step, k, f.Rank, f.Name, f.Size, f.SHA256, w.Size, w.SHA256)
		}
	}
	for key := range wantFiles {
		sum.mismatches++
		c.t.Errorf("node %s step %d (%s): file %s missing", n.name, s.Step, k, key)
	}
}

// checkStore checks the stream verifies, ends at step total-1, and after a
// final checkpoint at the head and gc without grace holds in data/
// exactly what the live steps need. It returns the live steps and data
// objects left.
func (c *chaosCluster) checkStore(total int64) (live, dataObjs int) {
	t, bin, url := c.t, c.bin, c.url
	if out, errs, code := prdExec(t, bin, "verify", "--store", url); code != 0 {
		t.Errorf("verify: exit %d\n%s\n%s", code, out, errs)
	}
	st := prdGetStatus(t, bin, url)
	if st.Head == nil || *st.Head != total-1 {
		t.Errorf("status: head %v, want %d", st.Head, total-1)
	}
	prdMust(t, bin, "checkpoint", "--store", url, "--step", strconv.FormatInt(total-1, 10))
	// A gc the chaos killed may still hold the gc lease (stale after two
	// minutes by the store's clock): until then the final gc says another
	// gc runs and does nothing.
	for deadline := time.Now().Add(3 * time.Minute); ; {
		out := prdMust(t, bin, "gc", "--store", url, "--grace", "0s")
		if !strings.Contains(out, "another gc is running") || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Second)
	}
	st = prdGetStatus(t, bin, url)
	dataObjs, dataBytes := chaosListData(t, url)
	if dataBytes != st.DataBytes {
		t.Errorf("after the final gc data/ holds %d objects of %d bytes; the %d live steps need %d bytes", dataObjs, dataBytes, st.Live.Count, st.DataBytes)
	}
	if out, errs, code := prdExec(t, bin, "verify", "--store", url); code != 0 {
		t.Errorf("verify after the final gc: exit %d\n%s\n%s", code, out, errs)
	}
	return int(st.Live.Count), dataObjs
}

// summarize logs the run's table and fails it if a kind of fault was
// never injected.
func (c *chaosCluster) summarize(sum chaosSummary) {
	c.stats.mu.Lock()
	defer c.stats.mu.Unlock()
	var table strings.Builder
	tw := tabwriter.NewWriter(&table, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "server\t%s\t\n", sum.server)
	fmt.Fprintf(tw, "chaos phase\t%s\t\n", sum.chaosTime.Round(time.Second))
	for _, k := range slices.Sorted(maps.Keys(c.stats.faults)) {
		fmt.Fprintf(tw, "fault: %s\t%d\t\n", k, c.stats.faults[k])
	}
	for _, k := range slices.Sorted(maps.Keys(c.stats.exits)) {
		fmt.Fprintf(tw, "exited by itself: %s\t%d\t\n", k, c.stats.exits[k])
	}
	zc := map[string]int{}
	for _, z := range sum.zombies {
		zc[z]++
	}
	for _, z := range slices.Sorted(maps.Keys(zc)) {
		fmt.Fprintf(tw, "zombie woken: %s\t%d\t\n", z, zc[z])
	}
	rc := map[string]int{}
	for _, z := range sum.rescheduled {
		rc[z]++
	}
	for _, z := range slices.Sorted(maps.Keys(rc)) {
		fmt.Fprintf(tw, "rescheduled zombie: %s\t%d\t\n", z, rc[z])
	}
	fmt.Fprintf(tw, "checkpoints / gc runs\t%d / %d\t\n", sum.ckpts, sum.gcRuns)
	fmt.Fprintf(tw, "steps\t%d\t\n", sum.steps)
	fmt.Fprintf(tw, "files read\t%d\t\n", sum.files)
	fmt.Fprintf(tw, "bytes read\t%d\t\n", sum.bytesRead)
	fmt.Fprintf(tw, "mismatches\t%d\t\n", sum.mismatches)
	fmt.Fprintf(tw, "duplicates\t%d\t\n", sum.dups)
	fmt.Fprintf(tw, "losses\t%d\t\n", sum.losses)
	fmt.Fprintf(tw, "longest stall\t%s\t\n", sum.stall.Round(time.Millisecond))
	fmt.Fprintf(tw, "live steps / data objects after gc\t%d / %d\t\n", sum.liveSteps, sum.dataObjs)
	_ = tw.Flush()
	writeStallTable(&table, sum.stalls, c.start)
	if c.net != nil {
		writeHealTable(&table, sum.stalls)
	}
	c.t.Logf("chaos summary:\n%s", table.String())
	for _, r := range sum.stalls {
		if r.healed != nil && r.bound == r.healToProgress && r.bound > chaosHealBound {
			c.t.Errorf("liveness: %s waited %s for %s; %s from %s healing to progress exceeds %s",
				r.who, r.end.Sub(r.start).Round(time.Second), r.what, r.bound.Round(time.Second), r.healed.what, chaosHealBound)
		}
		if r.bound > chaosLivenessBound {
			c.t.Errorf("liveness: %s waited %s for %s; %s from the store being back up (or the stall's start) to progress exceeds %s",
				r.who, r.end.Sub(r.start).Round(time.Second), r.what, r.bound.Round(time.Second), chaosLivenessBound)
		}
	}
	want := []string{"producer SIGKILL", "mount SIGKILL", "producer SIGSTOP (zombie)", "store SIGKILL", "store SIGTERM", "staging disk full"}
	if c.net != nil {
		want = append(want, chaosNetKinds...)
		if rc["fenced"] < c.o.Rescheduled {
			c.t.Errorf("%d rescheduled zombies were fenced; the run must see at least %d", rc["fenced"], c.o.Rescheduled)
		}
	}
	for _, k := range want {
		if c.stats.faults[k] == 0 {
			c.t.Errorf("no %s was injected: the run did not test it", k)
		}
	}
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

// chaosListData lists the stream's data/ objects through the store.
func chaosListData(t testing.TB, url string) (objects int, bytes int64) {
	t.Helper()
	s, err := store.Open(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	err = store.Walk(t.Context(), s, "data/", "", func(o store.Info) error {
		objects++
		bytes += o.Size
		return nil
	})
	if err != nil {
		t.Fatalf("listing data/: %v", err)
	}
	return objects, bytes
}
