package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lakestream/lakestream/store"
)

// errCrashed is what a crashed incarnation's calls return: its process is
// gone, so nothing it does reaches the store any more. It is not
// transient, so its goroutines stop rather than retry.
var errCrashed = errors.New("sim: this incarnation crashed")

// handle is one incarnation's store: the shared store seen under its
// stream's root, every call passing the world's fault schedule, and cut
// off (crash) or held (pause) as the schedule says. It implements
// store.Store.
type handle struct {
	w    *world
	name string // incarnation, for the event log: "p2#3"
	node string // the machine it runs on: probe faults are per node
	root string // its stream's prefix in the shared store ("" or ending in '/')

	dead    atomic.Bool
	stopped chan struct{}      // closed with dead: wakes its slow calls
	cancel  context.CancelFunc // the incarnation's context, cancelled by a crash

	mu     sync.Mutex
	paused chan struct{}    // GUARDED_BY(mu): non-nil while paused (closed on resume)
	calls  int64            // GUARDED_BY(mu)
	tries  map[string]int64 // GUARDED_BY(mu): calls per operation and key
	// instant and inInstant count the calls made without virtual time
	// passing: a spin, which would hold the bubble for ever.
	instant   time.Time // GUARDED_BY(mu)
	inInstant int       // GUARDED_BY(mu)
	crashAt   int64     // GUARDED_BY(mu): crash at this call (0: never)
	// lists are the times it listed the consumers' heartbeats since the
	// last reclamation it committed: a reclamation it commits was decided
	// on one of them.
	lists []time.Time // GUARDED_BY(mu)
}

// sawConsumers notes a listing of the heartbeats.
func (h *handle) sawConsumers(op store.Op, key string) {
	if op != store.OpList || !strings.HasPrefix(key, "_consumers") {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lists = append(h.lists, time.Now())
}

// decidedOn returns the times the handle listed the heartbeats since its
// last reclamation, and starts a new span.
func (h *handle) decidedOn() []time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.lists
	h.lists = nil
	return l
}

func (w *world) newHandle(name, node, root string, cancel context.CancelFunc) *handle {
	h := &handle{w: w, name: name, node: node, root: root, cancel: cancel, tries: map[string]int64{}, stopped: make(chan struct{})}
	w.mu.Lock()
	w.handles = append(w.handles, h)
	w.mu.Unlock()
	return h
}

// crash ends the incarnation at once: no call of its reaches the store
// after this one, and its context is cancelled so its goroutines stop.
func (h *handle) crash(why string) {
	if h.kill() {
		h.w.event("%s crashes (%s)", h.name, why)
		h.w.count("process crash")
	}
}

// end stops the incarnation as the run ends: like crash, without an
// event. A call held by a pause under a context that is never cancelled
// (a clock probe's cleanup) would otherwise outlive the run.
func (h *handle) end() { h.kill() }

// kill marks the incarnation dead and cancels its context in one step
// under mu, where wait reads dead: whoever sees one sees the other. A
// goroutine whose call failed with errCrashed finds its context done,
// and a supervisor whose process returned on a cancelled context finds
// it dead, so neither takes the kill for the store's failure or the
// process's own exit; and no pause begins after it. It reports whether
// this call killed it.
func (h *handle) kill() bool {
	h.mu.Lock()
	if h.dead.Swap(true) {
		h.mu.Unlock()
		return false
	}
	if h.cancel != nil {
		h.cancel()
	}
	close(h.stopped) // after cancel: a slow call it wakes sees ctx done
	h.mu.Unlock()
	h.resume()
	return true
}

// pause holds every call of the incarnation until resume: a process
// stopped (SIGSTOP, a long GC pause, a partitioned node).
func (h *handle) pause() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused == nil && !h.dead.Load() {
		h.paused = make(chan struct{})
	}
}

func (h *handle) resume() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.paused != nil {
		close(h.paused)
		h.paused = nil
	}
}

// maxCallsInInstant is more store calls than any process makes in one
// instant of virtual time without spinning.
const maxCallsInInstant = 100_000

// wait holds a call while the incarnation is paused; a dead one's calls
// fail.
func (h *handle) wait(ctx context.Context) error {
	h.mu.Lock()
	gate, dead := h.paused, h.dead.Load()
	h.mu.Unlock()
	if dead {
		return errCrashed
	}
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	h.mu.Lock()
	dead = h.dead.Load()
	h.mu.Unlock()
	if dead {
		return errCrashed
	}
	return nil
}

// fate is what the schedule does to one call.
type fate int

const (
	fateOK     fate = iota
	fateLost        // applied, but the caller hears of a failure
	fateExists      // a create applied, then its retry answered "exists" (an SDK retry)
)

// enter passes one call through the incarnation's state and the fault
// schedule: it returns an error for a call that fails before reaching
// the store, and otherwise the call's fate.
func (h *handle) enter(ctx context.Context, op store.Op, key string) (fate, error) {
	if err := h.wait(ctx); err != nil {
		return fateOK, fmt.Errorf("%s %s: %w", op, key, err)
	}
	// A call's draws depend on the seed, the incarnation, the call and
	// how many times it made this call before: not on how its goroutines
	// interleave with others', so a seed replays alike as far as it can.
	h.mu.Lock()
	if now := time.Now(); now.Equal(h.instant) {
		h.inInstant++
	} else {
		h.instant, h.inInstant = now, 0
	}
	spin := h.inInstant == maxCallsInInstant
	h.calls++
	crash := h.crashAt > 0 && h.calls == h.crashAt
	drawKey := key
	if strings.HasPrefix(key, store.ProbePrefix) {
		// A clock probe's key is random: draw by its class, so the
		// n-th probe of a replay meets the fault the first run's did.
		drawKey = store.ProbePrefix
	}
	id := op.String() + " " + drawKey
	h.tries[id]++
	x := mix(h.w.seed, hashString(h.name), hashString(id), uint64(h.tries[id]))
	h.mu.Unlock()
	draw, draw2 := unit(x), unit(mix(x))
	if spin {
		// Time stands still while the spin runs, so nothing else would
		// end the run: stop it here, with the seed.
		h.w.fail("%s made %d store calls without time passing (its last: %s %s): a spin", h.name, maxCallsInInstant, op, key)
		panic(h.w.report())
	}
	write := op == store.OpPut || op == store.OpCreate || op == store.OpDelete
	if crash {
		// A crash at an await point: half the time the write got out
		// before the process died.
		h.crash(fmt.Sprintf("at its call %d, %s %s", h.crashAt, op, key))
		if write && draw < 0.5 {
			return fateLost, nil
		}
		return fateOK, fmt.Errorf("%s %s: %w", op, key, errCrashed)
	}
	f := h.w.faultsAt(time.Now(), h.node, h.root+key)
	switch {
	case f.down:
		h.w.count("store down")
		return fateOK, fmt.Errorf("%s %s: store down: %w", op, key, store.ErrUnavailable)
	case f.probe && write:
		h.w.count("clock probe refused")
		return fateOK, fmt.Errorf("%s %s: probe refused: %w", op, key, store.ErrUnavailable)
	case draw < f.errRate:
		h.w.count("store error")
		return fateOK, fmt.Errorf("%s %s: %w", op, key, store.ErrUnavailable)
	}
	if f.slowRate > 0 && draw2 < f.slowRate {
		h.w.count("slow call")
		t := time.NewTimer(f.slow)
		select {
		case <-t.C:
		case <-h.stopped:
			t.Stop()
			return fateOK, fmt.Errorf("%s %s: %w", op, key, errCrashed)
		case <-ctx.Done():
			t.Stop()
			return fateOK, fmt.Errorf("%s %s: %w", op, key, ctx.Err())
		}
	}
	if write && draw >= f.errRate && draw < f.errRate+f.lostRate {
		if op == store.OpCreate && draw2 < 0.5 {
			h.w.count("create retried after it landed")
			return fateExists, nil
		}
		h.w.count("response lost")
		return fateLost, nil
	}
	return fateOK, nil
}

func (h *handle) full(key string) (string, error) {
	if err := store.ValidateKey(key); err != nil {
		return "", err
	}
	return h.root + key, nil
}

func (h *handle) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	b, err := h.read(ctx, store.OpGet, key, func(k string) ([]byte, error) { return store.ReadAll(ctx, h.w.mem, k) })
	if err != nil {
		return nil, err
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (h *handle) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	return h.read(ctx, store.OpGetRange, key, func(k string) ([]byte, error) { return h.w.mem.GetRange(ctx, k, off, n) })
}

func (h *handle) read(ctx context.Context, op store.Op, key string, get func(string) ([]byte, error)) ([]byte, error) {
	k, err := h.full(key)
	if err != nil {
		return nil, err
	}
	if _, err := h.enter(ctx, op, key); err != nil {
		return nil, err
	}
	b, err := get(k)
	return b, h.strip(err)
}

func (h *handle) Stat(ctx context.Context, key string) (store.Info, error) {
	k, err := h.full(key)
	if err != nil {
		return store.Info{}, err
	}
	if _, err := h.enter(ctx, store.OpStat, key); err != nil {
		return store.Info{}, err
	}
	info, err := h.w.mem.Stat(ctx, k)
	info.Key = key
	return info, h.strip(err)
}

// strip names keys relative to the handle's root in errors, as a
// store rooted there would.
func (h *handle) strip(err error) error {
	if err == nil || h.root == "" {
		return err
	}
	return &rootedErr{err: err, msg: strings.ReplaceAll(err.Error(), h.root, "")}
}

type rootedErr struct {
	err error
	msg string
}

func (e *rootedErr) Error() string { return e.msg }
func (e *rootedErr) Unwrap() error { return e.err }

func (h *handle) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	return h.write(ctx, store.OpPut, key, r, size)
}

func (h *handle) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	return h.write(ctx, store.OpCreate, key, r, size)
}

func (h *handle) write(ctx context.Context, op store.Op, key string, r io.Reader, size int64) error {
	k, err := h.full(key)
	if err != nil {
		return err
	}
	// The body is read before the call is decided: a writer's reader
	// (a pack streamed from staged files) is consumed as a real upload's
	// would be, and the world's lock is never held across it.
	b, err := io.ReadAll(io.LimitReader(r, size+1))
	if err != nil {
		return fmt.Errorf("%s %s: reading the body: %w", op, key, err)
	}
	if int64(len(b)) != size {
		return fmt.Errorf("%s %s: body of %d bytes, want %d: %w", op, key, len(b), size, store.ErrInvalid)
	}
	f, err := h.enter(ctx, op, key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", op, key, err)
	}
	err = h.w.mutate(h, op, k, b)
	switch {
	case err != nil:
		return h.strip(err)
	case f == fateLost:
		return fmt.Errorf("%s %s: response lost: %w", op, key, store.ErrUnavailable)
	case f == fateExists:
		return fmt.Errorf("%s %s: %w", op, key, store.ErrExists)
	}
	return nil
}

func (h *handle) List(ctx context.Context, prefix, after string, limit int) ([]store.Info, bool, error) {
	if prefix != "" {
		if err := store.ValidatePrefix(prefix); err != nil {
			return nil, false, err
		}
	}
	if _, err := h.enter(ctx, store.OpList, prefix); err != nil {
		return nil, false, err
	}
	h.sawConsumers(store.OpList, prefix)
	a := after
	if a != "" {
		a = h.root + after
	}
	objs, more, err := h.w.mem.List(ctx, h.root+prefix, a, limit)
	if err != nil {
		return nil, false, h.strip(err)
	}
	stale := h.w.faultsAt(time.Now(), h.node, h.root+prefix).staleList
	out := objs[:0]
	for _, o := range objs {
		if stale > 0 && h.w.young(o.Key, stale) {
			h.w.count("listing missed a new key")
			continue
		}
		o.Key = strings.TrimPrefix(o.Key, h.root)
		out = append(out, o)
	}
	if more && len(objs) > 0 && len(out) == 0 {
		// Every key of the page was hidden: page on from the last one.
		return h.List(ctx, prefix, strings.TrimPrefix(objs[len(objs)-1].Key, h.root), limit)
	}
	return out, more, nil
}

func (h *handle) Delete(ctx context.Context, keys ...string) error {
	full := make([]string, len(keys))
	for i, k := range keys {
		f, err := h.full(k)
		if err != nil {
			return err
		}
		full[i] = f
	}
	first := ""
	if len(keys) > 0 {
		first = keys[0]
	}
	f, err := h.enter(ctx, store.OpDelete, first)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delete %s: %w", first, err)
	}
	if err := h.w.remove(h, full); err != nil {
		return h.strip(err)
	}
	if f != fateOK {
		return fmt.Errorf("delete %s: response lost: %w", first, store.ErrUnavailable)
	}
	return nil
}

// mix hashes its arguments into one well-spread value (splitmix64's
// finaliser over each).
func mix(xs ...uint64) uint64 {
	var h uint64 = 0x9e3779b97f4a7c15
	for _, x := range xs {
		h ^= x
		h += 0x9e3779b97f4a7c15
		h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
		h = (h ^ (h >> 27)) * 0x94d049bb133111eb
		h ^= h >> 31
	}
	return h
}

// unit maps x to [0, 1).
func unit(x uint64) float64 { return float64(x>>11) / (1 << 53) }

func hashString(s string) uint64 {
	var x uint64 = 14695981039346656037
	for i := 0; i < len(s); i++ {
		x ^= uint64(s[i])
		x *= 1099511628211
	}
	return x
}
