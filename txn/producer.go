package txn

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/lakestream/lakestream/store"
)

// Batch is one TGB handed to a Producer: per-rank files (len == ranks),
// optional shared step-level files, the staging batch name (if any) and the
// producer's source cursor after this batch.
type Batch struct {
	Name   string
	Cursor string
	Ranks  [][]FileSource
	Shared []FileSource
}

// ProducerOptions configure a Producer.
type ProducerOptions struct {
	ID       string
	Strategy Strategy // default DAC
	// UploadParallelism bounds concurrent pack uploads of one Append
	// (default 8).
	UploadParallelism int
	Logger            *slog.Logger
	// Observe, if set, is called by the committer after each committed
	// version: attempts it took and TGBs it carried.
	Observe func(CommitStats)
}

// CommitStats describes one committed version of a producer.
type CommitStats struct {
	Version  uint64
	Attempts int
	TGBs     int
	// Uploaded is, per TGB, when its data became durable; Committed is when
	// the version became visible.
	Uploaded  []time.Time
	Committed time.Time
}

// Resume is what a (re)started producer continues from.
type Resume struct {
	Epoch  uint64
	Seq    uint64
	Cursor string
	Recent []string // staging batch names of its newest TGBs, oldest first
}

// Pending is a TGB whose data is durable and whose commit is queued.
type Pending struct {
	Seq      uint64
	uploaded time.Time
	tgb      *TGB // ranks and packs filled; step assigned at commit
	done     chan struct{}
	step     int64 // valid after done, when err == nil
	err      error
}

// Wait blocks until the TGB is committed and returns its step.
func (p *Pending) Wait(ctx context.Context) (int64, error) {
	select {
	case <-p.done:
		return p.step, p.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Producer appends TGBs to a stream under one producer id. Open registers a
// new incarnation (epoch), which fences every older one. Append uploads a
// TGB's packs and queues it; one committer goroutine commits the queue in
// seq order, grouping TGBs per its Strategy. Methods are safe for
// concurrent use; TGBs commit in the order their Appends were called.
//
// Lock order: appendMu before mu.
type Producer struct {
	// Constant after Open.
	log      *Log
	id       string
	epoch    uint64
	instance string
	resume   Resume
	strategy Strategy
	par      int
	logger   *slog.Logger
	observe  func(CommitStats)

	appendMu sync.Mutex // serialises seq assignment and queueing

	mu      sync.Mutex
	cond    *sync.Cond // signalled when queue, failure or state change
	nextSeq uint64     // GUARDED_BY(mu)
	queue   []*Pending // GUARDED_BY(mu): uploaded, not yet committed, seq order
	failed  error      // GUARDED_BY(mu): set once; every later call returns it
	closing bool       // GUARDED_BY(mu)
	status  Status     // GUARDED_BY(mu): the committer's newest state, summarised

	cancel context.CancelFunc
	done   chan struct{} // closed when the committer exits

	lastVersion uint64 // the committer's previous own version (committer only)
}

// OpenProducer loads the stream's state, registers a new incarnation of
// opts.ID and starts its committer. The committer runs until Close or
// until ctx is cancelled.
func OpenProducer(ctx context.Context, l *Log, opts ProducerOptions) (*Producer, error) {
	if err := ValidateProducerID(opts.ID); err != nil {
		return nil, err
	}
	if opts.Strategy == nil {
		opts.Strategy = NewDAC(DACConfig{})
	}
	if opts.UploadParallelism <= 0 {
		opts.UploadParallelism = 8
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	logger := opts.Logger.With("producer", opts.ID)
	st, err := loadRetry(ctx, l, logger)
	if err != nil {
		return nil, err
	}
	instance := randomID()
	v, err := l.Commit(ctx, st, func(st *State) (*Version, error) {
		var epoch uint64 = 1
		if p := st.Producers[opts.ID]; p != nil {
			epoch = p.Epoch + 1
		}
		return &Version{Writer: Writer{Producer: opts.ID, Epoch: epoch}, Register: &Register{Instance: instance}}, nil
	}, logger)
	if err != nil {
		return nil, fmt.Errorf("registering producer %s: %w", opts.ID, err)
	}
	ps := st.Producers[opts.ID]
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Producer{
		log:      l,
		id:       opts.ID,
		epoch:    v.Writer.Epoch,
		instance: instance,
		resume:   Resume{Epoch: ps.Epoch, Seq: ps.Seq, Cursor: ps.Cursor, Recent: slices.Clone(ps.Recent)},
		strategy: opts.Strategy,
		par:      opts.UploadParallelism,
		logger:   logger.With("epoch", v.Writer.Epoch),
		observe:  opts.Observe,
		nextSeq:  ps.Seq + 1,
		status:   summarise(st),
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	p.cond = sync.NewCond(&p.mu)
	p.logger.Info("producer registered", "seq", ps.Seq, "cursor", ps.Cursor, "version", st.Version)
	go p.commitLoop(cctx, st)
	return p, nil
}

func loadRetry(ctx context.Context, l *Log, logger *slog.Logger) (*State, error) {
	bo := newBackoff()
	for {
		st, err := l.Load(ctx)
		if err == nil || errors.Is(err, ErrCorrupt) || errors.Is(err, store.ErrInvalid) {
			return st, err
		}
		logger.Warn("loading the stream state failed; retrying", "err", err)
		if werr := bo.wait(ctx); werr != nil {
			return nil, fmt.Errorf("%w (last: %v)", werr, err)
		}
	}
}

// Resume returns what this producer continues from: the state its id had
// when this incarnation registered.
func (p *Producer) Resume() Resume { return p.resume }

// Epoch is this incarnation's epoch.
func (p *Producer) Epoch() uint64 { return p.epoch }

// Status is a summary of the newest state a producer's committer knows.
type Status struct {
	Version  uint64
	NextStep int64 // the step the next TGB will get
	LiveFrom int64
}

func summarise(st *State) Status {
	return Status{Version: st.Version, NextStep: st.NextStep(), LiveFrom: st.LiveFrom}
}

// Status returns the newest state the committer knows, summarised.
func (p *Producer) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Err returns the error that stopped the producer, if any.
func (p *Producer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// Append uploads b's packs (retrying transient store errors until ctx
// ends) and queues the TGB for commit. It returns once the data is durable;
// Pending.Wait waits for the commit. An error from a source file is
// ErrSource and leaves nothing queued; the producer stays usable.
func (p *Producer) Append(ctx context.Context, b Batch) (*Pending, error) {
	if len(b.Ranks) != p.log.Config.Ranks {
		return nil, fmt.Errorf("batch %q has %d ranks, the stream has %d", b.Name, len(b.Ranks), p.log.Config.Ranks)
	}
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	p.mu.Lock()
	if err := p.failed; err != nil {
		p.mu.Unlock()
		return nil, err
	}
	if p.closing {
		p.mu.Unlock()
		return nil, errors.New("producer is closed")
	}
	seq := p.nextSeq
	p.mu.Unlock()

	tgb, err := p.upload(ctx, seq, b)
	if err != nil {
		return nil, err
	}
	pd := &Pending{Seq: seq, uploaded: time.Now(), tgb: tgb, done: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed != nil {
		return nil, p.failed
	}
	p.nextSeq++
	p.queue = append(p.queue, pd)
	p.cond.Broadcast()
	return pd, nil
}

func (p *Producer) upload(ctx context.Context, seq uint64, b Batch) (*TGB, error) {
	for _, files := range append(slices.Clone(b.Ranks), b.Shared) {
		for _, f := range files {
			if err := ValidateName(f.Name); err != nil {
				return nil, fmt.Errorf("%w: batch %q: %v", ErrSource, b.Name, err)
			}
		}
	}
	tgb := &TGB{Producer: p.id, Epoch: p.epoch, Seq: seq, Batch: b.Name, Cursor: b.Cursor}
	key := ObjectKey(p.id, p.epoch, seq)
	bo := newBackoff()
	for {
		obj, ranks, shared, err := uploadObject(ctx, p.log.Store, key, b.Ranks, b.Shared, p.log.Config.ChunkSize)
		if err == nil {
			// The regions passed the same checks a reader applies.
			for r, pk := range ranks {
				if err := validatePack(pk, p.log.Config.ChunkSize, false); err != nil {
					return nil, fmt.Errorf("%w: batch %q rank %d: %v", ErrSource, b.Name, r, err)
				}
			}
			if shared != nil {
				if err := validatePack(shared, p.log.Config.ChunkSize, true); err != nil {
					return nil, fmt.Errorf("%w: batch %q shared files: %v", ErrSource, b.Name, err)
				}
			}
			tgb.Object = obj
			return tgb, nil
		}
		if errors.Is(err, ErrSource) || errors.Is(err, store.ErrInvalid) || ctx.Err() != nil {
			return nil, fmt.Errorf("uploading %s: %w", key, err)
		}
		p.logger.Warn("upload failed; retrying", "key", key, "err", err)
		if werr := bo.wait(ctx); werr != nil {
			return nil, fmt.Errorf("uploading %s: %w (last: %v)", key, werr, err)
		}
	}
}

// Flush waits until every TGB appended so far is committed.
func (p *Producer) Flush(ctx context.Context) error {
	p.mu.Lock()
	var last *Pending
	if n := len(p.queue); n > 0 {
		last = p.queue[n-1]
	}
	err := p.failed
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if last == nil {
		return nil
	}
	_, err = last.Wait(ctx)
	return err
}

// Close flushes and stops the committer. The producer's data and state
// stay in the stream; a new OpenProducer with the same id resumes.
func (p *Producer) Close(ctx context.Context) error {
	ferr := p.Flush(ctx)
	p.mu.Lock()
	p.closing = true
	p.cond.Broadcast()
	p.mu.Unlock()
	p.cancel()
	<-p.done
	if ferr != nil && !errors.Is(ferr, ErrFenced) {
		return ferr
	}
	return nil
}

// fail stops the producer for good: every queued TGB gets err.
func (p *Producer) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed == nil {
		p.failed = err
	}
	for _, pd := range p.queue {
		pd.err = err
		close(pd.done)
	}
	p.queue = nil
	p.cond.Broadcast()
}

// waitQueued waits until the queue is non-empty; false means the producer
// is stopping.
func (p *Producer) waitQueued() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.queue) == 0 && !p.closing && p.failed == nil {
		p.cond.Wait()
	}
	return p.failed == nil && len(p.queue) > 0
}

// peek returns up to max queued TGBs without waiting.
func (p *Producer) peek(max int) []*Pending {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.queue[:min(max, len(p.queue))])
}

// groupFull reports whether the queue holds a whole group.
func (p *Producer) groupFull() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) >= p.strategy.MaxGroup()
}

// commitLoop is the committer. It owns st.
func (p *Producer) commitLoop(ctx context.Context, st *State) {
	defer close(p.done)
	// cond.Wait cannot watch ctx; wake it when ctx ends.
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.closing = true
		p.cond.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	last := time.Time{}
	for {
		if !p.waitQueued() {
			return
		}
		// Pace attempts, except when the group is already full: waiting
		// could not make it larger, only later.
		if wait := time.Until(last.Add(p.strategy.Delay())); wait > 0 && !p.groupFull() {
			if err := sleep(ctx, wait); err != nil {
				return
			}
			// Others committed while we waited: attempt on the newest
			// state, or the attempt is lost before it is made.
			if _, err := p.log.refreshRetry(ctx, st, p.logger); err != nil {
				p.fail(err)
				return
			}
		}
		if err := p.commitGroup(ctx, st, &last); err != nil {
			if ctx.Err() == nil {
				p.logger.Error("producer stopped", "err", err)
			}
			p.fail(err)
			return
		}
	}
}

// commitGroup commits the queue's head (re-read after every lost race, so
// TGBs queued meanwhile join the group) until one version lands.
func (p *Producer) commitGroup(ctx context.Context, st *State, last *time.Time) error {
	attempts := 0
	for {
		group := p.peek(p.strategy.MaxGroup())
		if len(group) == 0 {
			return nil
		}
		if err := p.checkFence(st); err != nil {
			return err
		}
		group = p.dropCommitted(st, group)
		if len(group) == 0 {
			continue
		}
		v := p.build(st, group)
		attempts++
		*last = time.Now()
		started := *last
		out, err := p.log.tryCommit(ctx, st, v, p.logger)
		if err != nil {
			return err
		}
		if out == lostRace {
			p.strategy.Conflict()
			p.publish(st)
			if d := p.strategy.Delay(); d > 0 {
				// Back off, then read what landed meanwhile, so the retry
				// is made on the newest state rather than one d old.
				if err := sleep(ctx, d); err != nil {
					return err
				}
				if _, err := p.log.refreshRetry(ctx, st, p.logger); err != nil {
					return err
				}
			}
			continue
		}
		p.strategy.Success()
		now := time.Now()
		if pc, ok := p.strategy.(Pacer); ok {
			if p.lastVersion > 0 {
				pc.Committed(now.Sub(started), int(v.Version-p.lastVersion-1))
			}
		}
		p.lastVersion = v.Version
		p.log.maybeSnapshot(ctx, st, p.logger)
		p.complete(st, group)
		if p.observe != nil {
			cs := CommitStats{Version: v.Version, Attempts: attempts, TGBs: len(group), Committed: now}
			for _, pd := range group {
				cs.Uploaded = append(cs.Uploaded, pd.uploaded)
			}
			p.observe(cs)
		}
		return nil
	}
}

// checkFence fails if a newer incarnation registered.
func (p *Producer) checkFence(st *State) error {
	if ps := st.Producers[p.id]; ps == nil || ps.Epoch != p.epoch || ps.Instance != p.instance {
		epoch := uint64(0)
		if ps != nil {
			epoch = ps.Epoch
		}
		return fmt.Errorf("%w: %s epoch %d, the stream has epoch %d (another process registered this producer id; run one producer per id)", ErrFenced, p.id, p.epoch, epoch)
	}
	return nil
}

// dropCommitted completes queued TGBs that the state already holds. With
// create outcomes resolved by reading this does not happen; it is the
// idempotence check that makes a rebase safe even if it did.
func (p *Producer) dropCommitted(st *State, group []*Pending) []*Pending {
	seq := st.Producers[p.id].Seq
	n := 0
	for n < len(group) && group[n].Seq <= seq {
		n++
	}
	if n > 0 {
		p.complete(st, group[:n])
	}
	return group[n:]
}

// build makes the version that appends group to st.
func (p *Producer) build(st *State, group []*Pending) *Version {
	v := &Version{
		Format:  FormatVersion,
		Version: st.Version + 1,
		Writer:  Writer{Producer: p.id, Epoch: p.epoch},
		Time:    time.Now().UTC(),
		Txn:     randomID(),
	}
	next := st.NextStep()
	for i, pd := range group {
		t := *pd.tgb // a fresh copy per attempt: Apply stamps the time
		t.Step = next + int64(i)
		t.Time = v.Time
		v.TGBs = append(v.TGBs, &t)
	}
	lastT := v.TGBs[len(v.TGBs)-1]
	v.Producer = &ProducerUpdate{Seq: lastT.Seq, Cursor: lastT.Cursor}
	return v
}

// complete resolves the queued TGBs that st now holds and removes them
// from the queue.
func (p *Producer) complete(st *State, group []*Pending) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, pd := range group {
		pd.step = -1
		// The committed TGBs are the newest of this producer; find each by seq.
		for i := len(st.Steps) - 1; i >= 0; i-- {
			t := st.Steps[i]
			if t.Producer == p.id && t.Epoch == p.epoch && t.Seq == pd.Seq {
				pd.step = t.Step
				break
			}
			if t.Producer == p.id && t.Seq < pd.Seq {
				break
			}
		}
		close(pd.done)
	}
	p.queue = p.queue[len(group):]
	p.status = summarise(st)
	p.cond.Broadcast()
}

func (p *Producer) publish(st *State) {
	p.mu.Lock()
	p.status = summarise(st)
	p.mu.Unlock()
}
