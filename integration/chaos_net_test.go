package integration

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/lakestream/lakestream/internal/toxitest"
)

// The chaos run's network: every process reaches the store through its
// own link of one Toxiproxy server (internal/toxitest), so that a fault on
// a link hits one node (a mount, a producer) while the others stay
// healthy. The checkpoints, gc, the stall monitor and the harness's own
// store checks go direct: they are the operator, not a node.

// chaosNetKinds are the network faults, each on one link; each is
// injected at least once in a run with a network. The rescheduled zombie
// ("net zombie (rescheduled)", reschedule) runs on its own besides.
var chaosNetKinds = []string{"net partition mount", "net partition producer", "net slow link", "net half-open", "net cut bodies", "net reset", "net refused", "net storm (one node)"}

// chaosNet is a run's Toxiproxy server and its links, by process name.
type chaosNet struct {
	tox      *toxitest.Server
	upstream string // the store server's host:port

	mu        sync.Mutex
	links     map[string]*toxitest.Link // GUARDED_BY(mu)
	zombieSeq int                       // GUARDED_BY(mu)
	zombieOn  bool                      // GUARDED_BY(mu): one rescheduled zombie at a time
	busy      map[string]bool           // GUARDED_BY(mu): links a fault holds
}

// claim gives link name to one fault until release: two faults on one
// link would undo each other (the first heal heals both), and a zombie
// whose link another fault holds after its heal cannot learn it was
// fenced (the soak's SeaweedFS run refused p3's link for 88 s of the
// two minutes its old incarnation had).
func (n *chaosNet) claim(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.busy[name] {
		return false
	}
	n.busy[name] = true
	return true
}

func (n *chaosNet) release(name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.busy, name)
}

// urlFor is the store URL process name uses: through its own link when
// the run has a network, else c.url.
func (c *chaosCluster) urlFor(name string) string {
	if c.net == nil {
		return c.url
	}
	u, err := c.net.link(c, name).Via(c.url)
	if err != nil {
		c.t.Errorf("routing %s through its link: %v", name, err)
		return c.url
	}
	return u
}

// link is the link of process name, made on first use.
func (n *chaosNet) link(c *chaosCluster, name string) *toxitest.Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	if l, ok := n.links[name]; ok {
		return l
	}
	l := n.tox.Link(c.t, strings.ReplaceAll(name, " ", "-"), n.upstream)
	n.links[name] = l
	return l
}

// startNet starts the run's Toxiproxy server.
func (c *chaosCluster) startNet() {
	up, err := toxitest.Upstream(c.url)
	if err != nil {
		c.t.Fatalf("a chaos run with a network needs a store URL with endpoint=: %v", err)
	}
	c.net = &chaosNet{tox: toxitest.Start(c.t), upstream: up, links: map[string]*toxitest.Link{}, busy: map[string]bool{}}
}

// between draws a duration in [r[0], r[1]].
func between(rng *rand.Rand, r [2]time.Duration) time.Duration {
	return r[0] + time.Duration(rng.Int64N(int64(r[1]-r[0])+1))
}

// netFault injects one network fault of kind (not the rescheduled
// zombie) on one link, holds it, heals it, and records it on the
// timeline from its start to the heal.
func (c *chaosCluster) netFault(kind string, rng *rand.Rand) {
	// One link at a time is a zombie's, so another target is free.
	target := c.netTarget(kind, rng)
	for !c.net.claim(target) {
		time.Sleep(100 * time.Millisecond)
		target = c.netTarget(kind, rng)
	}
	defer c.net.release(target)
	l := c.net.link(c, target)
	d := between(rng, c.o.NetFor)
	var err error
	switch kind {
	case "net partition mount", "net partition producer":
		err = l.Partition()
	case "net slow link":
		d = between(rng, c.o.SlowFor)
		err = l.Slow(int64(2+rng.IntN(19))<<20, time.Duration(20+rng.IntN(181))*time.Millisecond, 20*time.Millisecond)
	case "net half-open":
		err = l.HalfOpen()
	case "net cut bodies":
		err = l.CutAfter(int64(16<<10 + rng.IntN(4<<20)))
	case "net reset":
		err = l.Reset(time.Duration(rng.IntN(500)) * time.Millisecond)
	case "net refused":
		err = l.Refuse()
	case "net storm (one node)":
		d = between(rng, c.o.SlowFor)
		err = l.Storm(int64(2+rng.IntN(8))<<20, time.Duration(50+rng.IntN(150))*time.Millisecond, 40*time.Millisecond)
	}
	if err != nil {
		c.t.Errorf("%s on %s: %v", kind, target, err)
		return
	}
	i := c.timeline.beginNet(kind+" "+target, target)
	c.t.Logf("%6.1fs: %s on %s for %s", time.Since(c.start).Seconds(), kind, target, d.Round(time.Second))
	time.Sleep(d)
	if err := l.Heal(); err != nil {
		c.t.Errorf("healing %s: %v", target, err)
	}
	c.timeline.end(i, time.Now())
}

// netTarget picks the process a fault hits: a mount for the mount
// partition and the storm (everything at once on one node), a producer
// for the producer partition, either for the others.
func (c *chaosCluster) netTarget(kind string, rng *rand.Rand) string {
	mount := "mount " + c.nodes[rng.IntN(len(c.nodes))].name
	prod := "producer " + c.ids[rng.IntN(len(c.ids))]
	switch {
	case strings.Contains(kind, "mount"), strings.Contains(kind, "storm"):
		return mount
	case strings.Contains(kind, "producer"):
		return prod
	case rng.IntN(2) == 0:
		return mount
	}
	return prod
}

// reschedule is the rescheduled zombie: producer id's node is partitioned
// from the store and, while it is, a new incarnation with the same
// --producer-id starts elsewhere (its own link) on another staging
// directory holding the same sealed batches, as a rescheduled pod
// rebuilds them from its cursor, and commits them. Then the partition
// heals and the old incarnation carries on: it must be fenced by the new
// epoch (exit non-zero, "fenced") and commit nothing. The supervisor's
// next incarnation on the original directory waits for the old one's
// lock, then finds the batches the new one committed and removes them
// (exactly once is checked by the run's end). It returns how the old
// incarnation ended.
func (c *chaosCluster) reschedule(id string, rng *rand.Rand) string {
	c.net.mu.Lock()
	if c.net.zombieOn {
		c.net.mu.Unlock()
		return ""
	}
	c.net.zombieOn = true
	c.net.zombieSeq++
	seq := c.net.zombieSeq
	c.net.mu.Unlock()
	defer func() {
		c.net.mu.Lock()
		c.net.zombieOn = false
		c.net.mu.Unlock()
	}()

	name := "producer " + id
	if !c.net.claim(name) {
		return "" // a network fault holds its link; the loop picks again
	}
	defer c.net.release(name)
	l := c.net.link(c, name)
	if err := l.Partition(); err != nil {
		c.t.Errorf("partitioning %s: %v", name, err)
		return ""
	}
	old, ok := c.prods[id].detachRunning()
	if !ok {
		_ = l.Heal()
		return ""
	}
	fi := c.timeline.beginNet("net zombie (rescheduled) "+id, name)
	dir := filepath.Join(c.zombieRoot, fmt.Sprintf("%s-z%d", id, seq))
	copied, err := chaosCopySealed(c.dirs[id], dir)
	if err != nil {
		c.t.Errorf("rebuilding %s's staging directory: %v", id, err)
	}
	succ, out := c.startSuccessor(id, seq, dir)
	d := between(rng, c.o.ZombieFor)
	// The partition lasts at least d and until the new incarnation has
	// committed what it was given (at most 2 min).
	deadline := time.Now().Add(2 * time.Minute)
	time.Sleep(d)
	for time.Now().Before(deadline) {
		if left, err := prdSealed(dir); err == nil && len(left) == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := l.Heal(); err != nil {
		c.t.Errorf("healing %s: %v", name, err)
	}
	healed := time.Now()
	c.timeline.end(fi, healed)
	code, tail := c.waitFenced(old, healed)
	_ = succ.Process.Signal(syscall.SIGTERM)
	_ = succ.Wait()
	how := c.zombieOutcome(id, code, tail)
	c.t.Logf("rescheduled zombie %s (%d batches given to its successor): the old incarnation %s; successor: %s",
		id, copied, how, lastLine(out.String()))
	return how
}

// waitFenced waits for a rescheduled zombie's old incarnation to end:
// until it has had 2 minutes of the store up since its partition healed
// (it learns it was fenced from the log, which it cannot read while the
// store is down; SeaweedFS takes up to 2 minutes to restart), at most 8
// minutes in all, and returns its exit code (-1: it had to be stopped)
// and the end of its output.
func (c *chaosCluster) waitFenced(old chaosIncarnation, healed time.Time) (int, string) {
	const up, most = 2 * time.Minute, 8 * time.Minute
	for {
		deadline := healed.Add(up)
		_, outages := c.timeline.snapshot()
		for _, o := range outages {
			switch {
			case o.up.IsZero():
				deadline = time.Now().Add(up) // down now
			case o.up.After(healed):
				deadline = later(deadline, o.up.Add(up))
			}
		}
		left := time.Until(earlier(deadline, healed.Add(most)))
		if left <= 0 {
			select {
			case <-old.exited:
				return old.ended()
			default:
				return old.quit()
			}
		}
		select {
		case <-old.exited:
			return old.ended()
		case <-time.After(min(left, time.Second)):
		}
	}
}

// zombieOutcome says how a rescheduled zombie's old incarnation ended;
// anything but fenced is an error: a partitioned producer that comes back
// beside its successor must not go on.
func (c *chaosCluster) zombieOutcome(id string, code int, tail string) string {
	switch {
	case code == 0:
		c.t.Errorf("producer %s: the old incarnation exited 0 after its successor took over; want it fenced: %s", id, tail)
		return "exited 0"
	case code == -1:
		c.t.Errorf("producer %s: the old incarnation still ran 2 minutes (of the store up) after the partition healed beside its successor; want it fenced; its output and stacks:\n%s", id, tail)
		return "still running"
	case strings.Contains(strings.ToLower(tail), "fenced"):
		return "fenced"
	}
	c.t.Errorf("producer %s: the old incarnation exited %d, not fenced: %s", id, code, tail)
	return fmt.Sprintf("exited %d: %s", code, chaosExitCause(tail))
}

// startSuccessor starts the rescheduled incarnation of producer id on dir,
// through its own link.
func (c *chaosCluster) startSuccessor(id string, seq int, dir string) (*exec.Cmd, *prdOutput) {
	url := c.urlFor(fmt.Sprintf("successor %s %d", id, seq))
	cmd := exec.Command(c.bin, "run", "--store", url, "--staging", dir, "--producer-id", id,
		"--poll", "100ms", "--max-lead", "40", "--progress", "log")
	out := &prdOutput{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		c.t.Fatalf("starting %s's successor: %v", id, err)
	}
	return cmd, out
}

// chaosIncarnation is a process the supervisor has let go.
type chaosIncarnation struct {
	cmd    *exec.Cmd
	exited <-chan struct{}
	out    *prdOutput
}

// ended returns the exit code of an incarnation that has exited and the
// end of its output.
func (in chaosIncarnation) ended() (int, string) {
	b := in.out.String()
	return in.cmd.ProcessState.ExitCode(), b[max(0, len(b)-1500):]
}

// quit stops one still running with SIGQUIT, so that its output ends with
// every goroutine's stack (where it waits), and returns -1 and the end of
// its output.
func (in chaosIncarnation) quit() (int, string) {
	_ = in.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-in.exited:
	case <-time.After(10 * time.Second):
		_ = in.cmd.Process.Kill()
		<-in.exited
	}
	b := in.out.String()
	return -1, b[max(0, len(b)-20000):]
}

// detachRunning lets the current incarnation go on unsupervised (it is
// neither killed nor waited for by the supervisor, which starts the next
// one at once) and returns it. Only an incarnation that is the producer
// (it has registered) is let go: one still waiting for the staging
// directory's lock (a SIGSTOPped zombie holds it) would never commit, so
// it could not be a zombie that comes back.
func (s *chaosSup) detachRunning() (chaosIncarnation, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || s.detach || !strings.Contains(s.out.String(), `msg="producer registered"`) {
		return chaosIncarnation{}, false
	}
	select {
	case <-s.exited:
		return chaosIncarnation{}, false
	default:
	}
	s.detach = true
	close(s.detachCh)
	return chaosIncarnation{cmd: s.cur, exited: s.exited, out: s.out}, true
}

// chaosCopySealed copies the sealed batches of src into dst (made here),
// each batch's _SEALED last, as a writer would; a batch that vanishes
// while it is copied (its commit removed it) is left out. It returns how
// many it copied.
func chaosCopySealed(src, dst string) (int, error) {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return 0, err
	}
	names, err := prdSealed(src)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		err := chaosCopyTree(filepath.Join(src, name), filepath.Join(dst, name))
		if err == nil {
			err = os.WriteFile(filepath.Join(dst, name, "_SEALED"), nil, 0o644)
		}
		if errors.Is(err, fs.ErrNotExist) {
			_ = os.RemoveAll(filepath.Join(dst, name))
			continue
		}
		if err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// chaosCopyTree copies a batch directory but its _SEALED.
func chaosCopyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case rel == "_SEALED":
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(to)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}
