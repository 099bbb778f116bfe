package bench

// `lakefs-bench read --follow`: consumer latency at the head. A producer
// commits a step every Interval (a rate well below the store's limit)
// while N readers, one per rank, wait for each next step and read all of
// their rank's bytes: through lakefs-mount with --wait (system mount),
// or as a NATS JetStream pull consumer per rank fetching the same parts
// as they are published (system nats, page-cache acks). A sample is the
// time from the step becoming visible (the commit returned; NATS: every
// part acked) to a reader having read all of its rank's bytes.

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/txn"
)

// The systems of the follow benchmark.
const (
	FollowMount = "mount"
	FollowNATS  = "nats"
)

// FollowRow is one line of `read --follow`: one system, N readers.
type FollowRow struct {
	Kind       string  `json:"kind"` // "follow"
	System     string  `json:"system"`
	Readers    int     `json:"readers"`
	Samples    int     `json:"samples"` // readers x steps
	SizeBytes  int64   `json:"size_bytes"`
	IntervalMs float64 `json:"interval_ms"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// E2EP50Ms and E2EP99Ms: from the producer starting the step (its
	// upload; NATS: the first publish) to the reader having read it. A
	// NATS consumer can hold a part before its ack reaches the producer,
	// so from-visible figures alone flatter the broker.
	E2EP50Ms float64 `json:"e2e_p50_ms"`
	E2EP99Ms float64 `json:"e2e_p99_ms"`
	Load1    float64 `json:"load1"` // when the row's run started
}

// follower collects the samples of one run: when each step became
// visible and when each reader had read it.
type follower struct {
	mu      sync.Mutex
	visible map[int64]time.Time // GUARDED_BY(mu)
	started map[int64]time.Time // GUARDED_BY(mu)
	done    []followDone        // GUARDED_BY(mu)
}

type followDone struct {
	step int64
	at   time.Time
}

func (f *follower) sawVisible(step int64, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.visible[step] = t
}

func (f *follower) start(step int64, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.started[step] = t
}

func (f *follower) read(step int64, t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.done = append(f.done, followDone{step, t})
}

// samples are the latencies in ms. A reader can finish before the
// producer has learnt its commit (or ack) landed: that sample is 0.
func (f *follower) samples(from map[int64]time.Time) []float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []float64
	for _, d := range f.done {
		if v, ok := from[d.step]; ok {
			out = append(out, max(0, ms(d.at.Sub(v))))
		}
	}
	return out
}

// Follow measures consumer latency for every system and reader count
// and writes a row each.
func Follow(ctx context.Context, o ReadOptions, interval time.Duration, systems []string, out io.Writer) error {
	// The read systems decide whether defaults looks for lakefs-mount.
	o.Systems = []string{SystemDirect}
	if slices.Contains(systems, FollowMount) {
		o.Systems = []string{SystemMount}
	}
	if err := o.defaults(); err != nil {
		return err
	}
	pr := &followPrinter{out: out, json: o.JSON}
	for _, n := range o.Readers {
		for _, sys := range systems {
			load := Load1()
			f := &follower{visible: map[int64]time.Time{}, started: map[int64]time.Time{}}
			var err error
			switch sys {
			case FollowMount:
				err = followMount(ctx, &o, n, interval, f)
			case FollowNATS:
				err = followNATS(ctx, &o, n, interval, f)
			default:
				err = fmt.Errorf("unknown system %q; use %s or %s", sys, FollowMount, FollowNATS)
			}
			if err != nil {
				return fmt.Errorf("bench read --follow, %s, %d readers: %w", sys, n, err)
			}
			xs, e2e := f.samples(f.visible), f.samples(f.started)
			pr.print(FollowRow{Kind: "follow", System: sys, Readers: n, Samples: len(xs), SizeBytes: o.Size,
				IntervalMs: ms(interval), P50Ms: round(percentile(xs, 50), 2), P99Ms: round(percentile(xs, 99), 2),
				MaxMs: round(percentile(xs, 100), 2), E2EP50Ms: round(percentile(e2e, 50), 2), E2EP99Ms: round(percentile(e2e, 99), 2), Load1: load})
		}
	}
	return nil
}

// followMount runs the mount system: a fresh stream, a lakefs-mount with
// --wait, a producer committing o.Steps steps and n readers.
func followMount(ctx context.Context, o *ReadOptions, n int, interval time.Duration, f *follower) error {
	s, url, done, err := OpenRun(ctx, o.StoreURL, "bench-follow-"+randomHex(6), o.Keep, o.Logger)
	if err != nil {
		return err
	}
	defer done()
	l, err := txn.Create(ctx, s, txn.CreateOptions{Ranks: o.Ranks})
	if err != nil {
		return fmt.Errorf("creating the stream: %w", err)
	}
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "bench-follow", Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("opening the producer: %w", err)
	}
	defer p.Close(context.WithoutCancel(ctx))
	data := randomParts(o.Ranks, o.Size)
	commit := func(ctx context.Context) (int64, error) {
		b := txn.Batch{Ranks: make([][]txn.FileSource, o.Ranks)}
		for r := range b.Ranks {
			b.Ranks[r] = []txn.FileSource{txn.BytesFile("data.bin", data[r])}
		}
		pd, err := p.Append(ctx, b)
		if err != nil {
			return 0, fmt.Errorf("append: %w", err)
		}
		return pd.Wait(ctx)
	}
	// A first step before the mount starts: the readers wait for the
	// ones after it, whose numbers are then known.
	first, err := commit(ctx)
	if err != nil {
		return err
	}
	m, err := startMount(ctx, o, url, []string{"--wait", "30s"})
	if err != nil {
		return fmt.Errorf("starting lakefs-mount: %w", err)
	}
	defer m.stop(o.Logger)
	g, gctx := errgroup.WithContext(ctx)
	for r := range n {
		g.Go(func() error { return followMountReader(gctx, m.Mountpoint(), r, first+1, o.Steps, f) })
	}
	g.Go(func() error {
		next := first + 1
		return tick(gctx, interval, o.Steps, func() error {
			// One producer, one TGB at a time: the step is the next one.
			f.start(next, time.Now())
			next++
			step, err := commit(gctx)
			if err == nil {
				f.sawVisible(step, time.Now())
			}
			return err
		})
	})
	return g.Wait()
}

// followMountReader reads rank's file of steps first.. through the mount
// at dir, each open waiting (--wait) until the step is visible.
func followMountReader(ctx context.Context, dir string, rank int, first int64, steps int, f *follower) error {
	buf := make([]byte, readBuf)
	for i := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		step := first + int64(i)
		path := filepath.Join(dir, "steps", strconv.FormatInt(step, 10), fmt.Sprintf("rank-%d", rank), "data.bin")
		fh, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("reader of rank %d: %w", rank, err)
		}
		_, err = io.CopyBuffer(io.Discard, fh, buf)
		fh.Close()
		if err != nil {
			return fmt.Errorf("reader of rank %d: %w", rank, err)
		}
		f.read(step, time.Now())
	}
	return nil
}

// tick calls fn n times, one every interval.
func tick(ctx context.Context, interval time.Duration, n int, fn func() error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for range n {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		if err := fn(); err != nil {
			return err
		}
	}
	return nil
}

// randomParts is one part of size bytes per rank.
func randomParts(ranks int, size int64) [][]byte {
	parts := make([][]byte, ranks)
	for r := range parts {
		parts[r] = make([]byte, size)
		_, _ = rand.Read(parts[r]) // never fails (crypto/rand documents it)
	}
	return parts
}

// followNATS runs the nats system: an embedded JetStream server, a
// producer publishing each step's parts (one message per rank) and n
// pull consumers, one per rank.
func followNATS(ctx context.Context, o *ReadOptions, n int, interval time.Duration, f *follower) error {
	dir, err := os.MkdirTemp("", "lakestream-nats-")
	if err != nil {
		return fmt.Errorf("nats store dir: %w", err)
	}
	defer os.RemoveAll(dir)
	ns, err := startNATS(ctx, dir, false)
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		return fmt.Errorf("nats connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	g, gctx := errgroup.WithContext(ctx)
	for r := range n {
		cons, err := js.CreateConsumer(ctx, "TGB", jetstream.ConsumerConfig{
			Durable: fmt.Sprintf("rank-%d", r), FilterSubject: fmt.Sprintf("tgb.follow.*.%d", r), AckPolicy: jetstream.AckExplicitPolicy,
		})
		if err != nil {
			return fmt.Errorf("nats consumer: %w", err)
		}
		g.Go(func() error { return followNATSReader(gctx, cons, o.Steps, f) })
	}
	data := randomParts(o.Ranks, o.Size)
	g.Go(func() error {
		step := int64(0)
		return tick(gctx, interval, o.Steps, func() error {
			step++
			f.start(step, time.Now())
			if err := natsPublishTGB(gctx, js, fmt.Sprintf("tgb.follow.%d", step), data); err != nil {
				return err
			}
			f.sawVisible(step, time.Now())
			return nil
		})
	})
	return g.Wait()
}

// followNATSReader fetches steps messages from cons, one at a time as a
// trainer at the head would, acking each.
func followNATSReader(ctx context.Context, cons jetstream.Consumer, steps int, f *follower) error {
	for got := 0; got < steps; {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			return fmt.Errorf("nats fetch: %w", err)
		}
		for msg := range batch.Messages() {
			at := time.Now()
			// Subjects are tgb.follow.<step>.<rank>.
			parts := strings.Split(msg.Subject(), ".")
			step, err := strconv.ParseInt(parts[len(parts)-2], 10, 64)
			if err != nil {
				return fmt.Errorf("nats subject %q: %w", msg.Subject(), err)
			}
			if err := msg.Ack(); err != nil {
				return fmt.Errorf("nats ack: %w", err)
			}
			f.read(step, at)
			got++
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			return fmt.Errorf("nats fetch: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// followPrinter prints follow rows as JSON lines or as text.
type followPrinter struct {
	out  io.Writer
	json bool
}

func (p *followPrinter) print(r FollowRow) {
	if p.json {
		b, _ := json.Marshal(r) // plain fields always encode
		fmt.Fprintf(p.out, "%s\n", b)
		return
	}
	fmt.Fprintf(p.out, "%-6s readers %d: p50 %.1f ms, p99 %.1f ms, max %.1f ms; from the upload's start p50 %.1f ms, p99 %.1f ms; %d samples (%s per rank, a step every %.0f ms)\n",
		r.System, r.Readers, r.P50Ms, r.P99Ms, r.MaxMs, r.E2EP50Ms, r.E2EP99Ms, r.Samples, sizeString(r.SizeBytes), r.IntervalMs)
}
