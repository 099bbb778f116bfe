package scale

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/lakestream/lakestream/internal/procstat"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// What a long stream costs whoever starts on it: a restarted producer,
// status, verify of the live steps, a node showing 8 ranks, and gc of a
// log nobody has swept. Each should follow the live steps and the versions
// since the newest snapshot, never the length of the log.

// requests is every store call f has seen.
func requests(f *store.Faulty) int64 {
	var n int64
	for op := store.OpGet; op <= store.OpDelete; op++ {
		n += f.Calls(op)
	}
	return n
}

// measureStarts fills the row's restart, status, verify and 8-rank mount
// figures. The producer's commit adds a step (and a version) to the stream.
func measureStarts(ctx context.Context, o Options, l *txn.Log, url string, row *Row) error {
	counted := store.NewFaulty(l.Store, 1)
	cl := &txn.Log{Store: counted, Config: l.Config}

	start := time.Now()
	st, err := txn.StreamStatus(ctx, cl)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	row.StatusMs, row.StatusRequests = ms(time.Since(start)), requests(counted)
	_ = st

	before := requests(counted)
	start = time.Now()
	vr, err := txn.Verify(ctx, cl, txn.VerifyOptions{Parallel: 8})
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if len(vr.Problems) > 0 {
		return fmt.Errorf("verify found %d problems, first %s", len(vr.Problems), vr.Problems[0])
	}
	row.VerifyMs, row.VerifyRequests = ms(time.Since(start)), requests(counted)-before

	before = requests(counted)
	start = time.Now()
	p, err := txn.OpenProducer(ctx, cl, txn.ProducerOptions{ID: "scale", Logger: o.Logger})
	if err != nil {
		return fmt.Errorf("restarting the producer: %w", err)
	}
	row.ProducerOpenMs, row.ProducerOpenRequests = ms(time.Since(start)), requests(counted)-before
	pd, err := p.Append(ctx, scaleBatch("c00000000", l.Config.Ranks, o.Files, o.FileSize))
	if err == nil {
		_, err = pd.Wait(ctx)
	}
	row.ProducerCommitMs = ms(time.Since(start))
	if cerr := p.Close(ctx); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("the restarted producer's first commit: %w", err)
	}
	return measureNode(ctx, o, url, row)
}

// nodeRanks is how many ranks the node of measureNode shows: a node with
// 8 GPUs.
const nodeRanks = 8

// measureNode starts a lakefs-mount showing ranks 0-7 (--ranks), times it
// to the head, lists and stats every file of its ranks in every live step
// (metadata only: no data read) and takes its peak RSS.
func measureNode(ctx context.Context, o Options, url string, row *Row) error {
	k := min(nodeRanks, row.Ranks)
	start := time.Now()
	m, err := startMount(ctx, o, url, "scale-node", "--ranks", fmt.Sprintf("0-%d", k-1))
	if err != nil {
		return err
	}
	defer m.stop()
	row.NodeHeadMs = ms(time.Since(start))
	steps, err := os.ReadDir(filepath.Join(m.Mountpoint(), "steps"))
	if err != nil {
		return err
	}
	files := 0
	for _, s := range steps {
		for r := range k {
			ents, err := os.ReadDir(filepath.Join(m.Mountpoint(), "steps", s.Name(), "rank-"+strconv.Itoa(r)))
			if err != nil {
				return err
			}
			for _, e := range ents {
				if _, err := e.Info(); err != nil {
					return err
				}
				files++
			}
		}
	}
	if want := len(steps) * k * o.Files; files < want {
		return fmt.Errorf("the %d-rank node listed %d files, want at least %d", k, files, want)
	}
	row.NodeRanks, row.NodeRSSMiB = k, procstat.PeakRSS(m.Pid())
	return nil
}

// GCResult is what the gc child reports.
type GCResult struct {
	Ms          float64 `json:"ms"`
	LogDeleted  int     `json:"log_deleted"`
	DataDeleted int     `json:"data_deleted"`
	Requests    int64   `json:"requests"`
	Lists       int64   `json:"lists"`     // LIST pages
	LogWalks    int64   `json:"log_walks"` // listings of the log from its start
	Deletes     int64   `json:"deletes"`   // delete calls (each up to 1,000 keys on S3)
	// PeakRSSMiB is the child's own high-water mark, read before it exits
	// (a wait4 rusage of a child started with vfork reports the parent's).
	PeakRSSMiB float64 `json:"peak_rss_mib"`
}

// GCChild is the process measureGC runs (so that its peak RSS is gc's
// alone): one gc of the stream at url as if run offset later (a log built
// in minutes is then as old as one a job wrote over days, every version
// past the log retention), counting its store requests, and one JSON line
// on w.
func GCChild(ctx context.Context, url string, offset time.Duration, w io.Writer) error {
	s, err := store.Open(ctx, url)
	if err != nil {
		return err
	}
	f := store.NewFaulty(s, 1)
	wc := &walkCounter{Store: f}
	l, err := txn.Open(ctx, wc)
	if err != nil {
		return err
	}
	start := time.Now()
	rep, err := txn.GC(ctx, l, txn.GCOptions{Grace: txn.DefaultGrace, Now: func() time.Time { return time.Now().Add(offset) },
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	return json.NewEncoder(w).Encode(GCResult{Ms: ms(time.Since(start)), LogDeleted: rep.LogDeletedCount, DataDeleted: len(rep.DataDeleted),
		Requests: requests(f), Lists: f.Calls(store.OpList), LogWalks: wc.walks.Load(), Deletes: f.Calls(store.OpDelete),
		PeakRSSMiB: procstat.PeakRSS(os.Getpid())})
}

// walkCounter counts listings of the log that start at its beginning.
type walkCounter struct {
	store.Store
	walks atomic.Int64
}

func (w *walkCounter) List(ctx context.Context, prefix, after string, limit int) ([]store.Info, bool, error) {
	if prefix == txn.LogPrefix && after == "" {
		w.walks.Add(1)
	}
	return w.Store.List(ctx, prefix, after, limit)
}

// Walk counts a listing from the start and keeps the wrapped store's way
// of walking (one pass on file://).
func (w *walkCounter) Walk(ctx context.Context, prefix, after string, fn func(store.Info) error) error {
	if _, ok := w.Store.(store.Walker); !ok {
		return store.Walk(ctx, struct{ store.Store }{w}, prefix, after, fn) // page by page through w.List
	}
	if prefix == txn.LogPrefix && after == "" {
		w.walks.Add(1)
	}
	return store.Walk(ctx, w.Store, prefix, after, fn)
}

// GCChildArgs are this executable's arguments that run GCChild.
var GCChildArgs = []string{"scale-gc"}

// measureGC runs one gc in a child process and reports it as a "gc" row.
func measureGC(ctx context.Context, o Options, url string) (Row, error) {
	self, err := os.Executable()
	if err != nil {
		return Row{}, err
	}
	var out, errb bytes.Buffer
	args := append(append([]string{}, GCChildArgs...), "--store", url, "--clock-offset", "2h")
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return Row{}, fmt.Errorf("%w: %s", err, bytes.TrimSpace(errb.Bytes()))
	}
	var res GCResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return Row{}, fmt.Errorf("gc child said %q: %w", out.String(), err)
	}
	return Row{Kind: "gc", GC: &res}, nil
}
