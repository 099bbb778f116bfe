package sim

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// config is one run's world, all drawn from its seed.
type config struct {
	ranks     int
	producers int
	consumers int
	batches   int // per producer
	gcs       int // standalone gc processes
	runGC     bool
	maxLead   int64
	retain    int
	grace     time.Duration // standalone gc's --grace
	runGrace  time.Duration // run's --gc-grace
	minGrace  time.Duration
	length    time.Duration // faults and writes happen in [0, length)
	drain     time.Duration // then everything must finish within this
	nested    string        // "": no second stream; "nested" or "neighbour"
	skew      map[string]time.Duration
	// consumerTimeout is the heartbeat age past which a consumer no longer
	// holds anything (txn.ConsumerTimeout; nobody in the run changes it).
	consumerTimeout time.Duration
}

// window is one scheduled fault: active in [from, to).
type window struct {
	from, to time.Time
	kind     string
	node     string // probe: the machine whose clock probes fail
	rate     float64
	d        time.Duration
}

// faultSet is what is active at one moment for one call.
type faultSet struct {
	down, probe                 bool
	errRate, lostRate, slowRate float64
	slow, staleList             time.Duration
}

func (w *world) faultsAt(t time.Time, node, key string) faultSet {
	var f faultSet
	for _, x := range w.windows {
		if t.Before(x.from) || !t.Before(x.to) {
			continue
		}
		switch x.kind {
		case "down":
			f.down = true
		case "probe":
			f.probe = f.probe || (x.node == node && strings.Contains(key, store.ProbePrefix))
		case "errors":
			f.errRate = max(f.errRate, x.rate)
		case "lost":
			f.lostRate = max(f.lostRate, x.rate)
		case "slow":
			f.slowRate, f.slow = max(f.slowRate, x.rate), max(f.slow, x.d)
		case "stale-list":
			f.staleList = max(f.staleList, x.d)
		}
	}
	return f
}

// faultTime is how much the store's faults can delay a process in the
// span from t: the time in it the store is down or failing calls (a check
// of a dozen reads rarely gets through a third of them failing) or
// slowing calls, and one slow call's length when calls are slow in it.
func (w *world) faultTime(t time.Time, span time.Duration) time.Duration {
	var d, slow time.Duration
	end := t.Add(span)
	for _, x := range w.windows {
		from, to := x.from, x.to
		if from.Before(t) {
			from = t
		}
		if to.After(end) {
			to = end
		}
		if !to.After(from) {
			continue
		}
		switch x.kind {
		case "down", "errors", "lost":
			d += to.Sub(from)
		case "slow":
			// Any call in it may be slow, and a fence check or a commit
			// is several calls in a row: the whole window, and one more
			// slow call begun at its end.
			d += to.Sub(from)
			slow = max(slow, x.d)
		}
	}
	return d + slow
}

// stats are one run's counts, for the table.
type stats struct {
	versions, tgbs, reclaims, deleted int64
	checks                            int64
	reads, bytesRead                  int64
	faults                            map[string]int64
}

// world is one simulated run: the shared store, the model of its streams,
// the fault schedule and the log of events.
type world struct {
	seed    uint64
	cfg     config
	rng     *rand.Rand // setup only (one goroutine)
	start   time.Time
	ctx     context.Context // the run's; cancelled when it ends or fails
	stop    context.CancelFunc
	mem     store.Store
	windows []window // fixed at setup
	verbose bool
	tmp     string // staging directories

	mu        sync.Mutex
	streams   []*streamModel
	created   map[string]time.Time    // GUARDED_BY(mu): when each key was first written
	sealed    map[batchKey]*batchSpec // GUARDED_BY(mu)
	regs      map[string]uint64       // GUARDED_BY(mu): the epoch each incarnation registered
	handles   []*handle               // GUARDED_BY(mu): every incarnation's store
	running   map[string]bool         // GUARDED_BY(mu): incarnations of run and of mounts not returned yet
	events    []string                // GUARDED_BY(mu): the newest maxEvents
	nevents   int
	failure   string // GUARDED_BY(mu): the first invariant broken
	stats     stats  // GUARDED_BY(mu)
	settingUp bool   // GUARDED_BY(mu)
}

const maxEvents = 60

func (w *world) event(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.eventLocked(format, args...)
}

func (w *world) eventLocked(format string, args ...any) {
	line := fmt.Sprintf("%9s  ", fmtDur(time.Since(w.start))) + fmt.Sprintf(format, args...)
	if w.verbose {
		fmt.Println(line)
	}
	w.nevents++
	if len(w.events) == maxEvents {
		w.events = w.events[1:]
	}
	w.events = append(w.events, line)
}

func fmtDur(d time.Duration) string {
	d = d.Round(time.Millisecond)
	return fmt.Sprintf("%d:%02d.%03d", int(d.Minutes()), int(d.Seconds())%60, d.Milliseconds()%1000)
}

func (w *world) count(kind string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stats.faults[kind]++
}

func (w *world) young(key string, d time.Duration) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.created[key]
	return ok && time.Since(c) < d
}

// started and ended track the incarnations that run: one that never
// returns is named.
func (w *world) started(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.running[name] = true
}

func (w *world) ended(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.running, name)
}

func (w *world) runningNow() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Sorted(maps.Keys(w.running))
}

func (w *world) failed() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.failure
}

// fail records a broken invariant found outside the store's hooks (a
// reader's bytes, a stall).
func (w *world) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failf(format, args...)
}

// newConfig draws a world from the seed.
func newConfig(rng *rand.Rand) config {
	c := config{
		ranks:           1 + rng.IntN(4),
		producers:       1 + rng.IntN(8),
		consumers:       1 + rng.IntN(6),
		batches:         3 + rng.IntN(10),
		gcs:             rng.IntN(3),
		runGC:           rng.IntN(2) == 0,
		retain:          1 + rng.IntN(3),
		grace:           time.Duration(1+rng.IntN(5)) * time.Minute,
		runGrace:        time.Duration(1+rng.IntN(5)) * time.Minute,
		length:          time.Duration(10+rng.IntN(16)) * time.Minute,
		drain:           15 * time.Minute,
		skew:            map[string]time.Duration{},
		consumerTimeout: txn.ConsumerTimeout,
	}
	if rng.IntN(3) == 0 {
		c.maxLead = int64(2 + rng.IntN(8))
	}
	switch rng.IntN(4) {
	case 0:
		c.nested = "nested"
	case 1:
		c.nested = "neighbour"
	}
	c.minGrace = c.grace
	if c.runGC {
		c.minGrace = min(c.grace, c.runGrace)
	}
	return c
}

// skewOf is a machine's clock error: up to 6 minutes either way (none
// for a third of them), drawn once per machine.
func (w *world) skewOf(node string) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if d, ok := w.cfg.skew[node]; ok {
		return d
	}
	r := rand.New(rand.NewPCG(w.seed, hashString("skew "+node)))
	d := time.Duration(r.Int64N(int64(12*time.Minute))) - 6*time.Minute
	if r.IntN(3) == 0 {
		d = 0
	}
	w.cfg.skew[node] = d
	return d
}

// scheduleFaults draws the store's faults for [start, start+length).
// judges are the nodes that decide by age (gc, --max-lead): two of three
// clock probe faults hit one of them.
func (w *world) scheduleFaults(nodes, judges []string) {
	at := func() time.Time { return w.start.Add(time.Duration(w.rng.Int64N(int64(w.cfg.length)))) }
	add := func(kind string, d time.Duration, x window) {
		x.kind, x.from = kind, at()
		x.to = x.from.Add(d)
		if end := w.start.Add(w.cfg.length); x.to.After(end) {
			x.to = end
		}
		w.windows = append(w.windows, x)
	}
	for range w.rng.IntN(4) {
		add("errors", time.Duration(10+w.rng.IntN(170))*time.Second, window{rate: 0.05 + 0.4*w.rng.Float64()})
	}
	for range w.rng.IntN(4) {
		add("lost", time.Duration(10+w.rng.IntN(170))*time.Second, window{rate: 0.05 + 0.3*w.rng.Float64()})
	}
	for range w.rng.IntN(3) {
		add("slow", time.Duration(10+w.rng.IntN(110))*time.Second, window{rate: 0.02 + 0.2*w.rng.Float64(), d: time.Duration(5+w.rng.IntN(115)) * time.Second})
	}
	for range w.rng.IntN(3) {
		add("down", time.Duration(5+w.rng.IntN(175))*time.Second, window{})
	}
	for range w.rng.IntN(3) {
		add("stale-list", time.Duration(30+w.rng.IntN(270))*time.Second, window{d: time.Duration(1+w.rng.IntN(30)) * time.Second})
	}
	for range w.rng.IntN(4) {
		node := nodes[w.rng.IntN(len(nodes))]
		if len(judges) > 0 && w.rng.IntN(3) > 0 {
			node = judges[w.rng.IntN(len(judges))]
		}
		add("probe", time.Duration(1+w.rng.IntN(15))*time.Minute, window{node: node})
	}
	slices.SortFunc(w.windows, func(a, b window) int { return a.from.Compare(b.from) })
}

// describe is the run's world in one paragraph, for a failure's report.
func (w *world) describe() string {
	c := w.cfg
	var b strings.Builder
	fmt.Fprintf(&b, "ranks %d, producers %d x %d batches, consumers %d, gc processes %d, run's gc %v, max-lead %d, retain %d, grace %s/%s, length %s",
		c.ranks, c.producers, c.batches, c.consumers, c.gcs, c.runGC, c.maxLead, c.retain, c.grace, c.runGrace, c.length)
	if c.nested != "" {
		fmt.Fprintf(&b, ", a %s second stream", c.nested)
	}
	for _, x := range w.windows {
		fmt.Fprintf(&b, "\n  fault %-10s %s..%s", x.kind, fmtDur(x.from.Sub(w.start)), fmtDur(x.to.Sub(w.start)))
		switch x.kind {
		case "errors", "lost":
			fmt.Fprintf(&b, " rate %.2f", x.rate)
		case "slow":
			fmt.Fprintf(&b, " rate %.2f, %s each", x.rate, x.d)
		case "stale-list":
			fmt.Fprintf(&b, " keys younger than %s unlisted", x.d)
		case "probe":
			fmt.Fprintf(&b, " on %s", x.node)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(c.skew)) {
		if c.skew[n] != 0 {
			fmt.Fprintf(&b, "\n  clock of %s off by %s", n, c.skew[n])
		}
	}
	return b.String()
}
