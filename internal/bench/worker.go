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
	"strconv"
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
	DAC          txn.DACConfig `json:"dac"`
	Payload      int64         `json:"payload"`
	Ranks        int           `json:"ranks"`
	MaxQueued    int           `json:"max_queued"`
	Drain        time.Duration `json:"drain"`
}

// event is what a worker reports. Worker processes write one JSON object
// per line.
type event struct {
	Kind     string `json:"kind"` // ready, upload, put, commit, done
	Producer string `json:"producer,omitempty"`
	// upload: a TGB's data became durable (Append returned); put: a raw-put
	// TGB's objects were all written. Time is when; Dur how long it took.
	Time   time.Time        `json:"time,omitzero"`
	Dur    time.Duration    `json:"dur,omitempty"`
	Commit *txn.CommitStats `json:"commit,omitempty"`
	// Started is, per TGB of a commit, when its upload started (for the
	// upload start -> visible latency), in the order of Commit.Uploaded.
	Started []time.Time `json:"started,omitempty"`
	Err     string      `json:"err,omitempty"` // done
}

// newStrategy builds the strategy a spec names: dac, naive, fixed, or a dac
// variant "dac:key=value,..." over base.
func newStrategy(name string, base txn.DACConfig) (txn.Strategy, error) {
	kind, settings, _ := strings.Cut(name, ":")
	if (kind == RawPut || kind == PlainPut) && settings == "" {
		return nil, nil
	}
	if kind != "dac" {
		if settings != "" {
			return nil, fmt.Errorf("bench: strategy %q takes no settings; only dac does (dac:increase=40:max=200ms)", name)
		}
		s, err := txn.NewStrategy(kind)
		if err != nil {
			return nil, fmt.Errorf("bench: %w, raw-put or plain-put", err)
		}
		return s, nil
	}
	cfg := base
	for kv := range strings.SplitSeq(settings, ":") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		bad := func(err error) error {
			return fmt.Errorf("bench: strategy %q: setting %q: %v; use min, max, initial (durations), factor, jitter, increase (numbers) or group (a count)", name, kv, err)
		}
		var err error
		switch k {
		case "min", "max", "initial":
			var d time.Duration
			d, err = time.ParseDuration(v)
			switch k {
			case "min":
				cfg.Min = d
			case "max":
				cfg.Max = d
			default:
				cfg.Initial = d
			}
		case "factor":
			cfg.Factor, err = strconv.ParseFloat(v, 64)
		case "jitter":
			cfg.Jitter, err = strconv.ParseFloat(v, 64)
		case "increase":
			cfg.Increase, err = strconv.ParseFloat(v, 64)
		case "group":
			cfg.MaxGroup, err = strconv.Atoi(v)
		default:
			err = errors.New("unknown key")
		}
		if err != nil {
			return nil, bad(err)
		}
	}
	return txn.NewDAC(cfg), nil
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
	strategy, err := newStrategy(sp.Strategy, sp.DAC)
	if err != nil {
		return err
	}
	var committed atomic.Uint64 // TGBs committed; seqs start at 1 on a fresh stream
	// A producer commits its TGBs in seq order, so the TGBs of a commit are
	// the next cs.TGBs seqs after those already committed.
	var starts sync.Map // seq -> time.Time its upload started
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{
		ID: sp.ID, Strategy: strategy, Logger: logger,
		Observe: func(cs txn.CommitStats) {
			first := committed.Add(uint64(cs.TGBs)) - uint64(cs.TGBs) + 1
			started := make([]time.Time, 0, cs.TGBs)
			for seq := first; seq < first+uint64(cs.TGBs); seq++ {
				if t, ok := starts.LoadAndDelete(seq); ok {
					started = append(started, t.(time.Time))
				}
			}
			if len(started) != cs.TGBs {
				started = nil // not this run's numbering; report no e2e rather than a wrong one
			}
			emit(event{Kind: "commit", Producer: sp.ID, Commit: &cs, Started: started})
		},
	})
	if err != nil {
		return err
	}
	ready()
	runErr := appendLoop(ctx, p, sp, files, &committed, &starts, start, stop, emit)
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

func appendLoop(ctx context.Context, p *txn.Producer, sp spec, files [][]txn.FileSource, committed *atomic.Uint64, starts *sync.Map, start, stop <-chan struct{}, emit func(event)) error {
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
		// Appends are sequential from seq 1 on a fresh stream, so this TGB's
		// seq is i; stored before Append, whose commit may be observed
		// before it returns.
		starts.Store(uint64(i), t0)
		i++
		pd, err := p.Append(sctx, txn.Batch{Name: name, Cursor: name, Ranks: files})
		if err != nil {
			if sctx.Err() != nil {
				break // the run ended during the upload
			}
			return err
		}
		now := time.Now()
		emit(event{Kind: "upload", Time: now, Dur: now.Sub(t0)})
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
	s := withLatency(raw, sp.StoreLatency)
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
					close(start)
				}
			case "stop":
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
