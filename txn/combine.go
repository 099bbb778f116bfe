package txn

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/lakestream/lakestream/internal/backoff"
	"github.com/lakestream/lakestream/store"
)

// The combining commit (format 3): whoever creates version v+1 commits
// every producer's announced TGBs.
//
// Each producer runs one committer. The committer that created the newest
// version it knows leads: it goes on creating the next one, paced (below),
// while anyone has TGBs announced. A committer with TGBs of its own waiting
// that does not lead follows: it reads version v+1 (one GET of a known
// key) about when it expects it, and learns from it which of its TGBs are
// committed. A follower that has not seen v+1 by its help deadline (the
// expected time plus a jittered few round trips), or whose oldest TGB has
// waited several versions, builds and creates v+1 itself; winning makes it
// the leader, and the loser of any race reads what won and follows. So one
// committer creates the versions while the others only read them, and a
// dead or slow leader costs a few round trips.
//
// Building v+1 from the state at v: the committer's own queued TGBs (from
// memory) and, for every other producer registered at v, at its registered
// epoch only, the objects at its next seqs, read in one parallel round of
// tail reads (announce.go) and cut at each producer's first gap. They go
// into the version round-robin across producers, each producer's in seq
// order, up to DefaultMaxGroup. State.Apply's rules make any race safe: a
// TGB is added only as its producer's next seq at its registered epoch, and
// a version number is claimed by create-if-absent, so a TGB is committed
// once whoever commits it, and a fenced incarnation's objects never are.
//
// Pacing: each version costs a tail read per producer probed, one create
// and a GET per follower, so it should carry about one TGB per other
// active producer. The leader lengthens its pace (from the start of one
// round to the next) while versions are smaller than that and shortens it
// while they are larger, between half a create round trip (an average of
// what it measures) and 8 of them or maxPace: versions follow the store's
// speed and the producers' cadence, and a lone producer waits for nothing
// but the store.

const (
	// DefaultMaxGroup caps a version's TGBs so a version record stays
	// small (about 300 bytes a TGB).
	DefaultMaxGroup = 256
	maxProbeDepth   = 32
	probeParallel   = 256
	// A producer none of whose TGBs were seen for dormantAfter versions is
	// probed only every dormantEvery-th version; its own committer gets
	// its TGBs in if nobody else does (starved).
	dormantAfter = 64
	dormantEvery = 16
	maxPace      = 500 * time.Millisecond
	defaultRTT   = 5 * time.Millisecond
	// maxRTT bounds a round-trip sample: a call slower than this is a
	// stall (a paused process, a store's hiccup), not the round trip the
	// pace and the polls scale with. Taken whole, one 4-minute stall made
	// a follower poll every minute and catch up two versions a poll.
	maxRTT = time.Second
)

// committer is a producer's commit loop. It owns st and every field below.
type committer struct {
	p        *Producer
	l        *Log
	st       *State
	solo     bool // own TGBs only: the naive baseline, or a format 2 stream
	maxGroup int
	logger   *slog.Logger

	leading  bool          // created the newest version it knows and keeps creating
	created  uint64        // the last version this committer created
	rtt      ewma          // store round trip (creates and version reads)
	interval ewma          // between versions, by their records' times
	paceD    time.Duration // the leader's pace (see adapt)
	// When st's newest version was created or read here, and that
	// version's number, record time and next step.
	seenAt    time.Time
	seenVer   uint64
	seenTime  time.Time
	startVer  uint64     // the version the committer started at
	attempts  int        // creates since this committer's last version
	roundAt   time.Time  // when this committer's last round began
	lostHelps int        // races lost by helping since this committer last created a version
	errs      *retryWait // between failed version reads; nil after a success
	confirmed uint64     // the newest version read or created before _stream.json last named this stream
	checkedAt time.Time  // when the last identity check that passed began

	depth  map[string]depth    // tail reads per producer per round
	active map[string]activity // what a producer's state was, and since when
	probed int                 // producers probed in the last round, this one included
}

type activity struct {
	seq, epoch uint64
	since      uint64 // the version at which seq or epoch was last seen to move
}

func newCommitter(p *Producer, st *State, solo bool) *committer {
	c := &committer{
		p: p, l: p.log, st: st, logger: p.logger,
		solo:     solo || !p.log.Config.combining(),
		maxGroup: DefaultMaxGroup,
		depth:    map[string]depth{},
		active:   map[string]activity{},
		seenAt:   time.Now(),
		seenVer:  st.Version,
		seenTime: st.Time,
		startVer: st.Version,
	}
	if solo {
		c.maxGroup = 1
	}
	return c
}

func (c *committer) run(ctx context.Context) {
	p := c.p
	defer close(p.done)
	// cond.Wait cannot watch ctx; wake it when ctx ends.
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.closing = true
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	for p.waitWork(c.leading) {
		var err error
		switch {
		case c.solo:
			err = c.commitSolo(ctx)
		case c.leading || c.created == c.st.Version:
			// The writer of the newest version is the preferred committer
			// of the next, also after it went idle: nobody else waits for
			// it, and a lone producer never waits on itself.
			err = c.lead(ctx)
		default:
			err = c.follow(ctx)
		}
		if err == nil {
			err = c.checkFence()
		}
		if err != nil {
			if ctx.Err() == nil {
				c.logger.Error("producer stopped", "err", err)
			}
			p.fail(err)
			return
		}
	}
}

// waitWork waits until the producer has TGBs waiting, or returns at once
// for a leader (others may have some); false means the producer stops.
func (p *Producer) waitWork(leading bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) == 0 && !leading && !p.closing && p.failed == nil {
		p.cond.Wait()
	}
	return p.failed == nil && (len(p.queue) > 0 || (leading && !p.closing))
}

// lead creates the next version once the pace allows. The pace runs from
// the start of the previous round, so probing and creating overlap it;
// and the leader always leaves a gap of half to one round trip after its
// create, or creating versions back to back it would keep every other
// writer (a registering producer, a checkpoint, gc) one version behind
// for good.
func (c *committer) lead(ctx context.Context) error {
	gap := jitter(c.rtt.or(defaultRTT)/2, 1)
	if wait := max(c.paceD-time.Since(c.roundAt), gap-time.Since(c.seenAt)); wait > 0 {
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
	return c.round(ctx)
}

// adapt steers the pace towards versions of about 1.25 TGBs per other
// active producer: it grows while versions are smaller than that and
// shrinks while they are larger (at most by half or double a version, so
// a burst is caught within a few versions), within 8 round trips.
func (c *committer) adapt(tgbs int) {
	want := (c.probed - 1) * 5 / 4
	if want < 1 {
		c.paceD = 0
		return
	}
	f := min(max(float64(want)/float64(max(tgbs, 1)), 0.5), 2)
	cap := min(8*c.rtt.or(defaultRTT), maxPace)
	c.paceD = min(max(time.Duration(float64(max(c.paceD, time.Millisecond))*f), 0), cap)
}

// follow waits for the version it expects and reads it, or helps.
func (c *committer) follow(ctx context.Context) error {
	rtt := max(c.rtt.or(defaultRTT), time.Millisecond)
	// A busy leader's versions come at most a pace (8 round trips or
	// maxPace) plus a probe and a create apart; a longer interval seen
	// came from idle time, and waiting it out would slow the log down.
	iv := min(max(c.interval.or(rtt), rtt), min(8*rtt, maxPace)+2*rtt)
	// Late rather than early: an early read is a miss (a GET for nothing),
	// and versions come irregularly (an fsync, a busy server), while a late
	// one only delays what this producer learns, not when its TGBs are
	// visible; catching up costs a GET per version and one miss.
	expect := c.seenAt.Add(iv + iv/2)
	// Help only past a margin a slow create (an fsync stuck behind a
	// journal commit, a busy server) or a descheduled leader rarely
	// exceeds, doubled after each race this committer lost by helping: a
	// lost race costs a probe of every producer and a create for nothing.
	margin := (iv + jitter(max(2*rtt, 10*time.Millisecond), 1)) << min(c.lostHelps, 3)
	deadline := expect.Add(margin)
	if c.starved() {
		c.logger.Debug("versions leave this producer's TGB out; committing it", "version", c.st.Version+1)
		return c.round(ctx)
	}
	if err := backoff.Sleep(ctx, time.Until(expect)); err != nil {
		return err
	}
	for {
		got, err := c.readNext(ctx)
		if err != nil {
			return err
		}
		if got {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			c.logger.Debug("the expected version did not come; committing it", "version", c.st.Version+1, "interval", iv)
			return c.round(ctx)
		}
		gap := max(iv/2, rtt/2)
		if c.errs != nil {
			gap = c.errs.b.Step() // the store is failing: poll no faster than the backoff
		}
		if err := backoff.Sleep(ctx, min(gap, left)); err != nil {
			return err
		}
	}
}

// starved reports whether versions keep coming without this producer's
// oldest waiting TGB: the leader does not probe it (dormant) or its
// versions are full. It then commits itself.
func (c *committer) starved() bool {
	p := c.p
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) > 0 && p.queue[0].missed >= 3
}

// missed counts a version, built at built (its record's time, by its
// creator's store clock), that left this producer's oldest waiting TGB
// out although it was uploaded before (by this producer's store clock).
// Store clocks err by a second or so: the error only moves when this
// producer helps, never what is committed.
func (p *Producer) missed(built time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.queue) > 0 && built.After(p.queue[0].stamped) {
		p.queue[0].missed++
	}
}

// readNext reads version v+1 and applies it (and catches up when this
// committer has fallen behind). It reports whether the state moved.
func (c *committer) readNext(ctx context.Context) (bool, error) {
	st := c.st
	if st.seenHead.IsZero() || c.l.now().Sub(st.Time) > LogRetention/2 {
		// An idle log: Refresh knows how to tell a missing version from one
		// gc deleted.
		n, err := c.l.refreshRetry(ctx, st, c.logger)
		if err != nil {
			return false, err
		}
		if n > 0 {
			if err := c.saw(ctx, time.Now(), nil); err != nil {
				return true, err
			}
		}
		return n > 0, nil
	}
	// Read v+1, and on while this committer is behind (once behind, until
	// a read misses): each read that finds its version costs one GET, and
	// only the last one misses.
	moved, behind := false, false
	for {
		// seenHead is on the log's clock, as Refresh and tryCommit read
		// it; start, on this machine's, times the round trip.
		start, checked := time.Now(), c.l.now()
		v, err := c.l.ReadVersion(ctx, st.Version+1)
		switch {
		case errors.Is(err, store.ErrNotFound):
			c.timed(time.Since(start), 0.1)
			c.errs.done()
			st.seenHead, c.errs = checked, nil
			return moved, nil
		case Permanent(err) || ctx.Err() != nil:
			return moved, err
		case err != nil:
			if c.errs == nil {
				c.errs = newRetryWait(ctx)
			}
			c.logger.Warn("reading the log failed; retrying", "err", err)
			return moved, c.errs.wait(ctx, err)
		}
		c.timed(time.Since(start), 0.1)
		c.errs.done()
		c.errs = nil
		if err := st.Apply(v); err != nil {
			return moved, fmt.Errorf("%s: %w", VersionKey(v.Version), err)
		}
		// Behind by more than this version? Judged before saw() moves seenAt.
		behind = behind || start.Sub(c.seenAt) > 2*c.interval.or(c.rtt.or(defaultRTT))
		// seenAt is when the read was sent: what this committer knows of
		// when the version landed, so its polls do not drift later.
		if err := c.saw(ctx, start, nil); err != nil {
			return true, err
		}
		c.p.missed(v.Time)
		moved = true
		if !behind {
			return true, nil
		}
	}
}

// timed folds a call's duration into the round-trip estimate.
func (c *committer) timed(d time.Duration, w float64) {
	c.rtt.add(min(d, maxRTT), w)
}

// round builds version v+1 from the state at v and tries to create it.
func (c *committer) round(ctx context.Context) error {
	c.roundAt = time.Now()
	checked := c.preCheck(ctx)
	v, err := c.build(ctx)
	if err != nil {
		return err
	}
	if v == nil {
		// Nobody has anything to commit. A queued TGB the state already
		// holds (an interrupted upload another committer committed, queued
		// again by resolveLimbo) completes here: no new version will.
		c.leading = false
		return c.saw(ctx, time.Now(), nil)
	}
	c.attempts++
	start := time.Now()
	out, err := c.l.tryCommit(ctx, c.st, v, c.logger, checked)
	if err != nil {
		return err
	}
	now := time.Now()
	c.logger.Debug("version built", "version", v.Version, "tgbs", len(v.TGBs), "created", out == committed, "create", now.Sub(start), "pace", c.paceD, "probed", c.probed)
	if out == lostRace {
		if !c.leading {
			c.lostHelps++
		}
		c.leading = false
		return c.saw(ctx, now, nil)
	}
	c.timed(now.Sub(start), 0.2)
	c.leading, c.created, c.lostHelps = true, v.Version, 0
	c.adapt(len(v.TGBs))
	// The snapshot before the TGBs complete: a producer closed as soon as
	// its last TGB completes stops this goroutine.
	c.l.maybeSnapshot(ctx, c.st, c.logger)
	return c.saw(ctx, now, v)
}

// identityFresh bounds how recent an identity check that passed must be
// for a committer to create a version without a new one: two store round
// trips (a busy producer confirms after each version that completes its
// TGBs, and that check serves before its next create), at most
// identityFresh. Longer, and a stream deleted and created again by a quick
// script would get a record of the old one's (void there, but read by the
// old stream's mounts).
const identityFresh = 100 * time.Millisecond

// preCheck is the identity check before a create (tryCommit's checked):
// nothing when one passed within two round trips, else one begun now,
// beside the probes, whose result the returned func waits for.
func (c *committer) preCheck(ctx context.Context) func() error {
	if time.Since(c.checkedAt) < min(2*c.rtt.or(defaultRTT), identityFresh) {
		return func() error { return nil }
	}
	began := time.Now()
	ch := make(chan error, 1)
	go func() { ch <- c.l.confirmIdentity(ctx, c.logger) }()
	return func() error {
		err := <-ch
		if err == nil {
			c.checkedAt = began
		}
		return err
	}
}

// commitSolo commits the producer's own queue alone (format 2 streams,
// and the naive baseline with one TGB per version).
func (c *committer) commitSolo(ctx context.Context) error {
	v, err := c.build(ctx)
	if err != nil || v == nil {
		return cmp.Or(err, c.saw(ctx, time.Now(), nil))
	}
	c.attempts++
	out, err := c.l.tryCommit(ctx, c.st, v, c.logger, c.preCheck(ctx))
	if err != nil {
		return err
	}
	if out == lostRace {
		if err := c.saw(ctx, time.Now(), nil); err != nil {
			return err
		}
		return waitShort(ctx)
	}
	c.l.maybeSnapshot(ctx, c.st, c.logger)
	return c.saw(ctx, time.Now(), v)
}

// saw accounts for the state having moved to its newest version at now
// (created by this committer when created is not nil): the interval
// between versions, the producer's completed TGBs and what it reports.
// TGBs complete only once the stream's identity was confirmed after the
// version committing them was created or read: a create may have raced
// the stream's deletion (tryCommit).
func (c *committer) saw(ctx context.Context, now time.Time, created *Version) error {
	st := c.st
	if c.confirmed < st.Version && c.p.completes(st) {
		began := time.Now()
		if err := c.l.confirmIdentity(ctx, c.logger); err != nil {
			return err
		}
		c.confirmed, c.checkedAt = st.Version, began
	}
	if n := st.Version - c.seenVer; n > 0 {
		// The records' times, not when this committer happened to read
		// them (a follower polls late as often as early); not since the
		// version it started from, whose time includes registering.
		if dt := st.Time.Sub(c.seenTime); dt > 0 && dt < time.Minute && c.seenVer > c.startVer {
			c.interval.add(dt/time.Duration(n), 0.3)
		}
		c.seenAt, c.seenVer, c.seenTime = now, st.Version, st.Time
	}
	cs := CommitStats{Version: st.Version, Committed: now}
	if created != nil {
		cs.Created, cs.Attempts, cs.VersionTGBs, cs.Visible = true, c.attempts, len(created.TGBs), now
		for _, t := range created.TGBs {
			cs.Included = append(cs.Included, TGBRef{Producer: t.Producer, Seq: t.Seq})
		}
		c.attempts = 0
	}
	done := c.p.complete(st)
	cs.TGBs = len(done)
	for _, pd := range done {
		cs.Uploaded = append(cs.Uploaded, pd.uploaded)
	}
	if c.p.observe != nil && (cs.Created || cs.TGBs > 0) {
		c.p.observe(cs)
	}
	return nil
}

// build makes version v+1 from the state at v: the producer's own queued
// TGBs and, unless solo, every other registered producer's announced ones.
// nil means there is nothing to commit.
func (c *committer) build(ctx context.Context) (*Version, error) {
	st := c.st
	me := st.Producers[c.p.id]
	if me == nil || me.Epoch != c.p.epoch {
		return nil, c.checkFence()
	}
	// The record's time is taken before the probe: a TGB uploaded before
	// it was there to be found (see missed).
	built := c.l.now().UTC()
	lists := [][]*TGB{c.p.waiting(me.Seq, c.maxGroup)}
	if !c.solo {
		others, err := c.probe(ctx)
		if err != nil {
			return nil, err
		}
		lists = append(lists, others...)
	}
	v := &Version{
		Format:  c.l.Config.writerVersion(),
		Version: st.Version + 1,
		Writer:  Writer{Producer: c.p.id, Epoch: c.p.epoch},
		Time:    built,
		Txn:     randomID(),
	}
	next := st.NextStep()
	// Round-robin, so that a full version shares its room fairly and the
	// steps interleave producers about as their TGBs arrived.
	for i := 0; len(v.TGBs) < c.maxGroup; i++ {
		added := false
		for _, l := range lists {
			if i < len(l) && len(v.TGBs) < c.maxGroup {
				if next+int64(len(v.TGBs)) > MaxStep {
					return nil, fmt.Errorf("%w (%d): step %d cannot be committed, nor any after it; create a new stream (init --first-step takes up to %d)",
						ErrStepsExhausted, int64(MaxStep), next, int64(MaxStep))
				}
				t := *l[i] // a fresh copy per attempt: Apply stamps the time
				t.Step, t.Time = next+int64(len(v.TGBs)), v.Time
				v.TGBs = append(v.TGBs, &t)
				added = true
			}
		}
		if !added {
			break
		}
	}
	if len(v.TGBs) == 0 {
		return nil, nil
	}
	if v.Format < 3 {
		last := v.TGBs[len(v.TGBs)-1]
		v.Producer = &ProducerUpdate{Seq: last.Seq, Cursor: last.Cursor}
	}
	return v, nil
}

// probe reads, in one parallel round, the objects at the next seqs of
// every other producer registered in the state (at its registered epoch
// only) and returns, per producer, the TGBs found before its first gap.
func (c *committer) probe(ctx context.Context) ([][]*TGB, error) {
	st := c.st
	type slot struct {
		t   *TGB
		err error
	}
	type target struct {
		id    string
		ps    *ProducerState
		slots []slot
	}
	var targets []*target
	for _, id := range slices.Sorted(maps.Keys(st.Producers)) {
		if ps := st.Producers[id]; id != c.p.id && c.shouldProbe(id, ps) {
			targets = append(targets, &target{id: id, ps: ps, slots: make([]slot, c.depth[id].next())})
		}
	}
	c.probed = len(targets) + 1
	sem := make(chan struct{}, probeParallel)
	var wg sync.WaitGroup
	for _, tg := range targets {
		for i := range tg.slots {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				tg.slots[i].t, _, tg.slots[i].err = c.l.readAnnouncement(ctx, tg.id, tg.ps.Epoch, tg.ps.Seq+1+uint64(i))
			})
		}
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out [][]*TGB
	for _, tg := range targets {
		var found []*TGB
		for _, s := range tg.slots {
			if s.err != nil {
				if !errors.Is(s.err, ErrNotAnnounced) {
					// A gap for now: its producer commits it itself if nobody can read it.
					c.logger.Warn("an announced TGB could not be read; leaving it and its producer's later ones for now", "err", s.err)
				}
				break
			}
			found = append(found, s.t)
		}
		c.depth[tg.id] = c.depth[tg.id].update(len(found), len(tg.slots))
		if len(found) > 0 {
			out = append(out, found)
		}
	}
	return out, nil
}

// depth is how many of a producer's next seqs a round reads: a little
// more than it usually finds (each read past the last announced one is a
// GET for nothing), and twice as many as last time when it found all.
type depth struct {
	reads int
	found float64 // smoothed TGBs found per round
}

func (d depth) next() int {
	if d.reads == 0 {
		return 2
	}
	return d.reads
}

func (d depth) update(found, read int) depth {
	if d.reads == 0 {
		d.found = float64(found)
	} else {
		d.found = 0.5*d.found + 0.5*float64(found)
	}
	d.reads = int(d.found + 1.5)
	if found == read {
		d.reads = max(d.reads, 2*read) // a backlog: catch up fast
	}
	d.reads = min(max(d.reads, 1), maxProbeDepth)
	return d
}

// shouldProbe: producers whose seq or epoch moved in the last dormantAfter
// versions are probed every round, the others every dormantEvery-th.
func (c *committer) shouldProbe(id string, ps *ProducerState) bool {
	v := c.st.Version
	a, ok := c.active[id]
	if !ok || a.seq != ps.Seq || a.epoch != ps.Epoch {
		c.active[id] = activity{seq: ps.Seq, epoch: ps.Epoch, since: v}
		return true
	}
	if v-a.since < dormantAfter {
		return true
	}
	h := fnv.New32a()
	h.Write([]byte(id))
	return (v+uint64(h.Sum32()))%dormantEvery == 0
}

// checkFence fails if a newer incarnation registered.
func (c *committer) checkFence() error {
	p := c.p
	if ps := c.st.Producers[p.id]; ps == nil || ps.Epoch != p.epoch || ps.Instance != p.instance {
		epoch := uint64(0)
		if ps != nil {
			epoch = ps.Epoch
		}
		return fmt.Errorf("%w: %s epoch %d, the stream has epoch %d (another process registered this producer id; run one producer per id)", ErrFenced, p.id, p.epoch, epoch)
	}
	return nil
}

// waiting returns up to max of the producer's queued TGBs that follow seq,
// in seq order (the contiguous run from seq+1).
func (p *Producer) waiting(seq uint64, max int) []*TGB {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*TGB
	for _, pd := range p.queue {
		if len(out) == max {
			break
		}
		if pd.Seq <= seq {
			continue
		}
		if pd.Seq != seq+uint64(len(out))+1 {
			break
		}
		out = append(out, pd.tgb)
	}
	return out
}

// completes reports whether st holds a queued TGB of this producer's.
func (p *Producer) completes(st *State) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	me := st.Producers[p.id]
	return me != nil && me.Epoch == p.epoch && len(p.queue) > 0 && p.queue[0].Seq <= me.Seq
}

// complete resolves the queued TGBs that st holds (whoever committed
// them), removes them from the queue and returns them.
func (p *Producer) complete(st *State) []*Pending {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.status = summarise(st)
	me := st.Producers[p.id]
	if me == nil || me.Epoch != p.epoch {
		return nil
	}
	n := 0
	for n < len(p.queue) && p.queue[n].Seq <= me.Seq {
		n++
	}
	if n == 0 {
		return nil
	}
	done := slices.Clone(p.queue[:n])
	for _, pd := range done {
		pd.step = st.stepOf(p.id, pd.Seq)
		close(pd.done)
	}
	p.queue = slices.Clone(p.queue[n:])
	p.cond.Broadcast()
	return done
}

// stepOf finds the step of a producer's TGB among the newest live steps
// (-1: reclaimed already).
func (s *State) stepOf(producer string, seq uint64) int64 {
	for i := len(s.Steps) - 1; i >= 0; i-- {
		t := s.Steps[i]
		if t.Producer == producer {
			if t.Seq == seq {
				return t.Step
			}
			if t.Seq < seq {
				break
			}
		}
	}
	return -1
}
