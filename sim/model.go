package sim

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lakestream/lakestream/store"
)

// The invariants are checked against a model of each stream built from
// the objects written, as docs/FORMAT.md describes them (not through the
// txn package's decoder), after every write and delete that lands.

// record is a log version as FORMAT.md defines it: only the fields the
// invariants need.
type record struct {
	Version uint64 `json:"version"`
	Stream  string `json:"stream"`
	Writer  struct {
		Producer string `json:"producer"`
		Epoch    uint64 `json:"epoch"`
	} `json:"writer"`
	Register *struct {
		Instance string `json:"instance"`
	} `json:"register"`
	TGBs []struct {
		Step     int64  `json:"step"`
		Producer string `json:"producer"`
		Epoch    uint64 `json:"epoch"`
		Seq      uint64 `json:"seq"`
		Batch    string `json:"batch"`
		Object   struct {
			Key  string `json:"key"`
			Size int64  `json:"size"`
		} `json:"object"`
	} `json:"tgbs"`
	Checkpoints []int64 `json:"checkpoints"`
	Reclaim     *struct {
		Below int64 `json:"below"`
	} `json:"reclaim"`
}

type batchKey struct{ producer, batch string }

type heartbeat struct {
	at   time.Time // the store's time when it was written
	step *int64
}

// streamModel is what the checker knows of one stream.
type streamModel struct {
	root      string
	id        string
	ranks     int
	retain    int
	firstStep int64

	version  uint64
	next     int64 // the step the next TGB gets
	liveFrom int64
	epochs   map[string]uint64
	seqs     map[string]uint64
	batches  map[batchKey]int64 // committed batch -> its step
	objects  map[string]int64   // data object referenced -> its step
	// reclaimed: objects whose step was reclaimed, and when.
	reclaimed   map[string]time.Time
	checkpoints []int64
	// heartbeats: every heartbeat written, per node, oldest first.
	heartbeats map[string][]heartbeat
	// static: a second stream nobody writes to once set up; every key it
	// had then must still be there at the end.
	static map[string]bool
}

func newStreamModel(root string) *streamModel {
	return &streamModel{root: root, epochs: map[string]uint64{}, seqs: map[string]uint64{},
		batches: map[batchKey]int64{}, objects: map[string]int64{}, reclaimed: map[string]time.Time{},
		heartbeats: map[string][]heartbeat{}}
}

// streamOf returns the stream a full key belongs to: the one with the
// longest root that prefixes it.
func (w *world) streamOf(key string) *streamModel {
	var best *streamModel
	for _, s := range w.streams {
		if strings.HasPrefix(key, s.root) && (best == nil || len(s.root) > len(best.root)) {
			best = s
		}
	}
	return best
}

// versionOf parses _log/<20 digits>.json.
func versionOf(rel string) (uint64, bool) {
	d, ok := strings.CutPrefix(rel, "_log/")
	if !ok {
		return 0, false
	}
	d, ok = strings.CutSuffix(d, ".json")
	if !ok || len(d) != 20 {
		return 0, false
	}
	v, err := strconv.ParseUint(d, 10, 64)
	return v, err == nil
}

// mutate applies a put or create to the shared store and checks what it
// changed. Writes are serialised here: the model sees them in the order
// the store applied them.
func (w *world) mutate(h *handle, op store.Op, key string, b []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var err error
	if op == store.OpCreate {
		err = store.CreateBytes(w.ctx, w.mem, key, b)
	} else {
		err = store.PutBytes(w.ctx, w.mem, key, b)
	}
	if err != nil {
		return err
	}
	if _, ok := w.created[key]; !ok {
		w.created[key] = time.Now()
	}
	w.written(h, op, key, b)
	return nil
}

func (w *world) written(h *handle, op store.Op, key string, b []byte) {
	s := w.streamOf(key)
	if s == nil {
		return
	}
	rel := key[len(s.root):]
	w.check()
	if s.root != h.root {
		w.failf("%s wrote %s, a key of the stream at %q, not of its own at %q", h.name, key, s.root, h.root)
		return
	}
	if s.static != nil && !w.settingUp {
		w.failf("%s wrote %s into the second stream, which nothing writes after setup", h.name, key)
		return
	}
	switch {
	case rel == "_stream.json":
		var cfg struct {
			StreamID  string `json:"stream_id"`
			Ranks     int    `json:"ranks"`
			FirstStep int64  `json:"first_step"`
			Retain    int    `json:"retain_checkpoints"`
		}
		if err := json.Unmarshal(b, &cfg); err != nil || op != store.OpCreate || s.id != "" {
			w.failf("%s wrote %s (%s) over a stream that exists, or unreadably: %v", h.name, key, op, err)
			return
		}
		s.id, s.ranks, s.firstStep, s.retain = cfg.StreamID, cfg.Ranks, cfg.FirstStep, cfg.Retain
		s.next, s.liveFrom = cfg.FirstStep, cfg.FirstStep
	case strings.HasPrefix(rel, "_consumers/") && strings.HasSuffix(rel, ".json"):
		var hb struct {
			Node string `json:"node_id"`
			Step *int64 `json:"step"`
		}
		if json.Unmarshal(b, &hb) == nil {
			s.heartbeats[hb.Node] = append(s.heartbeats[hb.Node], heartbeat{at: time.Now(), step: hb.Step})
		}
	default:
		if v, ok := versionOf(rel); ok {
			if op != store.OpCreate {
				w.failf("%s overwrote log version %s with a put: versions are created once", h.name, key)
				return
			}
			w.applyVersion(h, s, v, b)
		}
	}
}

func (w *world) applyVersion(h *handle, s *streamModel, v uint64, b []byte) {
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		w.failf("%s created version %d of %q unreadable: %v", h.name, v, s.root, err)
		return
	}
	switch {
	case v != s.version+1:
		w.failf("%s created version %d while the newest was %d: versions are contiguous", h.name, v, s.version)
		return
	case rec.Version != v:
		w.failf("%s created version %d holding version %d", h.name, v, rec.Version)
		return
	case rec.Stream != "" && rec.Stream != s.id:
		w.failf("%s created version %d of stream %s in stream %s", h.name, v, rec.Stream, s.id)
		return
	}
	s.version = v
	tgbs := 0
	if rec.Register != nil {
		p := rec.Writer.Producer
		if rec.Writer.Epoch <= s.epochs[p] {
			w.failf("version %d registers %s epoch %d, not above its epoch %d", v, p, rec.Writer.Epoch, s.epochs[p])
			return
		}
		s.epochs[p] = rec.Writer.Epoch
		w.regs[h.name] = rec.Writer.Epoch
		w.eventLocked("v%d: %s registers epoch %d (%s)", v, p, rec.Writer.Epoch, h.name)
	}
	for _, t := range rec.TGBs {
		k := batchKey{t.Producer, t.Batch}
		w.check()
		switch {
		case t.Step != s.next:
			w.failf("version %d gives %s's batch %s step %d; the next step is %d (steps are contiguous)", v, t.Producer, t.Batch, t.Step, s.next)
			return
		case t.Epoch != s.epochs[t.Producer]:
			w.failf("version %d (by %s) commits %s's batch %s of epoch %d, but %s's registered epoch is %d: a fenced incarnation landed a commit",
				v, h.name, t.Producer, t.Batch, t.Epoch, t.Producer, s.epochs[t.Producer])
			return
		case s.seqs[t.Producer] != 0 && t.Seq != s.seqs[t.Producer]+1:
			w.failf("version %d commits %s seq %d after seq %d (a producer's seqs are contiguous)", v, t.Producer, t.Seq, s.seqs[t.Producer])
			return
		}
		if step, dup := s.batches[k]; dup {
			w.failf("version %d commits %s's batch %s as step %d; it was committed as step %d already (exactly once)", v, t.Producer, t.Batch, t.Step, step)
			return
		}
		info, err := w.mem.Stat(w.ctx, s.root+t.Object.Key)
		if err != nil || info.Size != t.Object.Size {
			w.failf("version %d references %s (%d bytes), which is not in the store whole (%v, %d bytes): a visible step's bytes must be durable first",
				v, t.Object.Key, t.Object.Size, err, info.Size)
			return
		}
		if s == w.streams[0] && w.sealedSpec(t.Producer, t.Batch) == nil {
			w.failf("version %d commits %s's batch %q, which no writer sealed", v, t.Producer, t.Batch)
			return
		}
		s.batches[k] = t.Step
		s.objects[t.Object.Key] = t.Step
		s.seqs[t.Producer] = t.Seq
		s.next++
		tgbs++
	}
	if tgbs > 0 {
		w.stats.tgbs += int64(tgbs)
		w.eventLocked("v%d: %d TGBs, steps up to %d (%s)", v, tgbs, s.next-1, h.name)
	}
	w.stats.versions++
	if !w.checkpoint(h, s, v, rec.Checkpoints) {
		return
	}
	if rec.Reclaim != nil {
		w.reclaim(h, s, v, rec.Reclaim.Below)
	}
}

// checkpoint records a version's checkpoints, each of a committed step.
func (w *world) checkpoint(h *handle, s *streamModel, v uint64, steps []int64) bool {
	for _, c := range steps {
		if c >= s.next || c < s.firstStep {
			w.failf("version %d records a checkpoint at step %d, which is not committed (next %d)", v, c, s.next)
			return false
		}
		if i, found := slices.BinarySearch(s.checkpoints, c); !found {
			s.checkpoints = slices.Insert(s.checkpoints, i, c)
		}
		w.eventLocked("v%d: checkpoint %d (%s)", v, c, h.name)
	}
	return true
}

// reclaim checks a reclamation against the rules of docs/RELIABILITY.md:
// only below what the retained checkpoints allow, and never at or above
// the step of a consumer that was live (its heartbeat younger than the
// consumer timeout, by the store's clock) when the gc read the heartbeats.
func (w *world) reclaim(h *handle, s *streamModel, v uint64, below int64) {
	w.check()
	if below <= s.liveFrom || below > s.next {
		w.failf("version %d reclaims below %d; live steps are %d..%d", v, below, s.liveFrom, s.next-1)
		return
	}
	k := max(s.retain, 1)
	if len(s.checkpoints) < k || below > s.checkpoints[len(s.checkpoints)-k]+1 {
		w.failf("version %d (by %s) reclaims below %d; the %d newest checkpoints %v allow none of it", v, h.name, below, k, s.checkpoints)
		return
	}
	// The reclamation was decided on one of the handle's listings of the
	// heartbeats since its last one, judged at some moment between that
	// listing and now (the heartbeats' ages go by the listing's
	// Last-Modified): it breaks the rule if for every listing some
	// consumer had read a step (one that has read nothing holds nothing)
	// and the heartbeat listed was younger than the timeout until now
	// (the reader's clock is measured never ahead of the store's and at
	// most about a second behind), and the reclamation goes past every
	// step it reported.
	lists := h.decidedOn()
	if len(lists) == 0 {
		lists = []time.Time{time.Now()}
	}
	for _, node := range slices.Sorted(maps.Keys(s.heartbeats)) {
		w.check()
		hbs := s.heartbeats[node]
		held := true
		for _, at := range lists {
			hb, ok := lastBefore(hbs, at)
			if !ok || hb.step == nil || time.Since(hb.at) >= w.cfg.consumerTimeout-2*time.Second {
				held = false
				break
			}
		}
		if !held {
			continue
		}
		last, _ := lastBefore(hbs, time.Now())
		if last.step != nil && below > *last.step {
			var at []string
			for _, l := range lists {
				hb, _ := lastBefore(hbs, l)
				at = append(at, fmt.Sprintf("%s (step %d, heartbeat %s old then, %s now)", fmtDur(l.Sub(w.start)), *hb.step,
					l.Sub(hb.at).Round(time.Millisecond), time.Since(hb.at).Round(time.Millisecond)))
			}
			w.failf("version %d (by %s) reclaims below step %d, but consumer %s was live from each of the %d listings of the heartbeats it was decided on until now (%s) and has read step %d: a live reader's step was reclaimed",
				v, h.name, below, node, len(lists), strings.Join(at, ", "), *last.step)
			return
		}
	}
	for key, step := range s.objects {
		if step < below {
			if _, ok := s.reclaimed[key]; !ok {
				s.reclaimed[key] = time.Now()
			}
		}
	}
	s.liveFrom = below
	w.stats.reclaims++
	w.eventLocked("v%d: reclaims below %d (%s)", v, below, h.name)
}

// lastBefore is the newest heartbeat written at or before t.
func lastBefore(hbs []heartbeat, t time.Time) (heartbeat, bool) {
	for i := len(hbs) - 1; i >= 0; i-- {
		if !hbs[i].at.After(t) {
			return hbs[i], true
		}
	}
	return heartbeat{}, false
}

// remove applies a delete and checks each key: its own stream's, not a
// live step's data, a reclaimed step's only after the grace period, an
// unreferenced object only once older than it.
func (w *world) remove(h *handle, keys []string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, key := range keys {
		w.check()
		s := w.streamOf(key)
		if s == nil {
			continue
		}
		if s.root != h.root {
			w.failf("%s deleted %s, a key of the stream at %q, not of its own at %q", h.name, key, s.root, h.root)
			continue
		}
		if s.static != nil && !w.settingUp {
			w.failf("%s deleted %s of the second stream", h.name, key)
			continue
		}
		rel := key[len(s.root):]
		if rel == "_stream.json" {
			w.failf("%s deleted %s", h.name, key)
			continue
		}
		if !strings.HasPrefix(rel, "data/") {
			continue
		}
		if _, err := w.mem.Stat(w.ctx, key); err != nil {
			continue // already gone: deletes are idempotent
		}
		grace := w.cfg.minGrace - 2*time.Second
		if step, ok := s.objects[rel]; ok {
			at, reclaimed := s.reclaimed[rel]
			switch {
			case !reclaimed:
				w.failf("%s deleted %s, the data of live step %d (live from %d)", h.name, rel, step, s.liveFrom)
			case time.Since(at) < grace:
				w.failf("%s deleted %s, step %d's data, %s after its reclamation: before the grace period %s", h.name, rel, step, time.Since(at).Round(time.Millisecond), w.cfg.minGrace)
			}
			continue
		}
		if c, ok := w.created[key]; ok && time.Since(c) < grace {
			w.failf("%s deleted %s, written %s ago and referenced by no version: an orphan younger than the grace period %s", h.name, rel, time.Since(c).Round(time.Millisecond), w.cfg.minGrace)
		}
	}
	if err := w.mem.Delete(w.ctx, keys...); err != nil {
		return err
	}
	for _, k := range keys {
		delete(w.created, k)
		if s := w.streamOf(k); s != nil && strings.HasPrefix(k[len(s.root):], "data/") {
			w.stats.deleted++
		}
	}
	return nil
}

// registered reports whether the incarnation has registered its epoch.
func (w *world) registered(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.regs[name] > 0
}

// superseded reports whether a newer incarnation of the producer that
// runs name registered.
func (w *world) superseded(name, producer string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.streams[0].epochs[producer] > w.regs[name]
}

// failf records the first invariant broken; the run stops with it.
// Called with w.mu held.
func (w *world) failf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.eventLocked("INVARIANT BROKEN: %s", msg)
	if w.failure == "" {
		w.failure = msg
		w.stop()
	}
}

// check counts one invariant checked. Called with w.mu held.
func (w *world) check() { w.stats.checks++ }
