package sim

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// mainRoot is where the simulated stream lives in the shared store; a
// second stream is nested under its data/ or beside it.
const mainRoot = "main/"

// Result is what one seed's run did and found.
type Result struct {
	Seed      uint64
	Simulated time.Duration // virtual time from start to the end of the drain
	Versions  int64
	TGBs      int64
	Reclaims  int64
	Deleted   int64
	Reads     int64
	BytesRead int64 // bytes those reads compared with what was sealed
	Checks    int64
	Faults    map[string]int64
	Failure   string // the first invariant broken; "" when none
	World     string // the world drawn from the seed
	Events    []string
}

// Run simulates one world drawn from seed. It must be called inside a
// testing/synctest bubble: every timer, sleep and deadline is virtual, so
// the hours it simulates take seconds. tmp is an empty directory for the
// staging trees. verbose prints every event as it happens.
func Run(seed uint64, tmp string, verbose bool) Result {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	rng := rand.New(rand.NewPCG(seed, 0x51a))
	w := &world{seed: seed, cfg: newConfig(rng), rng: rng, start: time.Now(), ctx: ctx, stop: stop,
		mem: store.NewMemClock(time.Now), tmp: tmp, verbose: verbose,
		created: map[string]time.Time{}, regs: map[string]uint64{}, running: map[string]bool{}, sealed: map[batchKey]*batchSpec{}}
	w.stats.faults = map[string]int64{}
	w.streams = []*streamModel{newStreamModel(mainRoot)}
	var nodes []string
	producers := make([]*producer, w.cfg.producers)
	for i := range producers {
		producers[i] = &producer{id: fmt.Sprintf("p%d", i)}
		nodes = append(nodes, producers[i].id)
	}
	consumers := make([]*consumer, w.cfg.consumers)
	for i := range consumers {
		c := &consumer{id: fmt.Sprintf("c%d", i), shared: i == 0}
		if i > 0 && rng.IntN(2) == 0 {
			c.ranks = []int{rng.IntN(w.cfg.ranks)}
		}
		c.highest.Store(-1)
		consumers[i] = c
		nodes = append(nodes, c.id)
	}
	var judges []string
	if w.cfg.runGC || w.cfg.maxLead > 0 {
		judges = append(judges, nodes[:len(producers)]...)
	}
	for i := range w.cfg.gcs {
		nodes = append(nodes, fmt.Sprintf("gc%d", i))
		judges = append(judges, fmt.Sprintf("gc%d", i))
	}
	nodes = append(nodes, "ck", "verify")
	w.scheduleFaults(nodes, judges)
	for _, n := range nodes {
		if d := w.skewOf(n); d >= time.Minute || d <= -time.Minute {
			w.stats.faults["clock off by a minute or more"]++
		}
	}
	if verbose {
		fmt.Printf("seed %d: %s\n", seed, w.describe())
	}
	res := Result{Seed: seed}
	if err := w.setup(ctx, producers); err != nil {
		w.fail("setup: %v", err)
	} else {
		w.simulate(ctx, producers, consumers)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	res.Simulated = time.Since(w.start)
	res.Versions, res.TGBs, res.Reclaims, res.Deleted = w.stats.versions, w.stats.tgbs, w.stats.reclaims, w.stats.deleted
	res.Reads, res.BytesRead, res.Checks, res.Faults = w.stats.reads, w.stats.bytesRead, w.stats.checks, w.stats.faults
	res.Failure, res.World, res.Events = w.failure, w.describe(), slices.Clone(w.events)
	return res
}

// setup creates the stream (and the second one, with two committed
// steps) and the producers' staging directories.
func (w *world) setup(ctx context.Context, producers []*producer) error {
	w.mu.Lock()
	w.settingUp = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.settingUp = false
		w.mu.Unlock()
	}()
	if w.cfg.nested != "" {
		root := mainRoot + "data/nested/"
		if w.cfg.nested == "neighbour" {
			root = strings.TrimSuffix(mainRoot, "/") + "-b/"
		}
		s := newStreamModel(root)
		w.mu.Lock()
		w.streams = append(w.streams, s)
		w.mu.Unlock()
		if err := w.secondStream(ctx, root); err != nil {
			return fmt.Errorf("second stream: %w", err)
		}
		objs, _, err := w.mem.List(ctx, root, "", 0)
		if err != nil {
			return err
		}
		s.static = map[string]bool{}
		for _, o := range objs {
			s.static[o.Key] = true
		}
	}
	h := w.newHandle("init", "init", mainRoot, nil)
	snap := uint64(3 + w.rng.IntN(20))
	if _, err := txn.Create(ctx, h, txn.CreateOptions{Ranks: w.cfg.ranks, ChunkSize: 4096, SnapshotEvery: snap, RetainCheckpoints: w.cfg.retain}); err != nil {
		return err
	}
	for _, p := range producers {
		p.dir = fmt.Sprintf("%s/%s-1", w.tmp, p.id)
		if err := mkdir(p.dir); err != nil {
			return err
		}
	}
	return nil
}

func (w *world) secondStream(ctx context.Context, root string) error {
	h := w.newHandle("second", "second", root, nil)
	l, err := txn.Create(ctx, h, txn.CreateOptions{Ranks: 1, ChunkSize: 4096})
	if err != nil {
		return err
	}
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "nested", Logger: w.logger("second")})
	if err != nil {
		return err
	}
	defer p.Close(ctx)
	for i := range 2 {
		b := txn.Batch{Name: fmt.Sprintf("n%d", i), Ranks: [][]txn.FileSource{{txn.BytesFile("x", []byte("second stream"))}}}
		pd, err := p.Append(ctx, b)
		if err != nil {
			return err
		}
		if _, err := pd.Wait(ctx); err != nil {
			return err
		}
	}
	return p.Close(ctx)
}

// simulate runs every actor through the faults, then lets the run drain
// with no faults and checks that everything finished.
func (w *world) simulate(ctx context.Context, producers []*producer, consumers []*consumer) {
	var wg sync.WaitGroup
	var zombies atomic.Int32
	actor := func(name string) *rand.Rand { return rand.New(rand.NewPCG(w.seed, hashString("actor "+name))) }
	var writers sync.WaitGroup
	for _, p := range producers {
		writers.Go(func() { w.writer(ctx, p, actor("writer "+p.id), w.cfg.batches) })
		wg.Go(func() { w.superviseProducer(ctx, p, actor(p.id), &wg, &zombies) })
	}
	for _, c := range consumers {
		wg.Go(func() { w.superviseConsumer(ctx, c, actor(c.id)) })
	}
	wg.Go(func() { w.checkpointer(ctx, actor("ck"), consumers) })
	wg.Go(func() { w.verifier(ctx, actor("verify")) })
	for i := range w.cfg.gcs {
		node := fmt.Sprintf("gc%d", i)
		wg.Go(func() { w.gcProcess(ctx, actor(node), node) })
	}
	writers.Wait()
	// The faults end at length; from then on everything must finish
	// within the drain.
	end := w.start.Add(w.cfg.length + w.cfg.drain)
	_ = sleep(ctx, time.Until(w.start.Add(w.cfg.length)))
	for ctx.Err() == nil {
		pending := w.pending(consumers, &zombies)
		if pending == "" {
			break
		}
		if time.Now().After(end) {
			w.fail("stall: %s, %s after the faults stopped", pending, w.cfg.drain)
			break
		}
		_ = sleep(ctx, 5*time.Second)
	}
	w.stop()
	w.mu.Lock()
	handles := slices.Clone(w.handles)
	w.mu.Unlock()
	for _, h := range handles {
		h.end()
	}
	// Every process stops within its shutdown bound once its context
	// ends; one that does not would keep the bubble alive for ever.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		w.fail("still running 5m after the run ended: %s", strings.Join(w.runningNow(), " "))
		panic(w.report()) // the test cannot end while they run: say why, with every goroutine's stack
	}
	if w.failed() == "" {
		w.final()
	}
}

// pending says what has not finished: batches sealed but not committed,
// consumers behind the head, zombies still running.
func (w *world) pending(consumers []*consumer, zombies *atomic.Int32) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.streams[0]
	var missing []string
	for _, k := range slices.SortedFunc(maps.Keys(w.sealed), func(a, b batchKey) int { return strings.Compare(a.producer+"/"+a.batch, b.producer+"/"+b.batch) }) {
		if _, ok := s.batches[k]; !ok {
			missing = append(missing, k.producer+"/"+k.batch)
		}
	}
	var why []string
	if len(missing) > 0 {
		why = append(why, fmt.Sprintf("%d sealed batches not committed (%s)", len(missing), strings.Join(missing[:min(len(missing), 5)], " ")))
	}
	for _, c := range consumers {
		if n := c.highest.Load(); n < s.next-1 {
			why = append(why, fmt.Sprintf("consumer %s at step %d of %d", c.id, n, s.next-1))
		}
	}
	if n := zombies.Load(); n > 0 {
		why = append(why, fmt.Sprintf("%d zombies still running", n))
	}
	return strings.Join(why, "; ")
}

// final checks what must hold once everything stopped: verify finds the
// stream whole, and the second stream has every key it had.
func (w *world) final() {
	ctx := context.Background()
	h := w.newHandle("verify", "verify", mainRoot, nil)
	l, err := txn.Open(ctx, h)
	if err != nil {
		w.fail("verify: %v", err)
		return
	}
	rep, err := txn.Verify(ctx, l, txn.VerifyOptions{Parallel: 4})
	if err != nil || len(rep.Problems) > 0 {
		w.fail("verify: %v %v", err, rep)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.check()
	for _, s := range w.streams {
		for k := range s.static {
			w.check()
			if _, err := w.mem.Stat(ctx, k); err != nil {
				w.failf("the second stream lost %s: %v", k, err)
				return
			}
		}
	}
}

// report is a failure's seed, the replay command and the last events, for
// a panic: the failures that keep the bubble from ending.
func (w *world) report() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fmt.Sprintf("seed %d: %s\nreplay: go test ./sim -run 'TestSim$' -seed %d -v\nlast events:\n  %s", w.seed, w.failure, w.seed, strings.Join(w.events, "\n  "))
}

func jsonLine(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}

func mkdir(dir string) error { return os.MkdirAll(dir, 0o755) }
