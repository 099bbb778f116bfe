package txn

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ErrFenced: a newer incarnation of this producer registered; this one can
// never commit again.
var ErrFenced = errors.New("producer fenced by a newer incarnation")

// ProducerState is what the manifest knows of one producer.
type ProducerState struct {
	ID       string `json:"id"`
	Epoch    uint64 `json:"epoch"`
	Instance string `json:"instance"`
	Seq      uint64 `json:"seq"`
	Cursor   string `json:"cursor,omitempty"`
	// Recent holds the staging batch names of the producer's most recent
	// TGBs (at most maxRecent, oldest first), so a restarted producer can
	// tell a committed batch from an uncommitted one.
	Recent []string `json:"recent,omitempty"`
	// Prints are the content fingerprints of the newest of those batches:
	// Prints[i] belongs to Recent[len(Recent)-len(Prints)+i] (a snapshot
	// written before prints existed has fewer). They prove a leftover
	// staged batch committed after gc deleted its object (BatchPrint).
	Prints []BatchPrint `json:"prints,omitempty"`
}

// BatchPrint fingerprints a committed batch's content without its bytes:
// where its object's table starts (the data's and sections' total size)
// and the table's CRC32C. The table holds each region's section CRC, and
// the sections every file's name, size and chunk CRC32Cs, so a batch that
// lays out to the same print holds the same files, up to a 2^-32 chance of
// a CRC collision between two different file lists of equal total size.
type BatchPrint struct {
	Table    int64  `json:"table"`
	TableCRC uint32 `json:"table_crc"`
}

// PrintOf is the print of the producer's recent batch, if it is known.
func (p *ProducerState) PrintOf(batch string) (BatchPrint, bool) {
	off := len(p.Recent) - len(p.Prints)
	for i := len(p.Recent) - 1; i >= max(off, 0); i-- {
		if p.Recent[i] == batch {
			return p.Prints[i-off], true
		}
	}
	return BatchPrint{}, false
}

// PendingDelete is a set of data objects whose steps were reclaimed at
// Time; gc deletes them once a grace period has passed since then.
type PendingDelete struct {
	Version uint64    `json:"version"`
	Time    time.Time `json:"time"`
	Keys    []string  `json:"keys"`
}

const (
	maxRecent      = 1024
	maxCheckpoints = 256
)

// State is the stream's state as of one version: the live window of steps,
// the producers, recent checkpoints and reclaimed data awaiting deletion.
// It is exactly what a snapshot holds. A State is owned by one goroutine;
// the *TGB values it holds are immutable and may be shared.
type State struct {
	Format  int          `json:"format"`
	Version uint64       `json:"version"`
	Time    time.Time    `json:"time"` // of the newest version
	Config  StreamConfig `json:"config"`
	// LiveFrom is the first unreclaimed step; Steps[i] is step LiveFrom+i.
	LiveFrom  int64                     `json:"live_from"`
	Steps     []*TGB                    `json:"steps"`
	Producers map[string]*ProducerState `json:"producers"`
	// Checkpoints are the recorded checkpoint steps, ascending, the newest
	// maxCheckpoints.
	Checkpoints []int64         `json:"checkpoints,omitempty"`
	Pending     []PendingDelete `json:"pending,omitempty"`

	// seenHead is when Refresh last found the version after this one
	// absent (zero: never), by the log's clock (Log.Now). See
	// LogRetention.
	seenHead time.Time
	// listedAt is the version at which Refresh last listed the log to
	// rule out a chain cut by gc (see Log.chainCut).
	listedAt uint64
}

// NewState is the state of a stream with no versions.
func NewState(cfg StreamConfig) *State {
	return &State{
		Format:    cfg.writerVersion(),
		Config:    cfg,
		LiveFrom:  cfg.FirstStep,
		Producers: map[string]*ProducerState{},
	}
}

// NextStep is the step the next committed TGB gets.
func (s *State) NextStep() int64 { return s.LiveFrom + int64(len(s.Steps)) }

// Head is the highest committed step, or false when none was ever committed.
func (s *State) Head() (int64, bool) {
	n := s.NextStep()
	return n - 1, n > s.Config.FirstStep
}

// Step returns the TGB of step n if it is live.
func (s *State) Step(n int64) (*TGB, bool) {
	if n < s.LiveFrom || n >= s.NextStep() {
		return nil, false
	}
	return s.Steps[n-s.LiveFrom], true
}

// LiveBytes is the size of all live steps' packs.
func (s *State) LiveBytes() int64 {
	var n int64
	for _, t := range s.Steps {
		n += t.Bytes()
	}
	return n
}

// Clone returns a copy that can be changed independently. TGBs are shared.
func (s *State) Clone() *State {
	c := *s
	c.Steps = slices.Clone(s.Steps)
	c.Producers = make(map[string]*ProducerState, len(s.Producers))
	for id, p := range s.Producers {
		cp := *p
		cp.Recent = slices.Clone(p.Recent)
		cp.Prints = slices.Clone(p.Prints)
		c.Producers[id] = &cp
	}
	c.Checkpoints = slices.Clone(s.Checkpoints)
	c.Pending = slices.Clone(s.Pending)
	return &c
}

// Apply validates version v against the state and applies it. On error the
// state is unchanged: Apply checks everything before it mutates anything.
func (s *State) Apply(v *Version) error {
	if v.Version != s.Version+1 {
		return fmt.Errorf("%w: version %d follows state version %d", ErrCorrupt, v.Version, s.Version)
	}
	if v.void {
		s.Version = v.Version // a deleted stream's record: its number, nothing else
		return nil
	}
	if err := s.check(v); err != nil {
		return fmt.Errorf("%w: version %d: %v", ErrCorrupt, v.Version, err)
	}
	s.apply(v)
	return nil
}

// check is Apply's validation: the rules every committer follows.
func (s *State) check(v *Version) error {
	p := s.Producers[v.Writer.Producer]
	if v.Register != nil {
		if p != nil && v.Writer.Epoch <= p.Epoch {
			return fmt.Errorf("register of %s at epoch %d, already at %d", v.Writer.Producer, v.Writer.Epoch, p.Epoch)
		}
	} else if v.Writer.Producer != "" {
		if p == nil || p.Epoch != v.Writer.Epoch {
			return fmt.Errorf("writer %s/%d is not the producer's registered epoch", v.Writer.Producer, v.Writer.Epoch)
		}
	}
	// Each producer's seqs continue its state's, whoever commits them, and
	// only its registered epoch's TGBs are added: a fenced incarnation's
	// announcements never enter the log.
	seqs := map[string]uint64{}
	next := s.NextStep()
	for i, t := range v.TGBs {
		if t.Step != next+int64(i) {
			return fmt.Errorf("TGB at step %d, the next step is %d (gap or duplicate)", t.Step, next+int64(i))
		}
		if t.Step > MaxStep {
			return fmt.Errorf("TGB at step %d, past the highest step %d", t.Step, MaxStep)
		}
		tp := s.Producers[t.Producer]
		if tp == nil || tp.Epoch != t.Epoch {
			return fmt.Errorf("step %d: TGB of %s epoch %d, which is not the producer's registered epoch", t.Step, t.Producer, t.Epoch)
		}
		seq, ok := seqs[t.Producer]
		if !ok {
			seq = tp.Seq
		}
		if t.Seq != seq+1 {
			return fmt.Errorf("step %d: producer %s seq %d does not follow seq %d", t.Step, t.Producer, t.Seq, seq)
		}
		seqs[t.Producer] = t.Seq
	}
	// A checkpoint covers a committed step: one before this version, or
	// one this version adds (docs/FORMAT.md says so; the first version
	// with TGBs may carry a checkpoint of them too).
	last := next - 1 + int64(len(v.TGBs))
	for _, c := range v.Checkpoints {
		if c > last || c < s.Config.FirstStep {
			return fmt.Errorf("checkpoint at step %d, which is not committed", c)
		}
	}
	if v.Reclaim != nil && (v.Reclaim.Below < s.LiveFrom || v.Reclaim.Below > next) {
		return fmt.Errorf("reclaim below %d outside the live window [%d,%d)", v.Reclaim.Below, s.LiveFrom, next)
	}
	return nil
}

func (s *State) apply(v *Version) {
	s.Version = v.Version
	s.Time = v.Time
	if v.Register != nil {
		p := s.Producers[v.Writer.Producer]
		if p == nil {
			p = &ProducerState{ID: v.Writer.Producer}
			s.Producers[p.ID] = p
		}
		// A new incarnation keeps the seq, cursor and recent batches: that is
		// what it resumes from.
		p.Epoch = v.Writer.Epoch
		p.Instance = v.Register.Instance
	}
	for _, t := range v.TGBs {
		t.Time = v.Time
		s.Steps = append(s.Steps, t)
		p := s.Producers[t.Producer]
		if t.Batch != "" {
			p.Recent = append(p.Recent, t.Batch)
			if v.Format >= 3 {
				p.Prints = append(p.Prints, BatchPrint{Table: t.Object.Table, TableCRC: t.Object.TableCRC})
			}
		}
		if v.Format >= 3 {
			p.Seq, p.Cursor = t.Seq, t.Cursor
		}
	}
	if v.Producer != nil {
		p := s.Producers[v.Writer.Producer]
		p.Seq = v.Producer.Seq
		p.Cursor = v.Producer.Cursor
	}
	for _, t := range v.TGBs {
		if p := s.Producers[t.Producer]; len(p.Recent) > maxRecent {
			p.Recent = slices.Clone(p.Recent[len(p.Recent)-maxRecent:])
		}
		if p := s.Producers[t.Producer]; len(p.Prints) > len(p.Recent) {
			p.Prints = slices.Clone(p.Prints[len(p.Prints)-len(p.Recent):])
		}
	}
	for _, c := range v.Checkpoints {
		if i, found := slices.BinarySearch(s.Checkpoints, c); !found {
			s.Checkpoints = slices.Insert(s.Checkpoints, i, c)
		}
	}
	if over := len(s.Checkpoints) - maxCheckpoints; over > 0 {
		s.Checkpoints = slices.Clone(s.Checkpoints[over:])
	}
	if v.Reclaim != nil && v.Reclaim.Below > s.LiveFrom {
		k := v.Reclaim.Below - s.LiveFrom
		var keys []string
		for _, t := range s.Steps[:k] {
			keys = append(keys, t.Object.Key)
		}
		s.Pending = append(s.Pending, PendingDelete{Version: v.Version, Time: v.Time, Keys: keys})
		s.Steps = slices.Clone(s.Steps[k:]) // drop the old array
		s.LiveFrom = v.Reclaim.Below
	}
	if len(v.Purged) > 0 {
		purged := make(map[string]bool, len(v.Purged))
		for _, k := range v.Purged {
			purged[k] = true
		}
		var kept []PendingDelete
		for _, pd := range s.Pending {
			pd.Keys = slices.DeleteFunc(slices.Clone(pd.Keys), func(k string) bool { return purged[k] })
			if len(pd.Keys) > 0 {
				kept = append(kept, pd)
			}
		}
		s.Pending = kept
	}
	if v.Config != nil && v.Config.RetainCheckpoints > 0 {
		s.Config.RetainCheckpoints = v.Config.RetainCheckpoints
	}
}

// validate checks a decoded snapshot's internal consistency.
func (s *State) validate(cfg *StreamConfig) error {
	if s.Format != cfg.writerVersion() {
		return fmt.Errorf("format version %d in a stream of writer version %d", s.Format, cfg.writerVersion())
	}
	if s.Config.Ranks != cfg.Ranks || s.Config.FirstStep != cfg.FirstStep || s.Config.ChunkSize != cfg.ChunkSize {
		return errors.New("stream config differs from _stream.json")
	}
	if s.LiveFrom < cfg.FirstStep {
		return fmt.Errorf("live window starts at %d, before the first step %d", s.LiveFrom, cfg.FirstStep)
	}
	if s.Producers == nil {
		s.Producers = map[string]*ProducerState{}
	}
	for i, t := range s.Steps {
		if t == nil || t.Step != s.LiveFrom+int64(i) {
			return fmt.Errorf("step at index %d is not step %d", i, s.LiveFrom+int64(i))
		}
		if p := s.Producers[t.Producer]; p == nil {
			return fmt.Errorf("step %d by unknown producer %q", t.Step, t.Producer)
		}
		if err := t.validateObject(cfg); err != nil {
			return err
		}
	}
	for id, p := range s.Producers {
		if p == nil || p.ID != id || len(p.Prints) > len(p.Recent) {
			return fmt.Errorf("producer entry %q is inconsistent", id)
		}
	}
	if !slices.IsSorted(s.Checkpoints) {
		return errors.New("checkpoints are not ascending")
	}
	return nil
}
