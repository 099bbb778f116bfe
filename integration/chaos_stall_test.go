package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Stall attribution: while the chaos runs, a monitor samples every
// waiter (each reader, the writer, each producer) and records every time
// one of them made no progress for longer than chaosStallMin while it had
// something to wait for. Each stall is then put next to the faults and
// store outages of the timeline: who waited, for what, the last fault
// before it, and how long after that fault ended (for the store: after it
// accepted a write again) progress came. A stall longer than
// chaosLivenessBound from the store being back up (or from its start, with
// no outage inside it) fails the run.

const (
	chaosStallMin = 10 * time.Second
	// chaosLivenessBound is the bound the test enforces; docs/RELIABILITY.md
	// promises 30 s, the rest is margin for a loaded 2-core machine.
	chaosLivenessBound = 120 * time.Second
	chaosSampleEvery   = 250 * time.Millisecond
	// chaosHealBound is the bound from a network fault healing to
	// progress when the heal is the last thing a stall waited out;
	// docs/RELIABILITY.md promises 30 s, the rest is margin.
	chaosHealBound = 60 * time.Second
)

// chaosFault is one injected fault; end is when the harness undid it (the
// store: when it accepted a write again; a network fault: when its link
// healed). An instant fault (a kill whose process is restarted at once)
// has end == start.
type chaosFault struct {
	what       string
	start, end time.Time
	link       string // a network fault's link (the process it hit); "" for others
}

// chaosOutage is one time the store was down: from just before it was
// stopped to the first PUT it accepted after its restart.
type chaosOutage struct{ down, up time.Time }

// chaosTimeline records the faults and store outages as they happen.
type chaosTimeline struct {
	mu      sync.Mutex
	faults  []chaosFault  // GUARDED_BY(mu)
	outages []chaosOutage // GUARDED_BY(mu); up is zero while down
}

// begin records the start of a fault and returns the index end takes.
func (tl *chaosTimeline) begin(what string) int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	now := time.Now()
	tl.faults = append(tl.faults, chaosFault{what: what, start: now, end: now})
	return len(tl.faults) - 1
}

// beginNet records the start of a network fault on link.
func (tl *chaosTimeline) beginNet(what, link string) int {
	i := tl.begin(what)
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.faults[i].link = link
	return i
}

func (tl *chaosTimeline) end(i int, at time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.faults[i].end = at
}

func (tl *chaosTimeline) storeDown() {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.outages = append(tl.outages, chaosOutage{down: time.Now()})
}

func (tl *chaosTimeline) storeUp(at time.Time) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.outages[len(tl.outages)-1].up = at
}

func (tl *chaosTimeline) snapshot() ([]chaosFault, []chaosOutage) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.faults), slices.Clone(tl.outages)
}

// chaosBucket splits a chaos stream URL into its bucket and prefix.
func chaosBucket(url string) (bucket, prefix string) {
	rest, _ := strings.CutPrefix(url, "s3://")
	path, _, _ := strings.Cut(rest, "?")
	bucket, prefix, _ = strings.Cut(path, "/")
	return bucket, strings.Trim(prefix, "/")
}

// waitStoreWrites returns when the store under url accepts a write again
// (at most 3 min), at the root of its bucket or container, outside the
// stream: the moment an outage ends.
func waitStoreWrites(ctx context.Context, url string) (time.Time, error) {
	root := url
	if up := store.Ancestors(url); len(up) > 0 {
		root = up[len(up)-1].URL
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		s, err := store.Open(pctx, root)
		if err == nil {
			err = store.PutBytes(pctx, s, "chaos-probe/up", []byte("up"))
		}
		cancel()
		if err == nil {
			return time.Now(), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return time.Now(), fmt.Errorf("the store accepted no write in 3 min after its restart: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chaosStall is one stall the monitor saw.
type chaosStall struct {
	who, what  string
	start, end time.Time
	open       bool // still stalled when the monitor stopped
}

// chaosWaiter is one party that can wait: sample says whether it made
// progress since the last sample and whether it wants anything now; what
// says what it waits for, called once a second while it is stalled and at
// the end of the stall with the stall's start.
type chaosWaiter interface {
	name() string
	sample() (progressed, waiting bool)
	what(since time.Time) string
}

// chaosWaitState is the monitor's view of one waiter.
type chaosWaitState struct {
	w       chaosWaiter
	waiting bool
	since   time.Time // last progress, or when it began to wait
	what    string
	looked  time.Time // when what was last asked
}

// chaosMonitor samples the waiters until stopped.
type chaosMonitor struct {
	head   atomic.Int64 // the stream's head as last read, -1 unknown
	cancel context.CancelFunc
	done   chan struct{}
	stalls []chaosStall // read after stop
	lags   []chaosLag   // read after stop
}

// chaosLag is how far each node's reader was behind the head at one
// sample: committed steps it had not read.
type chaosLag struct {
	at  time.Time
	lag map[string]int64 // by node name
}

// startMonitor starts sampling the waiters of c and the stream's head.
// writerDone is closed when the writer has sealed everything.
func (c *chaosCluster) startMonitor(writerDone <-chan struct{}) *chaosMonitor {
	m := &chaosMonitor{done: make(chan struct{})}
	m.head.Store(-1)
	ctx, cancel := context.WithCancel(c.ctx)
	m.cancel = cancel
	var ws []chaosWaiter
	for _, n := range c.nodes {
		ws = append(ws, &chaosReaderWaiter{n: n, m: m, manifest: c.manifest, writerDone: writerDone, rec: chaosRecTail{path: n.out}})
	}
	ws = append(ws, &chaosWriterWaiter{manifest: c.manifest, done: writerDone})
	for _, id := range c.ids {
		ws = append(ws, &chaosProducerWaiter{id: id, dir: c.dirs[id], sup: c.prods[id]})
	}
	var wg sync.WaitGroup
	wg.Go(func() { m.followHead(ctx, c.url) })
	wg.Go(func() { m.sampleLoop(ctx, ws) })
	go func() { wg.Wait(); close(m.done) }()
	return m
}

// stop ends the monitor and returns its stalls; it may be called again.
func (m *chaosMonitor) stop() []chaosStall {
	m.cancel()
	<-m.done
	return m.stalls
}

// logStalls logs the attributed stalls of a run that ends early.
func (c *chaosCluster) logStalls(stalls []chaosStall) {
	faults, outages := c.timeline.snapshot()
	var b strings.Builder
	writeStallTable(&b, attribute(stalls, faults, outages), c.start)
	c.t.Logf("the run ended before its summary:\n%s", b.String())
}

// followHead keeps m.head at the stream's head; while the store is down
// it keeps the last head read.
func (m *chaosMonitor) followHead(ctx context.Context, url string) {
	var l *txn.Log
	var st *txn.State
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		switch {
		case l == nil:
			var s store.Store
			if s, err = store.Open(rctx, url); err == nil {
				l, err = txn.Open(rctx, s)
			}
		case st == nil:
			st, err = l.Load(rctx)
		default:
			if _, err = l.Refresh(rctx, st); err != nil {
				st = nil // load again: the log may have been cut by gc
			}
		}
		cancel()
		if err == nil && st != nil {
			if h, ok := st.Head(); ok {
				m.head.Store(h)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (m *chaosMonitor) sampleLoop(ctx context.Context, ws []chaosWaiter) {
	states := make([]*chaosWaitState, len(ws))
	now := time.Now()
	for i, w := range ws {
		states[i] = &chaosWaitState{w: w, since: now}
	}
	for {
		select {
		case <-ctx.Done():
			now := time.Now()
			for _, s := range states {
				if s.waiting && now.Sub(s.since) > chaosStallMin {
					m.stalls = append(m.stalls, chaosStall{who: s.w.name(), what: s.w.what(s.since), start: s.since, end: now, open: true})
				}
			}
			return
		case <-time.After(chaosSampleEvery):
		}
		for _, s := range states {
			m.step(s, time.Now())
		}
		m.sampleLag(ws)
	}
}

// sampleLag records each reader's lag behind the head.
func (m *chaosMonitor) sampleLag(ws []chaosWaiter) {
	head := m.head.Load()
	if head < 0 {
		return
	}
	l := chaosLag{at: time.Now(), lag: map[string]int64{}}
	for _, w := range ws {
		if r, ok := w.(*chaosReaderWaiter); ok {
			l.lag[r.n.name] = max(0, head+1-r.rec.lines)
		}
	}
	m.lags = append(m.lags, l)
}

// chaosLagSlack is how much a healthy node's lag behind the head may grow
// while another node is sick: the producers' --max-lead, so that only
// back-pressure (the head held) may slow a healthy node.
const chaosLagSlack = 40

// checkHealthyLag checks that during each storm on one node, every other
// node that nothing else disturbed kept reading at the head: its lag grew
// by at most chaosLagSlack steps. A node is disturbed by a store outage or
// by any fault aimed at its mount or its reader.
func checkHealthyLag(t testing.TB, lags []chaosLag, faults []chaosFault, outages []chaosOutage, nodes []string) {
	for _, f := range faults {
		if !strings.HasPrefix(f.what, "net storm") {
			continue
		}
		for _, n := range nodes {
			if f.link == "mount "+n || chaosDisturbed(n, f, faults, outages) {
				continue
			}
			var first, worst int64 = -1, 0
			for _, l := range lags {
				if l.at.Before(f.start) || l.at.After(f.end) {
					continue
				}
				if first < 0 {
					first = l.lag[n]
				}
				worst = max(worst, l.lag[n])
			}
			if first >= 0 && worst-first > chaosLagSlack {
				t.Errorf("node %s fell %d steps further behind the head while %s had a storm on its link (%s); a healthy node may only be held back through the head (--max-lead)",
					n, worst-first, f.link, f.what)
			}
		}
	}
}

// checkNetExits checks the promise that no process exits for a network
// fault except where documented: a process that ended by itself while a
// network fault was on its link, or within chaosHealBound of its heal,
// must have ended for a documented reason. A reader may see EIO (a read
// through a partitioned mount, after the store-retry window) or its mount
// gone; any process may be fenced or find its staging directory held (the
// SIGSTOP zombie's faults, not the network's); a mount that starts while
// its store is unreachable exits 1 at once (a supervisor restarts it). A
// producer never gives up on the store, nor does a mount once mounted.
func checkNetExits(t testing.TB, ends []chaosExit, faults []chaosFault) {
	for _, e := range ends {
		if e.link == "" || chaosNetExitAllowed(e) {
			continue
		}
		for _, f := range faults {
			if f.link == e.link && !e.at.Before(f.start) && !e.at.After(f.end.Add(chaosHealBound)) {
				t.Errorf("%s exited by itself (%s) %.1fs into %s on its link (%.0fs long); no process exits for a network fault except where RELIABILITY.md says: %s",
					e.who, e.cause, e.at.Sub(f.start).Seconds(), f.what, f.end.Sub(f.start).Seconds(), e.line)
				break
			}
		}
	}
}

// chaosNetExitAllowed says whether e's cause is a documented way to end
// during a network fault.
func chaosNetExitAllowed(e chaosExit) bool {
	switch e.cause {
	case "fenced", "staging directory in use":
		return true
	case "EIO from its mount", "its mount gone (ENOTCONN)":
		return e.kind == "reader"
	case "store unreachable":
		return e.kind == "mount" && !e.started
	}
	return false
}

// chaosDisturbed says whether anything but the storm f touched node n
// while f was on.
func chaosDisturbed(n string, f chaosFault, faults []chaosFault, outages []chaosOutage) bool {
	for _, o := range outages {
		if o.down.Before(f.end) && (o.up.IsZero() || o.up.After(f.start)) {
			return true
		}
	}
	for _, g := range faults {
		touches := g.link == "mount "+n || strings.HasSuffix(g.what, "mount SIGKILL "+n) || strings.HasSuffix(g.what, "(hung) "+n)
		if touches && g.start.Before(f.end) && !g.end.Before(f.start) {
			return true
		}
	}
	return false
}

// step samples one waiter and closes its stall when it progressed.
func (m *chaosMonitor) step(s *chaosWaitState, now time.Time) {
	stalled := s.waiting && now.Sub(s.since) > chaosStallMin
	if stalled && now.Sub(s.looked) >= time.Second {
		// Asked before the sample, while it still waits: the sample that
		// sees progress also moves on what it waits for.
		s.what, s.looked = s.w.what(s.since), now
	}
	progressed, waiting := s.w.sample()
	if progressed || (s.waiting && !waiting) {
		if stalled {
			m.stalls = append(m.stalls, chaosStall{who: s.w.name(), what: s.what, start: s.since, end: now})
		}
		s.since, s.what = now, ""
	} else if !s.waiting && waiting {
		s.since = now
	}
	s.waiting = waiting
}

// chaosRecTail follows a JSON-lines record, decoding only each line's
// step.
type chaosRecTail struct {
	path  string
	off   int64
	part  []byte
	lines int64
	last  int64 // step of the last whole line
}

// read consumes what was appended since the last call and says whether
// a whole line was.
func (r *chaosRecTail) read() bool {
	f, err := os.Open(r.path)
	if err != nil {
		return false
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, r.off, 1<<40))
	if err != nil || len(b) == 0 {
		return false
	}
	r.off += int64(len(b))
	r.part = append(r.part, b...)
	n := int64(0)
	for {
		i := bytes.IndexByte(r.part, '\n')
		if i < 0 {
			break
		}
		var s struct {
			Step int64 `json:"step"`
		}
		if json.Unmarshal(r.part[:i], &s) == nil {
			r.last = s.Step
		}
		r.part = r.part[i+1:]
		n++
	}
	r.lines += n
	return n > 0
}

// chaosCountLines counts the lines of a file (the writer's manifest: one
// per batch).
func chaosCountLines(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	return int64(bytes.Count(b, []byte{'\n'}))
}

// chaosReaderWaiter is a node's reader: it waits while the writer writes
// and until it has read every step the writer sealed.
type chaosReaderWaiter struct {
	n          *chaosNode
	m          *chaosMonitor
	manifest   string
	writerDone <-chan struct{}
	rec        chaosRecTail
	total      int64     // batches sealed, once the writer is done
	forStep    int64     // the step it reads next
	committed  time.Time // when forStep was first seen committed
}

func (r *chaosReaderWaiter) name() string { return "reader of node " + r.n.name }

func (r *chaosReaderWaiter) sample() (progressed, waiting bool) {
	progressed = r.rec.read()
	// When the step it waits for was committed (steps are contiguous
	// from 0): before, it waits for a producer; after, for its mount.
	if next := r.rec.lines; r.forStep != next {
		r.forStep, r.committed = next, time.Time{}
	}
	if r.committed.IsZero() && r.m.head.Load() >= r.forStep {
		r.committed = time.Now()
	}
	select {
	case <-r.writerDone:
		if r.total == 0 {
			r.total = chaosCountLines(r.manifest)
		}
		return progressed, r.rec.lines < r.total
	default:
		return progressed, true
	}
}

func (r *chaosReaderWaiter) what(since time.Time) string {
	if r.committed.IsZero() {
		return fmt.Sprintf("step %d, not yet committed", r.forStep)
	}
	return fmt.Sprintf("step %d through mount %s (committed %.1fs into the stall)", r.forStep, r.n.name, max(0, r.committed.Sub(since).Seconds()))
}

// chaosWriterWaiter is the writer: while it runs, it only ever waits for
// space on the staging disk (it retries ENOSPC).
type chaosWriterWaiter struct {
	manifest string
	done     <-chan struct{}
	size     int64
}

func (w *chaosWriterWaiter) name() string { return "writer" }

func (w *chaosWriterWaiter) sample() (progressed, waiting bool) {
	if fi, err := os.Stat(w.manifest); err == nil && fi.Size() != w.size {
		w.size, progressed = fi.Size(), true
	}
	select {
	case <-w.done:
		return progressed, false
	default:
		return progressed, true
	}
}

func (w *chaosWriterWaiter) what(time.Time) string { return "staging disk space" }

// chaosProducerWaiter is a producer with sealed batches to commit; a
// sealed batch leaving its staging directory is a commit.
type chaosProducerWaiter struct {
	id      string
	dir     string
	sup     *chaosSup
	pending map[string]bool
}

func (p *chaosProducerWaiter) name() string { return "producer " + p.id }

func (p *chaosProducerWaiter) sample() (progressed, waiting bool) {
	names, err := prdSealed(p.dir)
	if err != nil {
		return false, len(p.pending) > 0
	}
	now := map[string]bool{}
	for _, n := range names {
		now[n] = true
	}
	for n := range p.pending {
		if !now[n] {
			progressed = true
		}
	}
	p.pending = now
	return progressed, len(now) > 0
}

// chaosHeldBy finds the consumer a producer's log says holds it back
// (--max-lead), if it is still held at the end of the log.
var chaosHeldBy = regexp.MustCompile(`ahead of (.+?) at step`)

func (p *chaosProducerWaiter) what(time.Time) string {
	tail := p.sup.tail()
	held := strings.LastIndex(tail, "back-pressure: holding uploads")
	if held >= 0 && held > strings.LastIndex(tail, "back-pressure released") {
		if m := chaosHeldBy.FindStringSubmatch(tail[held:]); m != nil {
			return "back-pressure from " + m[1]
		}
		return "back-pressure"
	}
	return fmt.Sprintf("commit of %d sealed batches", len(p.pending))
}

// chaosStallRow is a stall put next to the timeline.
type chaosStallRow struct {
	chaosStall
	fault        *chaosFault   // the last fault before its end; nil if none
	storeDown    time.Duration // store downtime inside the stall
	upToProgress time.Duration // from the last store-up inside it to its end
	// healed is the last network fault that healed inside the stall, and
	// healToProgress the time from that heal to the stall's end.
	healed         *chaosFault
	healToProgress time.Duration
	bound          time.Duration // what the liveness bound is checked against
}

// attribute puts each stall next to the faults and outages.
func attribute(stalls []chaosStall, faults []chaosFault, outages []chaosOutage) []chaosStallRow {
	var rows []chaosStallRow
	for _, s := range stalls {
		r := chaosStallRow{chaosStall: s, fault: lastFaultBefore(faults, s), bound: s.end.Sub(s.start)}
		var lastUp time.Time
		for _, o := range outages {
			up := o.up
			if up.IsZero() {
				up = s.end // still down at the stall's end
			}
			lo, hi := later(o.down, s.start), earlier(up, s.end)
			if hi.After(lo) {
				r.storeDown += hi.Sub(lo)
				if !o.up.IsZero() {
					// An up after the progress is the harness seeing it
					// late (its first accepted PUT): the party made
					// progress as the store came up.
					lastUp = later(lastUp, earlier(o.up, s.end))
				}
			}
		}
		if r.storeDown > 0 && !lastUp.IsZero() {
			r.upToProgress = s.end.Sub(lastUp)
			r.bound = r.upToProgress
		}
		if r.healed = lastHealIn(faults, s); r.healed != nil {
			r.healToProgress = s.end.Sub(r.healed.end)
			r.bound = min(r.bound, r.healToProgress)
		}
		rows = append(rows, r)
	}
	return rows
}

// lastFaultBefore is the fault most likely to explain s: the last one to
// start before s did, preferring any other kind to the producer SIGKILLs
// that fire every few seconds throughout when one was still on or had
// ended in the chaosStallMin before s; with none before s, the first to
// start during it.
func lastFaultBefore(faults []chaosFault, s chaosStall) *chaosFault {
	var last, other, during *chaosFault
	for i := range faults {
		f := &faults[i]
		if !f.start.Before(s.end) {
			continue
		}
		if f.start.After(s.start) {
			if during == nil || f.start.Before(during.start) {
				during = f
			}
			continue
		}
		if last == nil || f.start.After(last.start) {
			last = f
		}
		if !strings.HasPrefix(f.what, "producer SIGKILL") && !f.end.Before(s.start.Add(-chaosStallMin)) &&
			(other == nil || f.start.After(other.start)) {
			other = f
		}
	}
	switch {
	case other != nil:
		return other
	case last != nil:
		return last
	}
	return during
}

// lastHealIn is the network fault that healed last inside s, if one was
// on during it.
func lastHealIn(faults []chaosFault, s chaosStall) *chaosFault {
	var last *chaosFault
	for i := range faults {
		f := &faults[i]
		if f.link == "" || f.end.Before(s.start) || f.end.After(s.end) {
			continue
		}
		if last == nil || f.end.After(last.end) {
			last = f
		}
	}
	return last
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// writeStallTable writes the attributed stalls, one row each; times are
// seconds from start.
func writeStallTable(w io.Writer, rows []chaosStallRow, start time.Time) {
	if len(rows) == 0 {
		fmt.Fprintf(w, "attributed stalls (over %s): none\n", chaosStallMin)
		return
	}
	fmt.Fprintf(w, "attributed stalls (over %s):\n", chaosStallMin)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "who\twaited for\tat\tstalled\tlast fault before\tfault end -> progress\tstore\tnetwork")
	sec := func(d time.Duration) string { return fmt.Sprintf("%.1fs", d.Seconds()) }
	for _, r := range rows {
		fault, after := "none", "-"
		if r.fault != nil {
			fault = fmt.Sprintf("%s at %s", r.fault.what, sec(r.fault.start.Sub(start)))
			after = sec(r.end.Sub(r.fault.end))
			if r.fault.end.After(r.end) {
				after = "progress before its end"
			}
		}
		storeCol := "no outage inside"
		if r.storeDown > 0 {
			storeCol = fmt.Sprintf("explained by the store: down %s of it, up -> progress %s", sec(r.storeDown), sec(r.upToProgress))
		}
		netCol := "no heal inside"
		if r.healed != nil {
			netCol = fmt.Sprintf("%s healed at %s, heal -> progress %s", r.healed.what, sec(r.healed.end.Sub(start)), sec(r.healToProgress))
		}
		stalled := sec(r.end.Sub(r.start))
		if r.open {
			stalled += " (still at the end)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.who, r.what, sec(r.start.Sub(start)), stalled, fault, after, storeCol, netCol)
	}
	_ = tw.Flush()
}

// writeHealTable gives, per kind of network fault, the longest time from
// a heal to the progress of a party that stalled through it, where the
// heal was the last thing it waited out (a heal during a store outage is
// the outage's to explain; a stall under chaosStallMin is not measured:
// its heal->progress is shorter).
func writeHealTable(w io.Writer, rows []chaosStallRow) {
	longest, count := map[string]time.Duration{}, map[string]int{}
	for _, r := range rows {
		if r.healed == nil || r.bound != r.healToProgress {
			continue
		}
		k := chaosNetKind(r.healed.what)
		longest[k] = max(longest[k], r.healToProgress)
		count[k]++
	}
	fmt.Fprintln(w, "heal -> progress, longest per network fault kind:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, k := range append(slices.Clone(chaosNetKinds), "net zombie (rescheduled)") {
		if count[k] == 0 {
			fmt.Fprintf(tw, "  %s	no stall over %s	\n", k, chaosStallMin)
			continue
		}
		fmt.Fprintf(tw, "  %s	%.1fs	(%d stalls)\n", k, longest[k].Seconds(), count[k])
	}
	_ = tw.Flush()
}

// chaosNetKind is the kind of a network fault from its timeline name
// (kind, then its target).
func chaosNetKind(what string) string {
	for _, k := range append(slices.Clone(chaosNetKinds), "net zombie (rescheduled)") {
		if strings.HasPrefix(what, k+" ") {
			return k
		}
	}
	return what
}

// chaosExitCause names why a supervised process exited by itself, from
// the last lines of its output.
func chaosExitCause(out string) string {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := strings.Join(lines[max(0, len(lines)-3):], "\n")
	tail := strings.ToLower(last)
	switch {
	case tail == "":
		return "no output"
	case strings.Contains(tail, "fenced"):
		return "fenced"
	case strings.Contains(tail, "unreachable"), strings.Contains(tail, "cannot reach"), strings.Contains(tail, "connection refused"),
		strings.Contains(tail, "connection reset"), strings.Contains(tail, "i/o timeout"):
		return "store unreachable"
	case strings.Contains(tail, "no space left"):
		return "staging disk full"
	case strings.Contains(tail, "transport endpoint is not connected"):
		return "its mount gone (ENOTCONN)"
	case strings.Contains(tail, "input/output error"):
		// A read through the mount failed: the store or a checksum.
		return "EIO from its mount"
	case strings.Contains(tail, "refusing store"):
		// Reachable but failing its start probe's writes (SeaweedFS
		// answers before a volume is writable).
		return "store refused the start probe: " + chaosShorten(last[strings.LastIndex(last, ": ")+2:])
	case strings.Contains(tail, "staging directory in use"):
		// The SIGSTOPped zombie still holds the staging lock.
		return "staging directory in use"
	}
	return "other: " + chaosShorten(lines[len(lines)-1])
}

var (
	chaosDigits = regexp.MustCompile(`[0-9]+`)
	chaosURLs   = regexp.MustCompile(`[a-z][a-z0-9+.-]*://\S*`)
	chaosDirs   = regexp.MustCompile(`/[^\s:]*/`)
	chaosHex    = regexp.MustCompile(`\b[0-9a-f]{8,}\b`)
)

// chaosShorten makes a log line a short, stable key that keeps its cause:
// a URL is URL, a path its last element, a random hex name H, numbers
// (steps, ports, times) N, and past 90 characters it keeps its start and
// its end (the root cause of a wrapped error).
func chaosShorten(line string) string {
	line = chaosURLs.ReplaceAllString(strings.TrimSpace(line), "URL")
	line = chaosDirs.ReplaceAllString(line, ".../")
	line = chaosHex.ReplaceAllString(line, "H")
	line = chaosDigits.ReplaceAllString(line, "N")
	if len(line) > 90 {
		line = line[:40] + " ... " + line[len(line)-45:]
	}
	return line
}

// TestChaosAttribute checks the soak's bookkeeping on a made-up timeline:
// a stall through an outage is measured from the store-up, one without
// from its start, and the fault named is the one before the stall.
func TestChaosAttribute(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	faults := []chaosFault{
		{what: "mount SIGSTOP (hung) a", start: at(1), end: at(7)},
		{what: "producer SIGKILL p1", start: at(9), end: at(9)},
		{what: "store SIGKILL", start: at(20), end: at(40)},
		{what: "producer SIGKILL p2", start: at(41), end: at(41)},
	}
	outages := []chaosOutage{{down: at(20), up: at(40)}}
	rows := attribute([]chaosStall{
		{who: "reader of node a", start: at(2), end: at(14)},
		{who: "producer p0", start: at(19), end: at(170)},
	}, faults, outages)
	if r := rows[0]; r.fault == nil || r.fault.what != "mount SIGSTOP (hung) a" || r.storeDown != 0 || r.bound != 12*time.Second {
		t.Errorf("stall without outage: fault %v, store down %s, bound %s; want the mount's SIGSTOP, 0, 12s", r.fault, r.storeDown, r.bound)
	}
	if r := rows[1]; r.fault == nil || r.fault.what != "producer SIGKILL p1" ||
		r.storeDown != 20*time.Second || r.upToProgress != 130*time.Second || r.bound <= chaosLivenessBound {
		t.Errorf("stall through an outage: fault %v, store down %s, up->progress %s, bound %s; want producer SIGKILL p1, 20s, 130s, over the bound",
			r.fault, r.storeDown, r.upToProgress, r.bound)
	}
	ends := []chaosExit{
		{who: "producer p1", kind: "producer", link: "producer p1", cause: "store unreachable", at: at(50)},
		{who: "reader a", kind: "reader", link: "mount a", cause: "EIO from its mount", at: at(50)},
		{who: "mount a", kind: "mount", link: "mount a", cause: "other: x", at: at(200)},
		{who: "mount a", kind: "mount", link: "mount a", cause: "store unreachable", at: at(40)},
		{who: "mount a", kind: "mount", link: "mount a", cause: "store unreachable", started: true, at: at(41)},
		{who: "producer p2", kind: "producer", link: "producer p2", cause: "fenced", at: at(50)},
	}
	netFaults := []chaosFault{
		{what: "net partition producer producer p1", link: "producer p1", start: at(30), end: at(45)},
		{what: "net partition mount mount a", link: "mount a", start: at(30), end: at(45)},
		{what: "net reset producer p2", link: "producer p2", start: at(30), end: at(45)},
	}
	healed := attribute([]chaosStall{{who: "reader of node a", start: at(31), end: at(57)}}, netFaults[1:2], nil)
	// A heal inside an outage whose end the harness saw just after the
	// stall's: the store explains it (the soak's SeaweedFS run listed
	// such a stall as a 33.7 s heal -> progress).
	late := attribute([]chaosStall{{who: "reader of node b", start: at(100), end: at(140)}},
		[]chaosFault{{what: "net zombie (rescheduled) p1", link: "producer p1", start: at(90), end: at(106)}},
		[]chaosOutage{{down: at(100), up: at(140.4)}})
	if r := late[0]; r.upToProgress != 0 || r.bound != 0 {
		t.Errorf("stall ending as the store came up: up->progress %s, bound %s; want 0, 0", r.upToProgress, r.bound)
	}
	var heals strings.Builder
	writeHealTable(&heals, append(healed, late...))
	if !regexp.MustCompile(`net partition mount +12\.0s +\(1 stalls\)`).MatchString(heals.String()) ||
		!regexp.MustCompile(`net zombie \(rescheduled\) +no stall`).MatchString(heals.String()) {
		t.Errorf("heal table:\n%s\nwant net partition mount at 12.0s (1 stalls) and no zombie stall", heals.String())
	}
	var rec recordingTB
	checkNetExits(&rec, ends, netFaults)
	if len(rec.errs) != 2 || !strings.Contains(rec.errs[0], "producer p1 exited by itself (store unreachable)") ||
		!strings.Contains(rec.errs[1], "mount a exited by itself (store unreachable)") {
		t.Errorf("checkNetExits: %q; want two errors: producer p1 and a mounted mount a giving up during their partitions", rec.errs)
	}
	for out, want := range map[string]string{
		"x\nlakefs-produce: s3 endpoint http://127.0.0.1:7070 unreachable: dial tcp: connection refused\n":                                                                      "store unreachable",
		"lakefs-mount: opening the stream at s3://b/s: reading _stream.json: s3 get _stream.json: cannot reach http://127.0.0.1:1: net/http: timeout awaiting response headers": "store unreachable",
		"lakefs-produce: producer p1 was fenced: another process registered\n":                                                                                                  "fenced",
		"reader: step 12: stat /tmp/a/b/steps/12: transport endpoint is not connected":                                                                                          "its mount gone (ENOTCONN)",
		"reader: step 7: /m/steps/7/rank-0/f0.bin: read /m/steps/7/rank-0/f0.bin: input/output error (a checksum mismatch or a store error)":                                    "EIO from its mount",
		"lakefs-produce: refusing store s3://b/stream?endpoint=http%3A%2F%2F127.0.0.1%3A1: create-if-absent probe: first create of _probe/3fa2b9c0d1e2: InternalError":          "store refused the start probe: InternalError",
		"lakefs-mount: mounting /tmp/x/mnt-a: fusermount3: exit status 1 and a long tail of words that goes past ninety characters":                                             "other: lakefs-mount: mounting .../mnt-a: fuserm ... ail of words that goes past ninety characters",
		"": "no output",
	} {
		if got := chaosExitCause(out); got != want {
			t.Errorf("chaosExitCause(%q) = %q, want %q", out, got, want)
		}
	}
}

// recordingTB collects the errors a check reports, to test the check.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
