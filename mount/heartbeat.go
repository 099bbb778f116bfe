package mount

import (
	"context"
	"encoding/json"
	"os"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Heartbeat is _consumers/<node-id>.json: what a mount reports about its
// progress, so producers can hold back (--max-lead) and operators can see
// who reads what.
type Heartbeat struct {
	NodeID string `json:"node_id"`
	// Step is the highest step read through this mount; null before the
	// first read.
	Step *int64    `json:"step"`
	Time time.Time `json:"time"`
	// Version and Head are the manifest version and head step the mount
	// shows (Head null before the first commit).
	Version uint64 `json:"version"`
	Head    *int64 `json:"head"`
	Ranks   []int  `json:"ranks,omitempty"` // nil: all
	Host    string `json:"host,omitempty"`
	PID     int    `json:"pid"`
}

// HeartbeatKey is the object a node's heartbeat is written to.
func HeartbeatKey(nodeID string) string { return txn.ConsumerDir + nodeID + ".json" }

// heartbeat writes the heartbeat every interval until ctx ends.
func (m *mounted) heartbeat(ctx context.Context) {
	t := time.NewTicker(m.opts.HeartbeatInterval)
	defer t.Stop()
	lastErr := ""
	for {
		err := m.writeHeartbeat(ctx)
		switch {
		case err != nil && ctx.Err() == nil && err.Error() != lastErr:
			m.log.Warn("writing the heartbeat failed; will retry", "key", HeartbeatKey(m.opts.NodeID), "err", err)
			lastErr = err.Error()
		case err == nil:
			lastErr = ""
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// writeHeartbeat writes the heartbeat once.
func (m *mounted) writeHeartbeat(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	snap := m.view.Load()
	hb := Heartbeat{NodeID: m.opts.NodeID, Time: time.Now().UTC(), Version: snap.Version, Ranks: m.opts.Ranks, PID: os.Getpid()}
	hb.Host, _ = os.Hostname()
	if h := m.highest.Load(); h >= 0 {
		hb.Step = &h
	}
	if h, ok := snap.Head(); ok {
		hb.Head = &h
	}
	b, err := json.Marshal(hb)
	if err != nil {
		return err
	}
	return store.PutBytes(ctx, m.store, HeartbeatKey(m.opts.NodeID), append(b, '\n'))
}
