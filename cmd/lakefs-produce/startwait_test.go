package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lakestream/lakestream/internal/s3test"
	"github.com/lakestream/lakestream/stage"
	"github.com/lakestream/lakestream/txn"
)

// closedEndpoint is an s3:// URL whose endpoint refuses connections.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "s3://bkt/x?endpoint=http://" + addr + "&region=us-east-1"
}

// TestStartTimeoutKeepsTryingToTheDeadline (issue 47 item 4): run
// --start-timeout D gives up at D, not a backoff step before it (1s gave
// up after 0.67 s), and says how long it really waited.
func TestStartTimeoutKeepsTryingToTheDeadline(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	for _, timeout := range []time.Duration{time.Second, 2500 * time.Millisecond} {
		start := time.Now()
		code, _, stderr := invoke(t, "run", "--store", closedEndpoint(t), "--staging", t.TempDir(),
			"--producer-id", "p", "--start-timeout", timeout.String())
		took := time.Since(start)
		lines := strings.Split(strings.TrimSpace(stderr), "\n")
		last := lines[len(lines)-1]
		if code != 1 || !strings.Contains(last, "--start-timeout "+timeout.String()) {
			t.Fatalf("--start-timeout %s with the store down: exit %d, last line %q", timeout, code, last)
		}
		if took < timeout {
			t.Fatalf("--start-timeout %s gave up after %s, before its deadline", timeout, took)
		}
		t.Logf("--start-timeout %s: gave up after %s: %s", timeout, took.Round(time.Millisecond), last)
	}
}

// TestStartTimeoutStoreUpBeforeDeadline (issue 47 item 4): a store that
// comes back at 70% of --start-timeout is used (before, the wait gave up
// a backoff step early and exited 1 in 3 runs of 5).
func TestStartTimeoutStoreUpBeforeDeadline(t *testing.T) {
	srv := s3test.Start(t)
	url := srv.NewBucketURL(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if code, _, stderr := invoke(t, "init", "--store", url, "--ranks", "1"); code != 0 {
		t.Fatalf("init: %d %s", code, stderr)
	}
	staging := t.TempDir()
	stageBatch(t, staging, "b0", 1)
	srv.Stop(syscall.SIGTERM)
	const timeout = 2500 * time.Millisecond
	back := time.AfterFunc(timeout*7/10, func() {
		if err := srv.Restart(); err != nil {
			t.Errorf("restarting the store: %v", err)
		}
	})
	defer back.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { // stop run once the batch is committed (its directory removed)
		for ctx.Err() == nil {
			if _, err := os.Stat(staging + "/b0"); os.IsNotExist(err) {
				cancel()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	var out, errb strings.Builder
	code := run(ctx, []string{"lakefs-produce", "run", "--store", url, "--staging", staging, "--producer-id", "p",
		"--start-timeout", timeout.String()}, &out, &errb)
	if code != 0 {
		t.Fatalf("run with the store back at 70%% of --start-timeout: exit %d\n%s", code, errb.String())
	}
	if _, err := os.Stat(staging + "/b0"); !os.IsNotExist(err) {
		t.Fatalf("batch not committed: %v", err)
	}
}

// TestSignalWhileWaitingForStoreExits0 (issue 47 item 5): SIGINT or
// SIGTERM while run waits for the store at start is a clean stop (exit 0,
// nothing on stderr past the wait's lines), as at any other time.
func TestSignalWhileWaitingForStoreExits0(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var out, errb strings.Builder
	code := run(ctx, []string{"lakefs-produce", "run", "--store", closedEndpoint(t), "--staging", t.TempDir(), "--producer-id", "p"}, &out, &errb)
	if code != 0 || strings.Contains(errb.String(), "context") {
		t.Fatalf("a signal while waiting for the store: exit %d, stderr:\n%s", code, errb.String())
	}
	if !strings.Contains(errb.String(), "waiting for it") {
		t.Fatalf("run did not wait for the store:\n%s", errb.String())
	}
}

// TestProgressLogRounded (issue 47 item 10): the progress log's rates are
// rounded (it printed mb_per_s=3.6000000000000003e-06).
func TestProgressLogRounded(t *testing.T) {
	var buf strings.Builder
	p := &progress{out: &buf, logger: newLogger(&buf, false), done: make(chan struct{})}
	p.batch(stage.BatchEvent{Name: "b", Step: 0, Bytes: 36})
	p.commits, p.tgbs = 3, 1
	p.report(10 * time.Second)
	line := buf.String()
	for _, want := range []string{"mb_per_s=0 ", "batches_per_s=0.1 ", "mean_group=0.333 "} {
		if !strings.Contains(line, want) {
			t.Fatalf("progress line %q; want %q", line, want)
		}
	}
}

// TestStartDeadlineKeepsTheErrorsKind (issue 55 item 5): an error that is
// not the store being unreachable is said as it is at the start deadline
// ("no stream at this store URL"), not as "still not reachable after ...".
func TestStartDeadlineKeepsTheErrorsKind(t *testing.T) {
	url := "file://" + t.TempDir()
	_, _, err := connect(t.Context(), connectOptions{URL: url, Timeout: time.Nanosecond, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, txn.ErrNoStream) || strings.Contains(err.Error(), "not reachable") {
		t.Fatalf("connect at its deadline to a store without a stream: %v; want ErrNoStream as it is", err)
	}
}
