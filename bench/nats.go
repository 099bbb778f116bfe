package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/lakestream/lakestream/txn"
)

// The broker peers: the same ingest job done by NATS JetStream (an embedded
// nats-server over loopback TCP, file storage), one message per rank part,
// each producer waiting for every ack of a TGB before the next. NATS acks
// from the page cache by default; NATSFsync syncs the store file before
// every ack (sync_interval: always), which is the durability a commit to an
// object store gives.
const (
	NATS      = "nats"
	NATSFsync = "nats-fsync"
)

func isNATS(strategy string) bool { return strategy == NATS || strategy == NATSFsync }

// runNATS runs one combination against a fresh embedded JetStream server
// and prints its row. A TGB counts when all its parts are acked; its
// latency (p50/p99) is from the first publish to the last ack, so it
// includes the upload that Lakestream's p50/p99 leave out.
func runNATS(ctx context.Context, o *IngestOptions, c combo, pr *printer) error {
	if o.Processes {
		return errors.New("bench: the nats strategies run producers as goroutines only; drop --processes")
	}
	dir, err := os.MkdirTemp("", "lakestream-nats-")
	if err != nil {
		return fmt.Errorf("nats store dir: %w", err)
	}
	defer os.RemoveAll(dir)
	ns, err := startNATS(ctx, dir, c.strategy == NATSFsync)
	if err != nil {
		return err
	}
	defer ns.Shutdown()

	parts := make([][]byte, o.Ranks)
	for r := range parts {
		parts[r] = make([]byte, int(c.payload)/o.Ranks)
		_, _ = rand.Read(parts[r]) // never fails (crypto/rand documents it)
	}
	rec := newRecorder(0)
	start, stop := make(chan struct{}), make(chan struct{})
	errs := make(chan error, c.producers)
	var wg sync.WaitGroup
	for i := range c.producers {
		nc, err := nats.Connect(ns.ClientURL())
		if err != nil {
			close(stop)
			wg.Wait()
			return fmt.Errorf("nats connect: %w", err)
		}
		defer nc.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := natsProduce(ctx, nc, fmt.Sprintf("p%03d", i), parts, start, stop, rec.add); err != nil {
				errs <- err
			}
		}()
	}
	t0 := time.Now()
	rec.begin(t0, true, o.Warmup+time.Duration(o.Windows)*o.Duration)
	close(start)
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()
	return measureWindows(ctx, o, rec, t0, errs, halt, func(w window) {
		r := w.row(c, o)
		// Each producer always has one TGB being published: it publishes
		// the next as soon as the last is acked.
		r.InFlight = int64(c.producers)
		pr.print(r)
	})
}

// startNATS starts an embedded JetStream server storing under dir
// (fsync: sync before every ack) with the stream TGB the producers
// publish to. The caller shuts it down.
func startNATS(ctx context.Context, dir string, fsync bool) (*server.Server, error) {
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: dir,
		// A 16 MiB TGB of 4 ranks makes 4 MiB messages; the default is 1 MiB.
		MaxPayload: 64 << 20, MaxPending: 256 << 20,
		SyncAlways: fsync,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("nats server: not ready after 10s")
	}
	admin, err := nats.Connect(ns.ClientURL())
	if err != nil {
		ns.Shutdown()
		return nil, fmt.Errorf("nats connect: %w", err)
	}
	defer admin.Close()
	js, err := jetstream.New(admin)
	if err != nil {
		ns.Shutdown()
		return nil, err
	}
	// Old messages are discarded past 2 GiB so a long run cannot fill the
	// disk; a Lakestream run's prefix is deleted afterwards the same way.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "TGB", Subjects: []string{"tgb.>"}, Storage: jetstream.FileStorage,
		MaxBytes: 2 << 30, Discard: jetstream.DiscardOld,
	}); err != nil {
		ns.Shutdown()
		return nil, fmt.Errorf("nats stream: %w", err)
	}
	return ns, nil
}

// natsProduce publishes TGBs, one message per rank part, until stop.
func natsProduce(ctx context.Context, nc *nats.Conn, id string, parts [][]byte, start, stop <-chan struct{}, emit func(event)) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if ok, err := released(ctx, start, stop); !ok {
		return err
	}
	sctx, cancel := stopContext(ctx, stop)
	defer cancel()
	for seq := 1; ; seq++ {
		t0 := time.Now()
		if err := natsPublishTGB(sctx, js, fmt.Sprintf("tgb.%s.%d", id, seq), parts); err != nil {
			if sctx.Err() != nil {
				return nil
			}
			return err
		}
		now := time.Now()
		emit(event{Kind: "upload", Producer: id, Seq: uint64(seq), Time: t0, Dur: now.Sub(t0)})
		emit(event{Kind: "commit", Producer: id, Commit: natsCommit(id, uint64(seq), now)})
	}
}

// natsPublishTGB publishes one message per part and waits for every ack.
// A part the server refuses with 429 (too many requests: JetStream's
// bound on pending writes) is published again after a pause, as a client
// under back-pressure would.
func natsPublishTGB(ctx context.Context, js jetstream.JetStream, subject string, parts [][]byte) error {
	futures := make([]jetstream.PubAckFuture, len(parts))
	publish := func(r int) error {
		f, err := js.PublishAsync(fmt.Sprintf("%s.%d", subject, r), parts[r])
		if err != nil {
			return fmt.Errorf("nats publish: %w", err)
		}
		futures[r] = f
		return nil
	}
	for r := range parts {
		if err := publish(r); err != nil {
			return err
		}
	}
	for r := 0; r < len(parts); {
		select {
		case <-futures[r].Ok():
			r++
		case err := <-futures[r].Err():
			var api *jetstream.APIError
			if !errors.As(err, &api) || api.Code != 429 {
				return fmt.Errorf("nats ack: %w", err)
			}
			select {
			case <-time.After(10 * time.Millisecond):
			case <-ctx.Done():
				return ctx.Err()
			}
			if err := publish(r); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// natsCommit is an acked TGB as the recorder counts a commit: one TGB
// made visible by one attempt, latency from its first publish (its upload
// event).
func natsCommit(id string, seq uint64, acked time.Time) *txn.CommitStats {
	return &txn.CommitStats{Created: true, Attempts: 1, VersionTGBs: 1, Included: []txn.TGBRef{{Producer: id, Seq: seq}}, Visible: acked, Committed: acked}
}
