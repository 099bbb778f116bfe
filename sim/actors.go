package sim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lfs "github.com/lakestream/lakestream/fs"
	"github.com/lakestream/lakestream/internal/backoff"
	"github.com/lakestream/lakestream/stage"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// fileSpec is one file a writer sealed; its bytes follow from seed.
type fileSpec struct {
	name string
	size int
	seed uint64
}

func (f fileSpec) bytes() []byte {
	r := rand.New(rand.NewPCG(f.seed, 0x5eed))
	b := make([]byte, f.size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// batchSpec is one sealed batch: its files per rank and its step-level
// files, the ground truth every read is compared with.
type batchSpec struct {
	producer, name string
	ranks          [][]fileSpec
	shared         []fileSpec
}

func (w *world) sealedSpec(producer, name string) *batchSpec {
	return w.sealed[batchKey{producer, name}] // called with w.mu held, or after the run
}

func (w *world) logger(name string) *slog.Logger {
	if !w.verbose {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelWarn})).With("actor", name)
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error { return backoff.Sleep(ctx, d) }

// retry calls f until it succeeds, fails other than transiently, or ctx
// ends: what every command does while the store is unreachable at start.
func retry[T any](ctx context.Context, f func() (T, error)) (T, error) {
	b := backoff.New(backoff.Policy{First: 500 * time.Millisecond, Max: 8 * time.Second})
	for {
		v, err := f()
		if err == nil || !store.Transient(err) {
			return v, err
		}
		if werr := b.Wait(ctx); werr != nil {
			return v, err
		}
	}
}

// openLog opens the stream as a command does: waiting out an unreachable
// store, then measuring the store's clock (a failed measurement leaves the
// machine's own clock, off by its skew, and says so).
func (w *world) openLog(ctx context.Context, h *handle) (*txn.Log, error) {
	l, err := retry(ctx, func() (*txn.Log, error) { return txn.Open(ctx, h) })
	if err != nil {
		return nil, err
	}
	clock := l.UseStoreClock(ctx, w.skewOf(h.node), w.logger(h.name))
	if err := clock.Unmeasured(); err != nil {
		w.event("%s: clock unmeasured (%v)", h.name, err)
	}
	go clock.Keep(ctx, nil)
	return l, nil
}

// producer is one producer id: its writer seals batches into the staging
// directory of its current incarnation, and a supervisor restarts
// incarnations that end.
type producer struct {
	id  string
	mu  sync.Mutex
	dir string // where the writer seals (moves when a zombie's successor is rescheduled)
}

// writer seals the producer's batches at times drawn from the seed.
func (w *world) writer(ctx context.Context, p *producer, r *rand.Rand, n int) {
	times := make([]time.Duration, n)
	for i := range times {
		times[i] = time.Duration(r.Int64N(int64(w.cfg.length * 9 / 10)))
	}
	slices.Sort(times)
	for i, at := range times {
		if sleep(ctx, time.Until(w.start.Add(at))) != nil {
			return
		}
		spec := &batchSpec{producer: p.id, name: fmt.Sprintf("b%04d", i)}
		for range w.cfg.ranks {
			var files []fileSpec
			for j := range r.IntN(3) + 1 {
				files = append(files, fileSpec{name: fmt.Sprintf("f%d.bin", j), size: r.IntN(6000), seed: r.Uint64()})
			}
			spec.ranks = append(spec.ranks, files)
		}
		if r.IntN(4) == 0 {
			spec.shared = []fileSpec{{name: "meta.json", size: r.IntN(300), seed: r.Uint64()}}
		}
		if err := w.seal(p, spec); err != nil {
			w.fail("writer of %s could not seal %s: %v", p.id, spec.name, err)
			return
		}
	}
}

// seal writes a batch into the staging tree as a writer in any language
// would: its files, then _SEALED last.
func (w *world) seal(p *producer, spec *batchSpec) error {
	w.mu.Lock()
	w.sealed[batchKey{spec.producer, spec.name}] = spec
	w.eventLocked("%s seals %s", p.id, spec.name)
	w.mu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	dir := filepath.Join(p.dir, spec.name)
	write := func(rel string, f fileSpec) error {
		path := filepath.Join(dir, rel, f.name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		return os.WriteFile(path, f.bytes(), 0o644)
	}
	for r, files := range spec.ranks {
		for _, f := range files {
			if err := write(fmt.Sprintf("rank-%d", r), f); err != nil {
				return err
			}
		}
	}
	for _, f := range spec.shared {
		if err := write("", f); err != nil {
			return err
		}
	}
	return os.WriteFile(filepath.Join(dir, stage.Sealed), nil, 0o644)
}

// moveStaging gives the producer a new staging directory holding a copy of
// every batch sealed in the old one: a producer rescheduled to another
// machine, its writer producing again what it had not seen committed.
func (w *world) moveStaging(p *producer, dir string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ents, err := os.ReadDir(p.dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
			continue
		}
		src := filepath.Join(p.dir, name)
		if _, err := os.Stat(filepath.Join(src, stage.Sealed)); err != nil {
			continue
		}
		err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(src, path)
			to := filepath.Join(dir, name, rel)
			if d.IsDir() {
				return os.MkdirAll(to, 0o755)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		})
		if err != nil {
			// Removed meanwhile: its commit was durable.
			_ = os.RemoveAll(filepath.Join(dir, name))
		}
	}
	p.dir = dir
	return nil
}

// incarnation is one process of an actor.
type incarnation struct {
	h    *handle
	done chan struct{}
	err  error
}

// fateOf draws what happens to an incarnation: a crash at a time, a crash
// at its n-th store call, or nothing.
func (w *world) fateOf(ctx context.Context, r *rand.Rand, h *handle) {
	if time.Since(w.start) >= w.cfg.length {
		return
	}
	switch x := r.Float64(); {
	case x < 0.2:
		d := time.Duration(5+r.IntN(240)) * time.Second
		t := time.AfterFunc(d, func() { h.crash(fmt.Sprintf("killed after %s", d)) })
		context.AfterFunc(ctx, func() { t.Stop() })
	case x < 0.35:
		h.mu.Lock()
		h.crashAt = 1 + r.Int64N(400)
		h.mu.Unlock()
	}
}

// superviseProducer runs p's incarnations one after another, as systemd
// or Kubernetes would, restarting one that ended; once in a run it may
// turn one into a zombie: paused, its successor started elsewhere, then
// resumed.
func (w *world) superviseProducer(ctx context.Context, p *producer, r *rand.Rand, wg *sync.WaitGroup, zombies *atomic.Int32) {
	zombieAt := time.Duration(-1)
	if r.IntN(3) == 0 {
		zombieAt = time.Duration(r.Int64N(int64(w.cfg.length * 8 / 10)))
	}
	node := p.id
	for gen := 1; ctx.Err() == nil; gen++ {
		name := fmt.Sprintf("%s#%d", p.id, gen)
		ictx, cancel := context.WithCancel(ctx)
		inc := &incarnation{h: w.newHandle(name, node, mainRoot, cancel), done: make(chan struct{})}
		w.fateOf(ictx, r, inc.h)
		p.mu.Lock()
		dir := p.dir
		p.mu.Unlock()
		go func() {
			defer close(inc.done)
			defer cancel()
			inc.err = w.runProducer(ictx, inc.h, p.id, dir)
		}()
		var zombie <-chan time.Time
		if zombieAt >= 0 {
			zombie = time.After(time.Until(w.start.Add(zombieAt)))
		}
		zombied := false
	wait:
		for {
			select {
			case <-ctx.Done():
				<-inc.done
				return
			case <-zombie:
				if !w.registered(name) {
					// Not a zombie yet: one paused before it registered is
					// only a late start, and it fences its successor.
					zombie = time.After(5 * time.Second)
					continue
				}
				zombied = true
				break wait
			case <-inc.done:
				break wait
			}
		}
		if zombied {
			zombieAt = -1
			node += "'"
			if !w.makeZombie(ctx, p, inc, node, gen, r, wg, zombies) {
				return
			}
			continue
		}
		switch {
		case ctx.Err() != nil:
			return
		case inc.h.dead.Load():
		case errors.Is(inc.err, txn.ErrFenced):
			w.fail("%s was fenced, though no other incarnation of %s runs: %v", name, p.id, inc.err)
			return
		default:
			w.fail("%s exited by itself, for a reason docs/RELIABILITY.md does not give: %v", name, inc.err)
			return
		}
		// Restarted within seconds, as a supervisor does; one time in
		// five the machine is gone for minutes (a pod rescheduled), long
		// enough for gc to reclaim and delete what it committed last.
		down := time.Duration(1+r.IntN(20)) * time.Second
		if r.IntN(5) == 0 {
			down = time.Duration(2+r.IntN(9)) * time.Minute
		}
		if sleep(ctx, down) != nil {
			return
		}
	}
}

// makeZombie pauses inc and moves p's staging directory for its successor
// on node.
func (w *world) makeZombie(ctx context.Context, p *producer, inc *incarnation, node string, gen int, r *rand.Rand, wg *sync.WaitGroup, zombies *atomic.Int32) bool {
	inc.h.pause()
	pause := time.Duration(20+r.IntN(280)) * time.Second
	w.event("%s paused for %s; its successor starts on %s", inc.h.name, pause, node)
	w.count("zombie")
	zombies.Add(1)
	wg.Go(func() { w.zombie(ctx, inc, p.id, pause, zombies) })
	if err := w.moveStaging(p, filepath.Join(w.tmp, fmt.Sprintf("%s-%d", p.id, gen+1))); err != nil {
		w.fail("moving %s's staging directory: %v", p.id, err)
		return false
	}
	return true
}

// zombie resumes a paused incarnation after pause, and waits for it to
// learn it was fenced and stop.
func (w *world) zombie(ctx context.Context, inc *incarnation, producer string, pause time.Duration, zombies *atomic.Int32) {
	defer zombies.Add(-1)
	select {
	case <-time.After(pause):
	case <-ctx.Done():
	}
	inc.h.resume()
	w.event("%s resumes", inc.h.name)
	// It is fenced once a successor registered (the successor may have
	// crashed first, and its own successor be minutes away).
	for !w.superseded(inc.h.name, producer) {
		select {
		case <-inc.done:
		case <-ctx.Done():
		case <-time.After(time.Second):
			continue
		}
		break
	}
	// docs/RELIABILITY.md: a resumed zombie is fenced at its next commit,
	// its next back-pressure check, or within 10 s when idle; the chaos
	// run holds it to two minutes while the store is up. Here: two
	// minutes plus what the store's faults add (its outages, a slow call).
	bound := 2*time.Minute + w.faultTime(time.Now(), 10*time.Minute)
	select {
	case <-inc.done:
	case <-time.After(bound):
		if ctx.Err() == nil {
			w.fail("%s, a zombie, still runs %s after it resumed and its successor registered", inc.h.name, bound)
		}
		<-inc.done
	}
	if ctx.Err() != nil {
		return
	}
	w.event("%s (the zombie) stops: %v", inc.h.name, inc.err)
	if !errors.Is(inc.err, txn.ErrFenced) && !inc.h.dead.Load() {
		w.fail("%s, a zombie whose successor registered, stopped with %v, not fenced", inc.h.name, inc.err)
	}
}

// runProducer is one incarnation of `lakefs-produce run`.
func (w *world) runProducer(ctx context.Context, h *handle, id, dir string) error {
	l, err := w.openLog(ctx, h)
	if err != nil {
		return err
	}
	tree, err := stage.Open(dir)
	if err != nil {
		return err
	}
	o := stage.RunOptions{Store: h, Log: l, Tree: tree, ProducerID: id, MaxLead: w.cfg.maxLead,
		Logger: w.logger(h.name), WaitForLock: true, ShutdownTimeout: 20 * time.Second,
		OnBatch: func(e stage.BatchEvent) {
			// Every batch a writer seals is valid: none is ever rejected.
			if e.Rejected != "" {
				w.fail("%s rejected batch %s, which was sealed whole: %s", h.name, e.Name, e.Rejected)
			}
		}}
	if w.cfg.runGC {
		o.GCEvery, o.GCGrace = 2*time.Minute, w.cfg.runGrace
	}
	w.event("%s starts", h.name)
	w.started(h.name)
	defer w.ended(h.name)
	return stage.Run(ctx, o)
}

// consumer is one training node's mount: it follows the log, reads every
// step's ranks through the view's lookup, checks every byte against what
// was sealed, and heartbeats its position.
type consumer struct {
	id      string
	ranks   []int // nil: all
	shared  bool
	highest atomic.Int64 // the highest step read, -1 before the first
}

func (w *world) superviseConsumer(ctx context.Context, c *consumer, r *rand.Rand) {
	stallAt := time.Duration(-1)
	if r.IntN(3) == 0 {
		stallAt = time.Duration(r.Int64N(int64(w.cfg.length * 8 / 10)))
	}
	for gen := 1; ctx.Err() == nil; gen++ {
		name := fmt.Sprintf("%s#%d", c.id, gen)
		ictx, cancel := context.WithCancel(ctx)
		h := w.newHandle(name, c.id, mainRoot, cancel)
		w.fateOf(ictx, r, h)
		done := make(chan error, 1)
		go func() {
			defer cancel()
			done <- w.consume(ictx, c, h)
		}()
		var stall <-chan time.Time
		if stallAt >= 0 {
			stall = time.After(time.Until(w.start.Add(stallAt)))
		}
		var err error
	wait:
		for {
			select {
			case <-stall:
				stallAt, stall = -1, nil
				d := w.cfg.consumerTimeout + time.Duration(10+r.IntN(240))*time.Second
				h.pause()
				w.event("%s stalls for %s", name, d)
				w.count("consumer stall")
				time.AfterFunc(d, func() { h.resume(); w.event("%s comes back", name) })
			case err = <-done:
				break wait
			}
		}
		if ctx.Err() != nil {
			return
		}
		if !h.dead.Load() {
			w.fail("%s stopped by itself: %v", name, err)
			return
		}
		if sleep(ctx, time.Duration(1+r.IntN(20))*time.Second) != nil {
			return
		}
	}
}

func (w *world) consume(ctx context.Context, c *consumer, h *handle) error {
	w.started(h.name)
	defer w.ended(h.name)
	l, err := w.openLog(ctx, h)
	if err != nil {
		return err
	}
	st, err := retry(ctx, func() (*txn.State, error) { return l.Load(ctx) })
	if err != nil {
		return err
	}
	// A restarted job reads from its newest checkpoint on; a new one from
	// the first live step. Either way it holds nothing until it reads.
	pos := st.LiveFrom
	if n := len(st.Checkpoints); n > 0 && st.Checkpoints[n-1]+1 > pos {
		pos = st.Checkpoints[n-1] + 1
	}
	var highest atomic.Int64
	highest.Store(-1)
	var hb sync.WaitGroup
	defer hb.Wait()
	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	hb.Go(func() { w.heartbeats(hbCtx, l, h, c.id, &highest) })
	w.event("%s starts at step %d", h.name, pos)
	for {
		if _, err := l.Refresh(ctx, st); err != nil && !store.Transient(err) {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return err
		}
		snap := lfs.NewSnapshot(st)
		for pos < snap.Next() && ctx.Err() == nil {
			if pos < snap.LiveFrom {
				w.event("%s: step %d reclaimed before it read it; on from %d", h.name, pos, snap.LiveFrom)
				pos = snap.LiveFrom
				continue
			}
			tgb, _ := snap.Step(pos)
			err := w.readStep(ctx, l, h, c, tgb)
			if errors.Is(err, store.ErrNotFound) {
				// Gone: only a step reclaimed since the view was taken may be.
				fresh, lerr := l.Load(ctx)
				if lerr != nil {
					break
				}
				if _, live := fresh.Step(pos); live {
					w.fail("%s: step %d is live, but reading it: %v", h.name, pos, err)
					return err
				}
				st = fresh
				break
			}
			if err != nil {
				if !store.Transient(err) && ctx.Err() == nil {
					w.fail("%s: reading step %d: %v", h.name, pos, err)
				}
				break
			}
			highest.Store(pos)
			c.highest.Store(pos)
			pos++
		}
		if pos == snap.Next() && highest.Load() < pos-1 {
			// Waiting for the step after the head: the mount reports the
			// head as its position (a trainer restarted from a checkpoint
			// at the head), or producers under --max-lead would wait for
			// it while it waits for them.
			highest.Store(pos - 1)
		}
		if err := sleep(ctx, time.Second); err != nil {
			return err
		}
	}
}

// readStep reads the consumer's ranks of one step as the view serves
// them (the rank's pack, its files at their offsets) and compares every
// byte with the sealed batch.
func (w *world) readStep(ctx context.Context, l *txn.Log, h *handle, c *consumer, t *txn.TGB) error {
	w.mu.Lock()
	spec := w.sealedSpec(t.Producer, t.Batch)
	w.mu.Unlock()
	if spec == nil {
		w.fail("%s: step %d holds %s's batch %q, which nobody sealed", h.name, t.Step, t.Producer, t.Batch)
		return nil
	}
	ranks := c.ranks
	if ranks == nil {
		for r := range w.cfg.ranks {
			ranks = append(ranks, r)
		}
	}
	if c.shared {
		ranks = append(ranks, -1)
	}
	for _, r := range ranks {
		want := spec.shared
		if r >= 0 {
			want = spec.ranks[r]
		}
		p, err := l.Pack(ctx, t, r)
		if err != nil {
			return err
		}
		var files []txn.File
		var data []byte
		if p != nil {
			files = p.Files
			if data, err = h.GetRange(ctx, p.Key, p.Off, p.Size); err != nil {
				return err
			}
		}
		w.mu.Lock()
		w.stats.reads++
		w.stats.bytesRead += int64(len(data))
		w.check()
		w.mu.Unlock()
		if len(files) != len(want) {
			w.fail("%s: step %d rank %d (%s's %s) holds %d files; %d were sealed", h.name, t.Step, r, t.Producer, t.Batch, len(files), len(want))
			return nil
		}
		for i, f := range want {
			got := files[i]
			b := f.bytes()
			if got.Name != f.name || got.Size != int64(len(b)) || got.Off+got.Size > int64(len(data)) || string(data[got.Off:got.Off+got.Size]) != string(b) {
				w.fail("%s: step %d rank %d file %s (%s's %s) differs from what was sealed", h.name, t.Step, r, f.name, t.Producer, t.Batch)
				return nil
			}
		}
	}
	return nil
}

// heartbeats writes the consumer's heartbeat as a mount does: at start
// (nothing read yet) and every 10 s, after checking the stream is its own.
func (w *world) heartbeats(ctx context.Context, l *txn.Log, h *handle, node string, highest *atomic.Int64) {
	for {
		if err := l.CheckIdentity(ctx); err == nil {
			hb := txn.Heartbeat{NodeID: node, Time: l.StoreTime().UTC(), PID: 1}
			if n := highest.Load(); n >= 0 {
				hb.Step = &n
			}
			b, _ := jsonLine(hb)
			_ = store.PutBytes(ctx, h, txn.HeartbeatKey(node), b)
		}
		if sleep(ctx, 10*time.Second) != nil {
			return
		}
	}
}

// checkpointer records a checkpoint every so often at the slowest
// consumer's position, as a training job does after saving one; each is
// a new process (`lakefs-produce checkpoint`), which may crash.
func (w *world) checkpointer(ctx context.Context, r *rand.Rand, consumers []*consumer) {
	for i := 1; ; i++ {
		if sleep(ctx, time.Duration(30+r.IntN(90))*time.Second) != nil {
			return
		}
		step := int64(-1)
		for j, c := range consumers {
			if n := c.highest.Load(); j == 0 || n < step {
				step = n
			}
		}
		if step < 0 {
			continue
		}
		ictx, cancel := context.WithCancel(ctx)
		h := w.newHandle(fmt.Sprintf("ck#%d", i), "ck", mainRoot, cancel)
		w.fateOf(ictx, r, h)
		l, err := w.openLog(ictx, h)
		if err == nil {
			_, err = txn.RecordCheckpoint(ictx, l, step, w.logger(h.name))
		}
		cancel()
		w.event("%s: checkpoint at %d: %v", h.name, step, err)
	}
}

// gcProcess runs `lakefs-produce gc` every few minutes on its machine.
func (w *world) gcProcess(ctx context.Context, r *rand.Rand, node string) {
	for i := 1; ; i++ {
		if sleep(ctx, time.Duration(60+r.IntN(180))*time.Second) != nil {
			return
		}
		ictx, cancel := context.WithCancel(ctx)
		h := w.newHandle(fmt.Sprintf("%s#%d", node, i), node, mainRoot, cancel)
		w.fateOf(ictx, r, h)
		l, err := w.openLog(ictx, h)
		var rep *txn.GCReport
		if err == nil {
			rep, err = txn.GC(ictx, l, txn.GCOptions{Grace: w.cfg.grace, Logger: w.logger(h.name)})
		}
		cancel()
		switch {
		case err != nil:
			w.event("%s: gc: %v", h.name, err)
		case rep.Busy != nil:
			w.event("%s: gc: another gc runs", h.name)
		default:
			w.event("%s: gc: reclaimed below %d, %d data and %d orphans deleted", h.name, rep.ReclaimedBelow, len(rep.DataDeleted), len(rep.Orphans))
		}
	}
}

// verifier runs `lakefs-produce verify` every few minutes. What it finds
// wrong breaks an invariant only for an object of a step that is still
// live: a pack reclaimed and deleted after the grace period while a slow
// verify read an older state is not lost.
func (w *world) verifier(ctx context.Context, r *rand.Rand) {
	for i := 1; ; i++ {
		if sleep(ctx, time.Duration(120+r.IntN(240))*time.Second) != nil {
			return
		}
		ictx, cancel := context.WithCancel(ctx)
		h := w.newHandle(fmt.Sprintf("verify#%d", i), "verify", mainRoot, cancel)
		w.fateOf(ictx, r, h)
		l, err := w.openLog(ictx, h)
		var rep *txn.VerifyReport
		if err == nil {
			rep, err = txn.Verify(ictx, l, txn.VerifyOptions{Parallel: 4})
		}
		cancel()
		if err != nil {
			w.event("%s: %v", h.name, err)
			continue
		}
		w.event("%s: %d steps, %d objects, %d problems", h.name, rep.Steps, rep.Objects, len(rep.Problems))
		w.mu.Lock()
		s := w.streams[0]
		for _, p := range rep.Problems {
			w.check()
			if step, ok := s.objects[p.Object]; ok && step >= s.liveFrom {
				w.failf("%s: live step %d: %s", h.name, step, p)
			}
		}
		w.mu.Unlock()
	}
}
