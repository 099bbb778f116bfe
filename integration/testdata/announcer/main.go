// Command announcer is a producer that dies between announcing and
// committing, on purpose: it runs the staging loop of `lakefs-produce run`
// (stage.Run, --once) on a store whose log writes block for good once the
// first TGB object has been created. So its TGB is announced (its object
// exists at its deterministic key, self-described) and never committed by
// it. It prints "ANNOUNCED <key>" when the object exists and
// "BLOCKED <key>" when its committer tries to write a log version, then
// waits to be killed. The integration tests SIGKILL it there.
//
// Usage:
//
//	announcer -store URL -staging DIR -producer-id ID
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/lakestream/lakestream/stage"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

func main() {
	url := flag.String("store", "", "store URL (required)")
	staging := flag.String("staging", "", "staging directory (required)")
	id := flag.String("producer-id", "", "producer id (required)")
	flag.Parse()
	if *url == "" || *staging == "" || *id == "" {
		fmt.Fprintln(os.Stderr, "announcer: need -store, -staging and -producer-id")
		os.Exit(2)
	}
	if err := run(context.Background(), *url, *staging, *id); err != nil {
		fmt.Fprintln(os.Stderr, "announcer:", err)
		os.Exit(1)
	}
	// stage.Run returned: the batch was committed after all, which the
	// blocked log must make impossible.
	fmt.Fprintln(os.Stderr, "announcer: the staging loop returned; the log was not blocked")
	os.Exit(1)
}

func run(ctx context.Context, url, staging, id string) error {
	s, err := store.Open(ctx, url)
	if err != nil {
		return fmt.Errorf("opening %s: %w", store.Redact(url), err)
	}
	b := &blocker{Store: s}
	l, err := txn.Open(ctx, b)
	if err != nil {
		return fmt.Errorf("opening the stream: %w", err)
	}
	tree, err := stage.Open(staging)
	if err != nil {
		return fmt.Errorf("opening the staging tree: %w", err)
	}
	return stage.Run(ctx, stage.RunOptions{
		Store: b, Log: l, Tree: tree, ProducerID: id, Once: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
}

// blocker passes every call to Store until a TGB object has been created;
// from then on every write under _log/ blocks for good.
type blocker struct {
	store.Store

	mu      sync.Mutex
	armed   bool // GUARDED_BY(mu)
	blocked bool // GUARDED_BY(mu): "BLOCKED" was printed
}

func (b *blocker) Create(ctx context.Context, key string, r io.Reader, size int64) error {
	b.gate(key)
	if err := b.Store.Create(ctx, key, r, size); err != nil {
		return err
	}
	if strings.HasPrefix(key, "data/") && strings.HasSuffix(key, "/tgb.pack") {
		b.mu.Lock()
		b.armed = true
		b.mu.Unlock()
		fmt.Printf("ANNOUNCED %s\n", key)
	}
	return nil
}

func (b *blocker) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	b.gate(key)
	return b.Store.Put(ctx, key, r, size)
}

// gate blocks forever on a log write once armed.
func (b *blocker) gate(key string) {
	if !strings.HasPrefix(key, txn.LogPrefix) {
		return
	}
	b.mu.Lock()
	armed := b.armed
	if armed && !b.blocked {
		b.blocked = true
		fmt.Printf("BLOCKED %s\n", key)
	}
	b.mu.Unlock()
	if armed {
		time.Sleep(time.Hour) // a timer, so the runtime sees no deadlock
		fmt.Fprintln(os.Stderr, "announcer: not killed within an hour")
		os.Exit(1)
	}
}
