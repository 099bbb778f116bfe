package mount

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/lakestream/lakestream/internal/flagval"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// Heartbeats when they matter. gc and --max-lead producers read a node's
// position from its heartbeat, and a heartbeat older than
// txn.ConsumerTimeout (3 min) counts as gone. While the head moves, a
// position up to a minute old costs little: gc keeps a minute of steps
// more, and the newest commits are far above any retained checkpoint. It
// matters when the head stands still while the node reads on: producers
// may be waiting for it (--max-lead). So the heartbeat is written
//   - at start, and after a failed write, every HeartbeatInterval;
//   - when the position moved since the last write while the head has not
//     moved for half a HeartbeatInterval;
//   - else once per heartbeatRefresh (6 x HeartbeatInterval, at most a
//     minute: a third of the consumer timeout);
// and never twice within HeartbeatInterval. Checking costs no request: the
// check runs five times per HeartbeatInterval, the writes (a HEAD of
// _stream.json and a PUT) only when due.

// heartbeatPolicy decides when the heartbeat is written. It is owned by
// the heartbeat goroutine.
type heartbeatPolicy struct {
	interval, refresh time.Duration
	wrote, tried      time.Time // last success, last attempt
	failed            bool      // the last attempt failed
	step              int64     // the position written last
	head              int64     // the head seen at the last check
	headSince         time.Time // when the head last changed
}

// heartbeatRefresh is the longest time between writes at interval: six
// intervals, at most a minute, at least one interval.
func heartbeatRefresh(interval time.Duration) time.Duration {
	return max(interval, min(6*interval, time.Minute))
}

// due reports whether to write now, with the node at step and the head at
// head (-1: none).
func (p *heartbeatPolicy) due(now time.Time, step, head int64) bool {
	if head != p.head || p.headSince.IsZero() {
		p.head, p.headSince = head, now
	}
	switch {
	case !p.tried.IsZero() && now.Sub(p.tried) < p.interval:
		return false
	case p.wrote.IsZero() || p.failed:
		return true
	case now.Sub(p.wrote) >= p.refresh:
		return true
	}
	return step != p.step && now.Sub(p.headSince) >= p.interval/2
}

// done records a write attempt at now of position step.
func (p *heartbeatPolicy) done(now time.Time, step int64, err error) {
	p.tried, p.failed = now, err != nil
	if err == nil {
		p.wrote, p.step = now, step
	}
}

// heartbeat writes the heartbeat when it is due (heartbeatPolicy) until
// ctx ends.
func (m *mounted) heartbeat(ctx context.Context) {
	p := &heartbeatPolicy{interval: m.opts.HeartbeatInterval, refresh: heartbeatRefresh(m.opts.HeartbeatInterval)}
	t := time.NewTicker(max(m.opts.HeartbeatInterval/5, time.Millisecond))
	defer t.Stop()
	lastErr := ""
	for {
		head, ok := m.view.Load().Head()
		if !ok {
			head = -1
		}
		if step := m.highest.Load(); p.due(time.Now(), step, head) {
			err := m.writeHeartbeat(ctx)
			p.done(time.Now(), step, err)
			lastErr = m.logHeartbeat(ctx, err, lastErr)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// logHeartbeat counts and reports a write's outcome: a failing store to
// the heartbeat source (which logs the outage once), the stream gone once
// per distinct error; it returns the stream-gone failure now logged (""
// otherwise).
func (m *mounted) logHeartbeat(ctx context.Context, err error, lastErr string) string {
	switch {
	case err != nil && ctx.Err() != nil:
		return lastErr
	case errors.Is(err, txn.ErrStreamReplaced):
		m.heartbeatFailures.Add(1)
		m.src.heartbeat.Answered() // the store answered; markReplaced said it
		return lastErr
	case errors.Is(err, errStreamGone):
		m.heartbeatFailures.Add(1)
		m.src.heartbeat.Answered() // the store answered
		if err.Error() != lastErr {
			m.log.Error("the stream is gone from the store (was its directory or prefix deleted?); serving the last good state, writing no heartbeat until it is back",
				"store", store.Redact(m.opts.Store), "err", err)
		}
		return err.Error()
	case err != nil:
		m.heartbeatFailures.Add(1)
		m.src.heartbeat.Failed(fmt.Errorf("writing the heartbeat %s: %w", txn.HeartbeatKey(m.opts.NodeID), err))
		return lastErr
	}
	m.src.heartbeat.Answered()
	if lastErr != "" {
		m.log.Info("heartbeat written again", "key", txn.HeartbeatKey(m.opts.NodeID))
	}
	return ""
}

// streamThere reports whether the store still holds this mount's stream:
// writes of this mount's own (the heartbeat, the clock's probe) would
// otherwise bring back (file://) directories someone deleted, or land in
// the stream that replaced it.
func (m *mounted) streamThere(ctx context.Context) bool {
	if m.replaced.Load() != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return m.txlog.CheckIdentity(ctx) == nil
}

// errStreamGone: the store no longer holds the stream's _stream.json.
var errStreamGone = errors.New("the stream's " + txn.StreamKey + " is missing")

// writeHeartbeat writes the heartbeat once, unless the stream is gone from
// the store or replaced by another: writing it then would bring back
// (file://) the directories someone deleted, a stream root holding nothing
// but _consumers/, or report this node to another stream's gc. A
// replacement is recorded for good (markReplaced).
func (m *mounted) writeHeartbeat(ctx context.Context) error {
	if err := m.replaced.Load(); err != nil {
		return fmt.Errorf("%w: not writing %s", *err, txn.HeartbeatKey(m.opts.NodeID))
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err := m.txlog.CheckIdentity(ctx)
	m.streamGone.Store(errors.Is(err, txn.ErrStreamGone))
	switch {
	case errors.Is(err, txn.ErrStreamGone):
		return fmt.Errorf("%w: not writing %s", errStreamGone, txn.HeartbeatKey(m.opts.NodeID))
	case errors.Is(err, txn.ErrStreamReplaced):
		m.markReplaced(err)
		return fmt.Errorf("%w: not writing %s", err, txn.HeartbeatKey(m.opts.NodeID))
	case err != nil:
		return fmt.Errorf("checking the stream is still there: %w", err)
	}
	snap := m.view.Load()
	hb := txn.Heartbeat{NodeID: m.opts.NodeID, Time: m.txlog.StoreTime().UTC(), Version: snap.Version, Ranks: m.opts.Ranks, ViewRanks: m.opts.ViewRanks, PID: os.Getpid()}
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

// defaultNodeID is the host name plus a hash of the absolute mount point:
// two mounts on one host get two heartbeats, and a remount at the same
// place keeps its id.
func defaultNodeID(mountpoint string) (string, error) {
	h, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("no --node-id and no hostname (%v); pass --node-id", err)
	}
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return "", fmt.Errorf("mount point %s: %w", mountpoint, err)
	}
	sum := sha256.Sum256([]byte(abs))
	if len(h) > 100 {
		h = h[:100]
	}
	return h + "-" + hex.EncodeToString(sum[:4]), nil
}

// ErrNodeIDInUse: another live mount reports under the same node id; two
// mounts sharing a heartbeat look like one consumer to gc and producers.
var ErrNodeIDInUse = errors.New("node id in use")

// checkNodeIDFree refuses id when its heartbeat is fresh at now, the
// store's time (by its Last-Modified: txn.Heartbeat.LiveAt), and was
// written by another live process: another host, or a running pid on this
// one. A heartbeat left by a killed mount of this host does not block its
// restart.
func checkNodeIDFree(ctx context.Context, s store.Store, id string, now time.Time) error {
	hb, err := txn.ReadHeartbeat(ctx, s, id)
	if errors.Is(err, store.ErrNotFound) || errors.Is(err, txn.ErrCorrupt) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the heartbeat of node id %s: %w", id, err)
	}
	if !hb.LiveAt(now, 0) {
		return nil
	}
	host, _ := os.Hostname()
	if hb.Host == host && (hb.PID == os.Getpid() || hb.PID <= 0 || unix.Kill(hb.PID, 0) == unix.ESRCH) {
		return nil
	}
	return flagval.Usage(fmt.Errorf("%w: node id %s is used by a live mount (host %s, pid %d, heartbeat %s ago); give this mount its own --node-id, or leave it unset for a unique default",
		ErrNodeIDInUse, id, hb.Host, hb.PID, now.Sub(hb.Written()).Round(time.Second)))
}
