package mount

import (
	"context"
	"encoding/json"
	"os"
	"time"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// heartbeat writes the heartbeat every interval until ctx ends.
func (m *mounted) heartbeat(ctx context.Context) {
	t := time.NewTicker(m.opts.HeartbeatInterval)
	defer t.Stop()
	lastErr := ""
	for {
		err := m.writeHeartbeat(ctx)
		switch {
		case err != nil && ctx.Err() == nil && err.Error() != lastErr:
			m.log.Warn("writing the heartbeat failed; will retry", "key", txn.HeartbeatKey(m.opts.NodeID), "err", err)
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
	hb := txn.Heartbeat{NodeID: m.opts.NodeID, Time: time.Now().UTC(), Version: snap.Version, Ranks: m.opts.Ranks, ViewRanks: m.opts.ViewRanks, PID: os.Getpid()}
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
	return store.PutBytes(ctx, m.store, txn.HeartbeatKey(m.opts.NodeID), append(b, '\n'))
}
