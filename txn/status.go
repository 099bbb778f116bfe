package txn

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/store"
)

// StatusReport is `lakefs-produce status --json`. Scripts read the field
// names: add, never rename (docs/ARCHITECTURE.md, compatibility rules).
type StatusReport struct {
	Head        *int64           `json:"head"` // null when no step is committed
	FirstStep   int64            `json:"first_step"`
	Version     uint64           `json:"version"`
	Ranks       int              `json:"ranks"`
	Live        LiveRange        `json:"live"`
	Producers   []ProducerReport `json:"producers"`
	Checkpoints []int64          `json:"checkpoints"`
	DataBytes   int64            `json:"data_bytes"`

	StreamID          string           `json:"stream_id"`
	RetainCheckpoints int              `json:"retain_checkpoints"`
	ReclaimTarget     *int64           `json:"reclaim_target"` // LiveFrom the checkpoints allow
	PendingDeletes    int              `json:"pending_deletes"`
	Consumers         []ConsumerReport `json:"consumers"`
	Time              *time.Time       `json:"time"` // of the newest version; null before the first

	// Lead is how far the next step is ahead of what back-pressure
	// measures from (null when nothing reports): a producer run with
	// --max-lead M holds its uploads while Lead.Steps > M.
	Lead *LeadReport `json:"lead"`
	// GCHeldBy are the live consumers below ReclaimTarget: gc reclaims only
	// below the slowest of them unless forced.
	GCHeldBy []ConsumerHold `json:"gc_held_by"`
	// ClockUnmeasured says why the store's clock could not be measured
	// (empty when it was): consumers' liveness, Lead and GCHeldBy are then
	// judged by this machine's clock, which nothing reclaims by.
	ClockUnmeasured string `json:"clock_unmeasured,omitempty"`
}

// LeadReport is the producers' lead over the slowest reader.
type LeadReport struct {
	Base  int64  `json:"base"`  // the step measured from
	Who   string `json:"who"`   // "consumer <node>" or "checkpoint"
	Steps int64  `json:"steps"` // next step - base
}

// LiveRange is the unreclaimed steps; From and To are null when empty.
type LiveRange struct {
	From  *int64 `json:"from"`
	To    *int64 `json:"to"`
	Count int64  `json:"count"`
}

// ProducerReport is one producer in a StatusReport.
type ProducerReport struct {
	ID     string `json:"id"`
	Epoch  uint64 `json:"epoch"`
	Seq    uint64 `json:"seq"`
	Cursor string `json:"cursor"`
	// LastStep is the producer's newest live step (null if none).
	LastStep *int64 `json:"last_step"`
}

// ConsumerReport is one mount's heartbeat, with its lag behind the head.
type ConsumerReport struct {
	Node string `json:"node"`
	Step *int64 `json:"step"`
	Lag  *int64 `json:"lag"` // head - step
	// Time is when the heartbeat was written, by the store's clock (its
	// Last-Modified: Heartbeat.Written).
	Time time.Time `json:"time"`
	Live bool      `json:"live"` // heartbeat younger than ConsumerTimeout, by the store's clock
	// Ranks the node shows (nil: all), of its view when ViewRanks > 0
	// (lakefs-mount --view-ranks).
	Ranks     []int `json:"ranks,omitempty"`
	ViewRanks int   `json:"view_ranks,omitempty"`
}

// StreamStatus summarises the stream's newest state. Consumers are judged
// live by the log's clock (Log.StoreTime).
func StreamStatus(ctx context.Context, l *Log) (*StatusReport, error) {
	st, err := l.Load(ctx)
	if err != nil {
		return nil, err
	}
	cons, err := Consumers(ctx, l.Store)
	if err != nil {
		return nil, err
	}
	now := l.StoreTime()
	r := &StatusReport{
		FirstStep:         l.Config.FirstStep,
		Version:           st.Version,
		Ranks:             l.Config.Ranks,
		Checkpoints:       append([]int64{}, st.Checkpoints...),
		DataBytes:         st.LiveBytes(),
		StreamID:          l.Config.StreamID,
		RetainCheckpoints: st.Config.RetainCheckpoints,
		Producers:         []ProducerReport{},
		Consumers:         []ConsumerReport{},
	}
	if err := l.ClockErr(); err != nil {
		r.ClockUnmeasured = err.Error()
	}
	if !st.Time.IsZero() {
		t := st.Time
		r.Time = &t
	}
	for _, pd := range st.Pending {
		r.PendingDeletes += len(pd.Keys)
	}
	if h, ok := st.Head(); ok {
		r.Head = &h
	}
	if n := int64(len(st.Steps)); n > 0 {
		from, to := st.LiveFrom, st.LiveFrom+n-1
		r.Live = LiveRange{From: &from, To: &to, Count: n}
	}
	if t, ok := ReclaimTarget(st); ok {
		r.ReclaimTarget = &t
		if t > st.LiveFrom {
			r.GCHeldBy, _ = ConsumerHolds(cons, min(t, st.NextStep()), now, 0)
		}
	}
	if r.GCHeldBy == nil {
		r.GCHeldBy = []ConsumerHold{}
	}
	last := map[string]int64{}
	for _, t := range st.Steps {
		last[t.Producer] = t.Step
	}
	for _, p := range st.Producers {
		pr := ProducerReport{ID: p.ID, Epoch: p.Epoch, Seq: p.Seq, Cursor: p.Cursor}
		if s, ok := last[p.ID]; ok {
			pr.LastStep = &s
		}
		r.Producers = append(r.Producers, pr)
	}
	slices.SortFunc(r.Producers, func(a, b ProducerReport) int { return strings.Compare(a.ID, b.ID) })
	if base, who, ok := LeadBase(st, cons, now, 0); ok {
		r.Lead = &LeadReport{Base: base, Who: who, Steps: st.NextStep() - base}
	}
	for _, h := range cons {
		c := ConsumerReport{Node: h.NodeID, Step: h.Step, Time: h.Written(), Live: h.LiveAt(now, 0), Ranks: h.Ranks, ViewRanks: h.ViewRanks}
		if h.Step != nil && r.Head != nil {
			lag := *r.Head - *h.Step
			c.Lag = &lag
		}
		r.Consumers = append(r.Consumers, c)
	}
	return r, nil
}

// Problem is one thing Verify found wrong.
type Problem struct {
	Object string `json:"object"`
	What   string `json:"what"`
}

func (p Problem) String() string { return p.Object + ": " + p.What }

// VerifyReport is what Verify checked.
type VerifyReport struct {
	Version  uint64    `json:"version"`
	Steps    int64     `json:"steps"`
	Objects  int       `json:"objects"`
	Bytes    int64     `json:"bytes"`
	Problems []Problem `json:"problems"`
}

// VerifyOptions configure Verify.
type VerifyOptions struct {
	Parallel int // objects read at once (at least 1)
	// Progress, if set, is told the objects checked so far and their
	// number, after each one; it is called from several goroutines.
	Progress func(done, total int64)
}

// Verify checks the log (Load validates every record it reads: format,
// contiguous steps, names, sizes), then that every live pack exists with
// its recorded size and that every chunk's and file's CRC32C matches. A
// log that cannot be read is an error; everything else is a Problem.
func Verify(ctx context.Context, l *Log, o VerifyOptions) (*VerifyReport, error) {
	st, err := l.Load(ctx)
	if err != nil {
		return nil, err
	}
	rep := &VerifyReport{Version: st.Version, Steps: int64(len(st.Steps)), Problems: []Problem{}}
	rep.Objects = len(st.Steps)
	problems := make([][]Problem, len(st.Steps))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(o.Parallel, 1))
	var done atomic.Int64
	total := int64(len(st.Steps))
	for i, t := range st.Steps {
		rep.Bytes += t.Object.Size
		g.Go(func() error {
			ps, err := l.verifyObject(gctx, t)
			if err != nil {
				return err
			}
			problems[i] = ps
			if o.Progress != nil {
				o.Progress(done.Add(1), total)
			}
			return gctx.Err()
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, ps := range problems {
		rep.Problems = append(rep.Problems, ps...)
	}
	return rep, nil
}

// verifyObject checks one TGB's object: its size, its index, and every
// region's chunk and file CRCs, one region in memory at a time. A store
// that cannot answer now (store.Transient) is an error, not a problem of
// the object: verify must not call sound data bad during an outage (the
// simulation found it reporting a 503 as an unreadable pack).
func (l *Log) verifyObject(ctx context.Context, t *TGB) ([]Problem, error) {
	key := t.Object.Key
	transient := func(err error) error {
		if store.Transient(err) || ctx.Err() != nil {
			return fmt.Errorf("verifying %s: %w", key, err)
		}
		return nil
	}
	info, err := l.Store.Stat(ctx, key)
	if err != nil {
		return []Problem{{key, fmt.Sprintf("unreadable: %v", err)}}, transient(err)
	}
	if info.Size != t.Object.Size {
		return []Problem{{key, fmt.Sprintf("%d bytes, the log says %d", info.Size, t.Object.Size)}}, nil
	}
	if t.Object.Footer > 0 {
		// What a committer would read of it must say what the log says.
		got, _, err := l.readAnnouncement(ctx, t.Producer, t.Epoch, t.Seq)
		if terr := transient(err); terr != nil {
			return nil, terr
		}
		if err == nil && (!got.Object.same(t.Object) || got.Batch != t.Batch || got.Cursor != t.Cursor) {
			err = fmt.Errorf("its self-description says %+v (batch %q), the log %+v (batch %q)", *got.Object, got.Batch, *t.Object, t.Batch)
		}
		if err != nil {
			return []Problem{{key, fmt.Sprintf("step %d: self-description: %v", t.Step, err)}}, nil
		}
	}
	ranks, shared, err := l.Packs(ctx, t)
	if err != nil {
		return []Problem{{key, err.Error()}}, transient(err)
	}
	nranks := len(ranks)
	if shared != nil {
		ranks = append(ranks, shared)
	}
	var out []Problem
	for r, p := range ranks {
		data, err := l.Store.GetRange(ctx, key, p.Off, p.Size)
		if terr := transient(err); terr != nil {
			return nil, terr
		}
		errs := []error{err}
		if err == nil {
			errs = packProblems(p, data, l.Config.ChunkSize)
		}
		// Chunks and offsets count from the start of the region, so
		// every rank's look alike: name the rank.
		where := fmt.Sprintf("step %d rank %d", t.Step, r)
		if r >= nranks {
			where = fmt.Sprintf("step %d step-level files", t.Step)
		}
		for _, err := range errs {
			out = append(out, Problem{key, where + ": " + err.Error()})
		}
	}
	return out, nil
}
