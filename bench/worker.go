package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// spec is what one worker (a producer or a raw-put writer) runs. Worker
// processes receive it as JSON.
type spec struct {
	StoreURL     string        `json:"store_url,omitempty"` // worker processes only
	StoreLatency time.Duration `json:"store_latency"`
	ID           string        `json:"id"`
	Strategy     string        `json:"strategy"`
	Payload      int64         `json:"payload"`
	Ranks        int           `json:"ranks"`
	MaxQueued    int           `json:"max_queued"`
	Drain        time.Duration `json:"drain"`
}

// event is what a worker reports. Worker processes write one JSON object
// per line.
type event struct {
	Kind     string `json:"kind"` // ready, upload, put, commit, counts, done
	Producer string `json:"producer,omitempty"`
	Seq      uint64 `json:"seq,omitempty"` // upload: the TGB's seq
	// upload: a TGB's data became durable (Append returned); put: a raw-put
	// TGB's objects were all written. Time is when; Dur how long it took.
	Time   time.Time        `json:"time,omitzero"`
	Dur    time.Duration    `json:"dur,omitempty"`
	Commit *txn.CommitStats `json:"commit,omitempty"`
	// Started is, per TGB of a commit, when its upload started (for the
	// upload start -> visible latency), in the order of Commit.Uploaded.
	Started []time.Time `json:"started,omitempty"`
	// counts: the worker's store requests so far, at "go" and at "stop".
	Phase    string   `json:"phase,omitempty"`
	Requests requests `json:"requests,omitzero"`
	Err      string   `json:"err,omitempty"` // done
}

// checkStrategy accepts the strategies a producer worker runs.
func checkStrategy(name string) error {
	switch name {
	case "dac", "naive", RawPut, PlainPut:
		return nil
	}
	return fmt.Errorf("bench: unknown strategy %q; use dac, naive, raw-put, plain-put, nats or nats-fsync", name)
}

// requests counts store requests by kind, as S3 bills them: PUT (puts and
// creates), GET (whole, ranged and tail reads), HEAD, LIST, DELETE.
type requests struct {
	Puts    int64 `json:"puts"`
	Gets    int64 `json:"gets"`
	Heads   int64 `json:"heads"`
	Lists   int64 `json:"lists"`
	Deletes int64 `json:"deletes"`
}

func countRequests(f *store.Faulty) requests {
	return requests{
		Puts:    f.Calls(store.OpPut) + f.Calls(store.OpCreate),
		Gets:    f.Calls(store.OpGet) + f.Calls(store.OpGetRange),
		Heads:   f.Calls(store.OpStat),
		Lists:   f.Calls(store.OpList),
		Deletes: f.Calls(store.OpDelete),
	}
}

func (a requests) minus(b requests) requests {
	return requests{a.Puts - b.Puts, a.Gets - b.Gets, a.Heads - b.Heads, a.Lists - b.Lists, a.Deletes - b.Deletes}
}

func (a requests) plus(b requests) requests {
	return requests{a.Puts + b.Puts, a.Gets + b.Gets, a.Heads + b.Heads, a.Lists + b.Lists, a.Deletes + b.Deletes}
}

// payloadParts splits one buffer of size bytes into ranks parts.
func payloadParts(size int64, ranks int) [][]byte {
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i*131 + i>>11) // not all zeros, not a short period
	}
	out := make([][]byte, ranks)
	for r := range ranks {
		lo, hi := size*int64(r)/int64(ranks), size*int64(r+1)/int64(ranks)
		out[r] = data[lo:hi]
	}
	return out
}

// payloadFiles is payloadParts as one file per rank.
func payloadFiles(parts [][]byte) [][]txn.FileSource {
	out := make([][]txn.FileSource, len(parts))
	for r, p := range parts {
		out[r] = []txn.FileSource{txn.BytesFile("data.bin", p)}
	}
	return out
}

// released waits for the run to start: false if it stopped first, with
// ctx's error if ctx ended.
func released(ctx context.Context, start, stop <-chan struct{}) (bool, error) {
	select {
	case <-start:
		return true, nil
	case <-stop:
		return false, nil
	case <-ctx.Done():
		return false, ctx.Err()
	}
}

// stopContext returns a context cancelled when stop is closed (or parent
// ends), so an upload in flight at the end of a run is abandoned.
func stopContext(parent context.Context, stop <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// produce is one worker: it registers (calls ready), waits for start,
// writes TGBs until stop, then lets its producer commit what is queued
// for at most sp.Drain. Every upload and commit is reported to emit.
func produce(ctx context.Context, s store.Store, l *txn.Log, sp spec, logger *slog.Logger, start, stop <-chan struct{}, ready func(), emit func(event)) error {
	parts := payloadParts(sp.Payload, sp.Ranks)
	switch sp.Strategy {
	case RawPut:
		ready()
		return rawPutWith(ctx, func(ctx context.Context, key string, data []byte) error {
			return s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
		}, sp, parts, start, stop, emit)
	case PlainPut:
		put, err := newPlainPut(ctx, s, sp.StoreURL, sp.StoreLatency)
		if err != nil {
			return err
		}
		ready()
		return rawPutWith(ctx, put, sp, parts, start, stop, emit)
	}
	files := payloadFiles(parts)
	var committed atomic.Uint64 // own TGBs known committed; seqs start at 1 on a fresh stream
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{
		ID: sp.ID, Solo: sp.Strategy == "naive", Logger: logger,
		Observe: func(cs txn.CommitStats) {
			committed.Add(uint64(cs.TGBs))
			if cs.Created {
				// The creator reports every TGB it made visible, whoever's;
				// the recorder pairs each with its upload.
				cs.Uploaded = nil
				emit(event{Kind: "commit", Producer: sp.ID, Commit: &cs})
			}
		},
	})
	if err != nil {
		return err
	}
	ready()
	runErr := appendLoop(ctx, p, sp, files, &committed, start, stop, emit)
	dctx, cancel := context.WithTimeout(ctx, sp.Drain)
	defer cancel()
	cerr := p.Close(dctx)
	if runErr != nil {
		return runErr
	}
	if cerr != nil && dctx.Err() == nil {
		return cerr
	}
	return nil
}

func appendLoop(ctx context.Context, p *txn.Producer, sp spec, files [][]txn.FileSource, committed *atomic.Uint64, start, stop <-chan struct{}, emit func(event)) error {
	if ok, err := released(ctx, start, stop); !ok {
		return err
	}
	sctx, cancel := stopContext(ctx, stop)
	defer cancel()
	var queued []*txn.Pending
	for i := 1; sctx.Err() == nil; {
		for len(queued) > 0 && queued[0].Seq <= committed.Load() {
			queued = queued[1:]
		}
		if len(queued) >= sp.MaxQueued {
			if _, err := queued[0].Wait(sctx); err != nil && sctx.Err() == nil {
				return err
			}
			continue
		}
		name := fmt.Sprintf("b%012d", i)
		t0 := time.Now()
		i++
		pd, err := p.Append(sctx, txn.Batch{Name: name, Cursor: name, Ranks: files})
		if err != nil {
			if sctx.Err() != nil {
				break // the run ended during the upload
			}
			return err
		}
		now := time.Now()
		emit(event{Kind: "upload", Producer: sp.ID, Seq: pd.Seq, Time: now, Dur: now.Sub(t0)})
		queued = append(queued, pd)
	}
	return ctx.Err()
}

// putFunc writes one object of a baseline.
type putFunc func(ctx context.Context, key string, data []byte) error

// rawPutWith writes the TGBs' bytes with put, ranks in parallel as a
// producer uploads them, and nothing else: the raw-put and plain-put
// baselines.
func rawPutWith(ctx context.Context, put putFunc, sp spec, parts [][]byte, start, stop <-chan struct{}, emit func(event)) error {
	if ok, err := released(ctx, start, stop); !ok {
		return err
	}
	sctx, cancel := stopContext(ctx, stop)
	defer cancel()
	for seq := 1; sctx.Err() == nil; seq++ {
		t0 := time.Now()
		g, gctx := errgroup.WithContext(sctx)
		g.SetLimit(8) // a producer's default upload parallelism
		for r, data := range parts {
			g.Go(func() error {
				return put(gctx, fmt.Sprintf("data/%s/%d/rank-%d.bin", sp.ID, seq, r), data)
			})
		}
		if err := g.Wait(); err != nil {
			if sctx.Err() != nil {
				break
			}
			return err
		}
		now := time.Now()
		emit(event{Kind: "put", Time: now, Dur: now.Sub(t0)})
	}
	return ctx.Err()
}

// spawn starts one worker process and relays its events.
func (f *fleet) spawn(ctx context.Context, o *IngestOptions, sp spec, rec *recorder) {
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		if err := runProcess(ctx, o, sp, f.start, f.stop, func() { f.ready <- struct{}{} }, rec.add); err != nil {
			f.errs <- fmt.Errorf("%s: %w", sp.ID, err)
		}
	}()
}

func runProcess(ctx context.Context, o *IngestOptions, sp spec, start, stop <-chan struct{}, ready func(), emit func(event)) error {
	argv := o.WorkerCommand
	if len(argv) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding this executable to start a worker: %w", err)
		}
		argv = append([]string{exe}, DefaultWorkerArgs...)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting worker %q: %w", argv[0], err)
	}
	// The first line is the spec; then "go" and "stop" as the run goes.
	line, _ := json.Marshal(sp)
	werr := make(chan error, 1)
	go func() {
		defer stdin.Close()
		if _, err := fmt.Fprintf(stdin, "%s\n", line); err != nil {
			werr <- err
			return
		}
		for _, sig := range []struct {
			ch   <-chan struct{}
			word string
		}{{start, "go"}, {stop, "stop"}} {
			select {
			case <-sig.ch:
			case <-ctx.Done():
				werr <- ctx.Err()
				return
			}
			if _, err := fmt.Fprintln(stdin, sig.word); err != nil {
				werr <- err
				return
			}
		}
		werr <- nil
	}()
	var workerErr string
	dec := json.NewDecoder(stdout)
	for {
		var ev event
		if err := dec.Decode(&ev); err != nil {
			if !errors.Is(err, io.EOF) {
				workerErr = fmt.Sprintf("reading the worker's output: %v", err)
			}
			break
		}
		switch ev.Kind {
		case "ready":
			ready()
		case "done":
			workerErr = ev.Err
		default:
			emit(ev)
		}
	}
	_, _ = io.Copy(io.Discard, stdout)
	err = cmd.Wait()
	switch {
	case workerErr != "":
		return errors.New(workerErr)
	case err != nil:
		return fmt.Errorf("worker process: %w", err)
	}
	return <-werr
}

// Worker is the body of a worker process (Processes mode): the CLI runs it
// for the hidden command DefaultWorkerArgs names, with the process's stdin
// and stdout. It reads a spec line, opens the store and registers its
// producer, reports "ready", starts on a "go" line, stops on "stop" (or at
// the end of its input), and writes its events as JSON lines, the last one
// "done" with the error, if any.
func Worker(ctx context.Context, in io.Reader, out io.Writer) error {
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	emit := func(ev event) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev) // a parent that stopped reading is gone; nothing to tell it
	}
	err := worker(ctx, bufio.NewReader(in), emit)
	ev := event{Kind: "done"}
	if err != nil {
		ev.Err = err.Error()
	}
	emit(ev)
	return err
}

func worker(ctx context.Context, in *bufio.Reader, emit func(event)) error {
	line, err := in.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("reading the worker spec: %w", err)
	}
	var sp spec
	if err := json.Unmarshal(line, &sp); err != nil {
		return fmt.Errorf("worker spec: %w", err)
	}
	raw, err := store.Open(ctx, sp.StoreURL)
	if err != nil {
		return err
	}
	s := instrument(raw, sp.StoreLatency)
	var l *txn.Log
	if !baseline(sp.Strategy) {
		if l, err = txn.Open(ctx, s); err != nil {
			return err
		}
	}
	start, stop := make(chan struct{}), make(chan struct{})
	go func() {
		started := false
		defer func() {
			if !started {
				close(start)
			}
			close(stop)
		}()
		for {
			w, err := in.ReadString('\n')
			switch strings.TrimSpace(w) {
			case "go":
				if !started {
					started = true
					emit(event{Kind: "counts", Producer: sp.ID, Phase: "go", Requests: countRequests(s)})
					close(start)
				}
			case "stop":
				emit(event{Kind: "counts", Producer: sp.ID, Phase: "stop", Requests: countRequests(s)})
				return
			}
			if err != nil {
				return
			}
		}
	}()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return produce(ctx, s, l, sp, logger, start, stop, func() { emit(event{Kind: "ready"}) }, emit)
}
