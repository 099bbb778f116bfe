package stage_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lakestream/lakestream/stage"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// logDown fails every create under _log/ once a TGB's data was uploaded:
// the batch is appended, and its commit waits for a store that never
// comes back.
type logDown struct {
	store.Store
	uploaded atomic.Bool
	failed   atomic.Int64
}

func (s *logDown) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.HasPrefix(key, "data/") {
		defer s.uploaded.Store(true)
	}
	if strings.HasPrefix(key, "_log/") && s.uploaded.Load() {
		s.failed.Add(1)
		return fmt.Errorf("create %s: %w", key, store.ErrUnavailable)
	}
	return s.Store.Create(ctx, key, r, size)
}

func (s *logDown) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if strings.HasPrefix(key, "data/") {
		defer s.uploaded.Store(true)
	}
	return s.Store.Put(ctx, key, r, size)
}

// runWhileCommitWaits stages b000 and starts Run (o, on e's staging
// directory, as producer p) over a store whose log creates fail once the
// data is uploaded; it returns once the commit met the failing store,
// with the channel Run's result comes on.
func runWhileCommitWaits(t *testing.T, ctx context.Context, e *env, o stage.RunOptions) <-chan error {
	t.Helper()
	batch(t, e.staging, "b000")
	down := &logDown{Store: e.store}
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	o.Store, o.Log, o.Tree, o.ProducerID, o.Poll = down, &txn.Log{Store: down, Config: e.log.Config}, tree, "p", 20*time.Millisecond
	done := make(chan error, 1)
	go func() { done <- stage.Run(ctx, o) }()
	for deadline := time.Now().Add(30 * time.Second); down.failed.Load() < 3; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the commit never met the failing store (%d failed creates)", down.failed.Load())
		}
	}
	return done
}

// TestSignalWhileStoreDownReturns (issue 43 item 6): a SIGTERM while the
// commit of an appended batch waits for a store that is down ends Run
// within its shutdown bound (before, the cleaner waited for the commit
// forever and the pod stayed Terminating until SIGKILL); the batch stays
// staged and a restart commits it exactly once.
func TestSignalWhileStoreDownReturns(t *testing.T) {
	e := newEnv(t)
	var waiting atomic.Bool
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const bound = 2 * time.Second
	done := runWhileCommitWaits(t, ctx, e, stage.RunOptions{ShutdownTimeout: bound, StoreWaiting: waiting.Store})
	// Issue 43 item 8: the gauge shows the commit's wait inside txn.
	eventually(t, "lakefs_produce_store_waiting on while the commit waits", waiting.Load)
	cancel()
	stopped := time.Now()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after a signal = %v; want a clean stop", err)
		}
		t.Logf("Run returned %v after the signal (bound %v)", time.Since(stopped).Round(time.Millisecond), bound)
	case <-time.After(bound + 20*time.Second):
		t.Fatalf("Run did not return %v after the signal (shutdown bound %v): the shutdown waits for a store that is down", bound+20*time.Second, bound)
	}
	if _, err := os.Stat(filepath.Join(e.staging, "b000", stage.Sealed)); err != nil {
		t.Fatalf("the uncommitted batch left the staging tree: %v", err)
	}
	if got := e.steps(t); len(got) != 0 {
		t.Fatalf("steps after the failed commit: %v", got)
	}
	// The restart, on a healthy store, commits it once.
	if rej := e.run(t, "p"); len(rej) != 0 {
		t.Fatalf("restart rejected %v", rej)
	}
	if got := e.steps(t); len(got) != 1 || got["b000"] != 0 {
		t.Fatalf("steps after the restart = %v; want b000 once, at step 0", got)
	}
}

// TestOncePassDeadline (issue 43 item 7): a --once pass whose store fails
// after the start (uploads fine, every commit refused) ends at its
// deadline with ErrPassDeadline naming the store's error, instead of
// retrying forever; the batch stays staged.
func TestOncePassDeadline(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b000")
	down := &logDown{Store: e.store}
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(t.Context(), stage.RunOptions{
			Store: down, Log: &txn.Log{Store: down, Config: e.log.Config}, Tree: tree, ProducerID: "p", Once: true,
			PassDeadline: time.Now().Add(time.Second), ShutdownTimeout: time.Second,
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, stage.ErrPassDeadline) || !errors.Is(err, store.ErrUnavailable) && !strings.Contains(err.Error(), store.ErrUnavailable.Error()) {
			t.Fatalf("Run --once past its deadline = %v; want ErrPassDeadline naming the store's error", err)
		}
		t.Logf("run --once: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("run --once did not end at its deadline: it waits for the store forever")
	}
	if _, err := os.Stat(filepath.Join(e.staging, "b000", stage.Sealed)); err != nil {
		t.Fatalf("the uncommitted batch left the staging tree: %v", err)
	}
}

// TestSignalDuringGCNotAFailure (issue 47 item 10): a signal that stops
// run's periodic gc is not logged as a gc failure ("WARN gc failed; will
// retry ... context canceled").
func TestSignalDuringGCNotAFailure(t *testing.T) {
	e := newEnv(t)
	slow := store.NewFaulty(e.store, 1)
	slow.Set(store.Fault{Latency: 100 * time.Millisecond}, store.OpList)
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(ctx, stage.RunOptions{
			Store: slow, Log: &txn.Log{Store: slow, Config: e.log.Config}, Tree: tree, ProducerID: "p",
			Poll: 10 * time.Millisecond, GCEvery: time.Nanosecond, Logger: slog.New(slog.NewTextHandler(&syncWriter{w: &logs}, nil)),
		})
	}()
	for deadline := time.Now().Add(30 * time.Second); slow.Calls(store.OpList) < 3; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("gc never listed the store")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after a signal = %v", err)
	}
	if strings.Contains(logs.String(), "gc failed") {
		t.Fatalf("a signal during gc was logged as a failure:\n%s", logs.String())
	}
}

// syncWriter serialises writes to w (the run logs from several goroutines).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// TestStoreWaitingDuringLockWait (issue 43 item 8): while run waits for a
// staging directory another process holds, the gauge says it waits, and
// drops when it got it.
func TestStoreWaitingDuringLockWait(t *testing.T) {
	e := newEnv(t)
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	other, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := other.Lock("other")
	if err != nil {
		t.Fatal(err)
	}
	var waiting atomic.Bool
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(ctx, stage.RunOptions{Store: e.store, Log: e.log, Tree: tree, ProducerID: "p",
			WaitForLock: true, Poll: 10 * time.Millisecond, StoreWaiting: waiting.Store})
	}()
	eventually(t, "the gauge on while the staging directory is held", waiting.Load)
	unlock()
	eventually(t, "the gauge off once run holds the directory", func() bool { return !waiting.Load() })
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestOwnErrorWhileStoreDownReturns (issue 55 item 4): the loop fails on
// its own (here the staging directory is moved away) while a commit
// waits for a store that is down: Run reports that error within its
// shutdown bound. Before, it flushed with no bound and neither exited
// nor said anything until the store returned or a signal came.
func TestOwnErrorWhileStoreDownReturns(t *testing.T) {
	e := newEnv(t)
	const bound = 2 * time.Second
	done := runWhileCommitWaits(t, t.Context(), e, stage.RunOptions{ShutdownTimeout: bound})
	if err := os.Rename(e.staging, e.staging+".gone"); err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), e.staging) {
			t.Fatalf("Run after its staging directory went: %v; want an error naming it", err)
		}
		t.Logf("Run returned %v after the loop failed (bound %v): %v", time.Since(failed).Round(time.Millisecond), bound, err)
	case <-time.After(bound + 20*time.Second):
		t.Fatalf("Run did not return %v after its loop failed (shutdown bound %v): it waits for a store that is down", bound+20*time.Second, bound)
	}
}

// hintFlaky fails the Gets of the log's snapshot hint numbered in fail
// (counting from 1) with a transient error.
type hintFlaky struct {
	store.Store
	n    atomic.Int64
	fail map[int64]bool
}

func (s *hintFlaky) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if key == txn.HintKey && s.fail[s.n.Add(1)] {
		return nil, fmt.Errorf("get %s: %w", key, store.ErrUnavailable)
	}
	return s.Store.Get(ctx, key)
}

// TestOnceRetriesTransient (issue 55 item 7): a --once pass whose store
// fails transiently after the start retries within its pass deadline, as
// run's help says, instead of ending the pass at once. Here a batch left
// staged after its commit (a crash before its removal) is compared with
// the log, whose first two reads fail.
func TestOnceRetriesTransient(t *testing.T) {
	e := newEnv(t)
	batch(t, e.staging, "b000")
	if rej := e.run(t, "p"); len(rej) != 0 {
		t.Fatalf("rejected %v", rej)
	}
	batch(t, e.staging, "b000") // committed, and staged again with the same content
	batch(t, e.staging, "b001")
	flaky := &hintFlaky{Store: e.store, fail: map[int64]bool{2: true, 3: true}}
	tree, err := stage.Open(e.staging)
	if err != nil {
		t.Fatal(err)
	}
	err = stage.Run(t.Context(), stage.RunOptions{
		Store: flaky, Log: &txn.Log{Store: flaky, Config: e.log.Config}, Tree: tree, ProducerID: "p", Once: true,
		PassDeadline: time.Now().Add(time.Minute), Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("a --once pass over a store failing twice: %v; want it retried within its deadline", err)
	}
	if n := flaky.n.Load(); n < 4 {
		t.Fatalf("%d reads of the hint: the failing ones were not met", n)
	}
	if got := e.steps(t); len(got) != 2 || got["b000"] != 0 || got["b001"] != 1 {
		t.Fatalf("steps %v; want b000 at 0 and b001 at 1, once each", got)
	}
	for _, b := range []string{"b000", "b001"} {
		if _, err := os.Stat(filepath.Join(e.staging, b)); !os.IsNotExist(err) {
			t.Errorf("%s still staged after the pass (%v)", b, err)
		}
	}
}
