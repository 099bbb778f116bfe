package txn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lakestream/lakestream/store"
)

// Heartbeat is _consumers/<node-id>.json: what a mount reports about its
// progress, so producers can hold back (--max-lead) and operators can see
// who reads what.
type Heartbeat struct {
	NodeID string `json:"node_id"`
	// Step is the highest step read through this mount; null before the
	// first read.
	Step *int64 `json:"step"`
	// Time is when the mount wrote it, by the mount's store clock
	// (store.Clock); for people. Liveness is judged by Modified.
	Time time.Time `json:"time"`
	// Version and Head are the manifest version and head step the mount
	// shows (Head null before the first commit).
	Version uint64 `json:"version"`
	Head    *int64 `json:"head"`
	Ranks   []int  `json:"ranks,omitempty"` // nil: all
	// ViewRanks is the mount's --view-ranks R2 (0: the stream's own
	// ranks); Ranks are then ranks of that view.
	ViewRanks int    `json:"view_ranks,omitempty"`
	Host      string `json:"host,omitempty"`
	PID       int    `json:"pid"`
	// Modified is the heartbeat object's Last-Modified: when the store
	// says it was written, by the store's own clock, whatever the
	// mount's clock says. Consumers and ReadHeartbeat fill it in; it is
	// not part of the object.
	Modified time.Time `json:"-"`
}

// Written is when the heartbeat was written, by the store's clock: its
// object's Last-Modified, else (a store that gave none) the mount's Time.
func (h Heartbeat) Written() time.Time {
	if !h.Modified.IsZero() {
		return h.Modified
	}
	return h.Time
}

// LiveAt reports whether the heartbeat counts as a live consumer at now,
// the reader's store time (Log.StoreTime): written at most timeout ago
// (timeout <= 0: ConsumerTimeout). Both times are the store's, so the
// mount's clock does not enter at all, and the reader's only through its
// measurement (store.Clock: right to about a second).
func (h Heartbeat) LiveAt(now time.Time, timeout time.Duration) bool {
	if timeout <= 0 {
		timeout = ConsumerTimeout
	}
	return now.Sub(h.Written()) <= timeout
}

// HeartbeatKey is the object a node's heartbeat is written to.
func HeartbeatKey(nodeID string) string { return ConsumerDir + nodeID + ".json" }

// ConsumerTimeout is how old a heartbeat may be and still count as a live
// consumer for back-pressure, gc and status: three times the longest a
// mount goes between heartbeats (a minute, while the head moves), so
// two lost writes in a row do not make a live consumer look gone.
const ConsumerTimeout = 3 * time.Minute

// Consumers reads the mounts' heartbeats, sorted by node id, each with
// its Last-Modified from the listing (Heartbeat.Modified). A heartbeat
// deleted meanwhile or that is not one (too big, not JSON) is skipped: a
// consumer must never stop a producer. One the store fails to return is
// an error, as the listing's is: skipped, it would let gc reclaim under a
// live reader (found by the simulation, sim.TestSimRegressions).
func Consumers(ctx context.Context, s store.Store) ([]Heartbeat, error) {
	var out []Heartbeat
	err := store.Walk(ctx, s, ConsumerDir, "", func(o store.Info) error {
		if !strings.HasSuffix(o.Key, ".json") {
			return nil
		}
		b, err := readBounded(ctx, s, o.Key, maxHeartbeatBytes)
		switch {
		case errors.Is(err, store.ErrNotFound) || errors.Is(err, ErrCorrupt):
			return nil // deleted meanwhile (a mount that stopped), or not a heartbeat
		case err != nil:
			return fmt.Errorf("reading %s: %w", o.Key, err)
		}
		var h Heartbeat
		if json.Unmarshal(b, &h) == nil && h.NodeID != "" {
			h.Modified = o.ModTime
			out = append(out, h)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", ConsumerDir, err)
	}
	slices.SortFunc(out, func(a, b Heartbeat) int { return strings.Compare(a.NodeID, b.NodeID) })
	return out, nil
}

// ReadHeartbeat reads node id's heartbeat with its Last-Modified
// (store.ErrNotFound when there is none).
func ReadHeartbeat(ctx context.Context, s store.Store, id string) (Heartbeat, error) {
	key := HeartbeatKey(id)
	info, err := s.Stat(ctx, key)
	if err != nil {
		return Heartbeat{}, err
	}
	b, err := readBounded(ctx, s, key, maxHeartbeatBytes)
	if err != nil {
		return Heartbeat{}, err
	}
	var h Heartbeat
	if err := json.Unmarshal(b, &h); err != nil {
		return Heartbeat{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, key, err)
	}
	h.Modified = info.ModTime
	return h, nil
}

// LeadBase is the step producers measure their lead from: the slowest live
// consumer's highest step read (a live consumer that has read nothing yet
// counts as just before the first live step), else the newest checkpoint,
// else none (ok false: no back-pressure). who names it, for status lines.
// A consumer is live while its heartbeat is at most stale old at now, the
// store's time (0: ConsumerTimeout; Heartbeat.LiveAt): a hung consumer
// holds producers back that long.
func LeadBase(st *State, consumers []Heartbeat, now time.Time, stale time.Duration) (base int64, who string, ok bool) {
	for _, h := range consumers {
		if !h.LiveAt(now, stale) {
			continue
		}
		step := st.LiveFrom - 1
		if h.Step != nil {
			step = *h.Step
		}
		if !ok || step < base {
			base, who, ok = step, "consumer "+h.NodeID, true
		}
	}
	if ok {
		return base, who, true
	}
	if n := len(st.Checkpoints); n > 0 {
		return st.Checkpoints[n-1], "checkpoint", true
	}
	return 0, "", false
}
