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
	ID string
	// Solo commits only this producer's own TGBs, one per version, and
	// retries a lost race at once: the naive baseline `bench ingest`
	// compares the combining commit with. Not for production.
	Solo   bool
	Logger *slog.Logger
	// Observe, if set, is called by the committer whenever it creates a
	// version or learns that some of this producer's TGBs are committed.
	Observe func(CommitStats)
	// OnStoreWait, if set, is told when one of the producer's retry loops
	// (load and register, uploads, commits, log reads) starts waiting out
	// a store error (waiting true, with the error) and when that loop gets
	// through or gives up (waiting false): once each per wait, from the
	// loop's goroutine, so several may be on at once.
	OnStoreWait func(waiting bool, cause error)
}

// CommitStats reports one step of a producer's progress: a version it
// created, the TGBs of its own it learned are committed, or both.
type CommitStats struct {
	// Version is the newest version the producer knows.
	Version uint64
	// Created: this producer created Version, after Attempts creates
	// (counting lost races since its previous version), with VersionTGBs
	// TGBs of any producer in it, Included naming them; Visible is when
	// the create returned.
	Created     bool
	Attempts    int
	VersionTGBs int
	Included    []TGBRef  `json:",omitempty"`
	Visible     time.Time `json:",omitzero"`
	// TGBs of this producer's own are now committed (by itself or by
	// another); Uploaded is, per TGB, when its data became durable, and
	// Committed when this producer learned of the commit.
	TGBs      int
	Uploaded  []time.Time
	Committed time.Time
}

// TGBRef names one TGB: its producer and seq.
type TGBRef struct {
	Producer string `json:"p"`
	Seq      uint64 `json:"s"`
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
	uploaded time.Time // this machine's clock, for CommitStats
	stamped  time.Time // the log's (store) clock, compared with versions' times (missed)
	missed   int       // versions built after its upload that did not include it (committer only)
	tgb      *TGB      // ranks and packs filled; step assigned at commit
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
// TGB's object, which announces it, and queues it; the committer goroutine
// (combine.go) gets it committed, by this producer or by another one that
// includes it in a version of its own, and learns which from the log.
// Methods are safe for concurrent use; a producer's TGBs commit in the
// order their Appends were called.
//
// Lock order: appendMu before mu.
type Producer struct {
	// Constant after Open.
	log      *Log
	id       string
	epoch    uint64
	instance string
	resume   Resume
	logger   *slog.Logger
	observe  func(CommitStats)
	onWait   func(bool, error) // ProducerOptions.OnStoreWait

	appendMu sync.Mutex // serialises seq assignment, uploads and queueing
	// limbo is an upload whose outcome is unknown (its Append ended with
	// the create in flight): resolved by the next Append before it takes
	// a seq. GUARDED_BY(appendMu).
	limbo *limboUpload

	mu      sync.Mutex
	cond    *sync.Cond // signalled when queue, failure or state change
	nextSeq uint64     // GUARDED_BY(mu)
	queue   []*Pending // GUARDED_BY(mu): uploaded, not yet known committed, seq order
	failed  error      // GUARDED_BY(mu): set once; every later call returns it
	closing bool       // GUARDED_BY(mu)
	status  Status     // GUARDED_BY(mu): the committer's newest state, summarised

	cancel context.CancelFunc
	done   chan struct{} // closed when the committer exits
}

// limboUpload is an Append whose create may have landed.
type limboUpload struct {
	seq   uint64
	nonce string
	batch string
}

// OpenProducer loads the stream's state, registers a new incarnation of
// opts.ID and starts its committer. The committer runs until Close or
// until ctx is cancelled.
func OpenProducer(ctx context.Context, l *Log, opts ProducerOptions) (*Producer, error) {
	if err := ValidateProducerID(opts.ID); err != nil {
		return nil, err
	}
	if err := l.Config.checkWritable(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	logger := opts.Logger.With("producer", opts.ID)
	ctx = withStoreWait(ctx, opts.OnStoreWait)
	loading := time.Now()
	st, err := loadRetry(ctx, l, logger)
	loadTook := time.Since(loading)
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
	// st now includes the register, and so every TGB of an older
	// incarnation that anyone committed before it: that is what this one
	// resumes from.
	ps := st.Producers[opts.ID]
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Producer{
		log:      l,
		id:       opts.ID,
		epoch:    v.Writer.Epoch,
		instance: instance,
		resume:   Resume{Epoch: ps.Epoch, Seq: ps.Seq, Cursor: ps.Cursor, Recent: slices.Clone(ps.Recent)},
		logger:   logger.With("epoch", v.Writer.Epoch),
		observe:  opts.Observe,
		onWait:   opts.OnStoreWait,
		nextSeq:  ps.Seq + 1,
		status:   summarise(st),
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	p.cond = sync.NewCond(&p.mu)
	p.logger.Info("producer registered", "seq", ps.Seq, "cursor", ps.Cursor, "version", st.Version)
	c := newCommitter(p, st, opts.Solo)
	c.created = v.Version // its register: the newest version it knows is its own
	// A first guess of the store's round trip, so that a new follower
	// gives a leader its time before it helps: a load is about three
	// (hint, snapshot, the version after it). Registering may have waited
	// out other writers, so it says less.
	c.timed(max(loadTook/3, time.Millisecond), 1)
	go c.run(cctx)
	return p, nil
}

func loadRetry(ctx context.Context, l *Log, logger *slog.Logger) (*State, error) {
	bo := newRetryWait(ctx)
	defer bo.done()
	for {
		st, err := l.Load(ctx)
		if err == nil || Permanent(err) {
			return st, err
		}
		logger.Warn("loading the stream state failed; retrying", "err", err)
		if werr := bo.wait(ctx, err); werr != nil {
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

// FencedIn returns ErrFenced when st holds a newer incarnation of this
// producer's id than this one: a caller that reads the log for its own
// reasons (the run's back-pressure check) learns it there, even when the
// committer, with nothing to commit, has not.
func (p *Producer) FencedIn(st *State) error {
	ps := st.Producers[p.id]
	if ps == nil || ps.Epoch < p.epoch || ps.Epoch == p.epoch && ps.Instance == p.instance {
		return nil
	}
	return fmt.Errorf("%w: %s epoch %d, the stream has epoch %d (another process registered this producer id; run one producer per id)", ErrFenced, p.id, p.epoch, ps.Epoch)
}

// Err returns the error that stopped the producer, if any.
func (p *Producer) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.failed
}

// Append uploads b's object (retrying transient store errors until ctx
// ends), which announces it, and queues the TGB for commit. It returns once
// the data is durable; Pending.Wait waits for the commit. An error from a
// source file is ErrSource and leaves nothing in the store or the queue;
// the producer stays usable.
func (p *Producer) Append(ctx context.Context, b Batch) (*Pending, error) {
	if len(b.Ranks) != p.log.Config.Ranks {
		return nil, fmt.Errorf("batch %q has %d ranks, the stream has %d", b.Name, len(b.Ranks), p.log.Config.Ranks)
	}
	if len(b.Cursor) > maxCursorLen || len(b.Name) > maxNameLen {
		return nil, fmt.Errorf("%w: batch %.64q: a name over %d bytes or a cursor over %d bytes", ErrSource, b.Name, maxNameLen, maxCursorLen)
	}
	ctx = withStoreWait(ctx, p.onWait)
	p.appendMu.Lock()
	defer p.appendMu.Unlock()
	if err := p.usable(); err != nil {
		return nil, err
	}
	if p.limbo != nil {
		pd, err := p.resolveLimbo(ctx, b.Name)
		if pd != nil || err != nil {
			return pd, err
		}
	}
	p.mu.Lock()
	seq := p.nextSeq
	p.mu.Unlock()

	nonce := p.log.uploadNonce()
	tgb, err := p.upload(ctx, seq, b, nonce)
	if StreamChanged(err) {
		p.fail(err) // nothing more of this producer's can commit
		return nil, err
	}
	if err != nil {
		if !errors.Is(err, ErrSource) && !errors.Is(err, store.ErrInvalid) && p.log.Config.combining() {
			// The create may have landed: then the TGB is announced and may
			// be committed by anyone, so its seq must not be reused.
			p.limbo = &limboUpload{seq: seq, nonce: nonce, batch: b.Name}
		}
		return nil, err
	}
	return p.enqueue(tgb)
}

func (p *Producer) usable() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed != nil {
		return p.failed
	}
	if p.closing {
		return errors.New("producer is closed")
	}
	return nil
}

// enqueue queues tgb, whose data is durable now.
func (p *Producer) enqueue(tgb *TGB) (*Pending, error) {
	pd := &Pending{Seq: tgb.Seq, uploaded: time.Now(), stamped: p.log.now(), tgb: tgb, done: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed != nil {
		return nil, p.failed
	}
	p.nextSeq = tgb.Seq + 1
	p.queue = append(p.queue, pd)
	p.cond.Broadcast()
	return pd, nil
}

// resolveLimbo finds out whether the last failed Append's object exists.
// If not, its seq is free again. If it does, the TGB is announced: it is
// queued (it will commit, whoever commits it), and when the caller is
// appending the same named batch again, that Pending is its answer.
func (p *Producer) resolveLimbo(ctx context.Context, batch string) (*Pending, error) {
	lb := p.limbo
	tgb, nonce, err := p.log.readAnnouncement(ctx, p.id, p.epoch, lb.seq)
	switch {
	case errors.Is(err, ErrNotAnnounced):
		p.limbo = nil
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("finding out whether the interrupted upload of seq %d landed: %w", lb.seq, err)
	case nonce != lb.nonce:
		err := fmt.Errorf("%w: %s holds an upload this producer did not make; run one producer per id", ErrFenced, tgb.Object.Key)
		p.fail(err)
		return nil, err
	}
	p.limbo = nil
	pd, err := p.enqueue(tgb)
	if err != nil || (batch != "" && batch == lb.batch) {
		return pd, err
	}
	return nil, nil
}

func (p *Producer) upload(ctx context.Context, seq uint64, b Batch, nonce string) (*TGB, error) {
	for _, files := range append(slices.Clone(b.Ranks), b.Shared) {
		for _, f := range files {
			if err := ValidateName(f.Name); err != nil {
				return nil, fmt.Errorf("%w: batch %q: %v", ErrSource, b.Name, err)
			}
		}
	}
	tgb := &TGB{Producer: p.id, Epoch: p.epoch, Seq: seq, Batch: b.Name, Cursor: b.Cursor}
	key := ObjectKey(p.id, p.epoch, seq)
	bo := newRetryWait(ctx)
	defer bo.done()
	for {
		var desc *announcement
		if p.log.Config.combining() {
			desc = &announcement{Producer: p.id, Epoch: p.epoch, Seq: seq, Batch: b.Name, Cursor: b.Cursor, Nonce: nonce}
		}
		obj, _, _, err := uploadObject(ctx, p.log.Store, key, b.Ranks, b.Shared, p.log.Config.ChunkSize, desc)
		if err == nil {
			tgb.Object = obj
			return tgb, nil
		}
		if errors.Is(err, store.ErrExists) {
			// An earlier attempt whose outcome was unknown landed: the
			// object is ours if it carries this Append's nonce.
			got, gotNonce, rerr := p.log.readAnnouncement(ctx, p.id, p.epoch, seq)
			if rerr == nil && gotNonce == nonce {
				return got, nil
			}
			if rerr == nil {
				return nil, fmt.Errorf("%w: %s holds an upload this producer did not make; run one producer per id", ErrFenced, key)
			}
			if errors.Is(rerr, errLeftoverUpload) {
				p.logger.Warn("deleting an upload a producer of a deleted stream left at this producer's key", "key", key)
				rerr = p.log.Store.Delete(ctx, key)
				if rerr == nil {
					continue
				}
			}
			err = rerr
		}
		// A corrupt object at this producer's own key is damage no retry
		// cures.
		if errors.Is(err, ErrSource) || errors.Is(err, store.ErrInvalid) || errors.Is(err, ErrCorrupt) || StreamChanged(err) || ctx.Err() != nil {
			return nil, fmt.Errorf("uploading %s: %w", key, err)
		}
		p.logger.Warn("upload failed; retrying", "key", key, "err", err)
		if werr := bo.wait(ctx, err); werr != nil {
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
