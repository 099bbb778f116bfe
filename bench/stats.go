package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"text/tabwriter"
	"time"
)

// Row is one line of `bench ingest` output. The JSON names are read by
// scripts and by make bench: add fields, never rename (docs/ARCHITECTURE.md,
// compatibility rules).
type Row struct {
	Strategy     string `json:"strategy"`
	Producers    int    `json:"producers"`
	PayloadBytes int64  `json:"payload_bytes"`
	// TGBsPerS counts TGBs committed (raw-put: written) within the window;
	// MBPerS is their payload in MB (10^6 bytes) per second.
	TGBsPerS float64 `json:"tgbs_per_s"`
	MBPerS   float64 `json:"mb_per_s"`
	// AttemptsPerCommit: create attempts per version committed in the
	// window (0 for raw-put). A commit reports its attempts when it lands,
	// so a producer still losing races at the end has reported nothing:
	// read it together with CommittingProducers.
	AttemptsPerCommit float64 `json:"attempts_per_commit"`
	TGBsPerCommit     float64 `json:"tgbs_per_commit"` // TGBs per committed version (0 for raw-put)
	// P50Ms and P99Ms: per TGB, from its data being durable to its step
	// being visible (0 for raw-put, which commits nothing).
	P50Ms float64 `json:"p50_ms"`
	P99Ms float64 `json:"p99_ms"`
	// E2EP50Ms and E2EP99Ms: per TGB, from the start of its upload to its
	// step being visible (0 for the baselines).
	E2EP50Ms float64 `json:"e2e_p50_ms"`
	E2EP99Ms float64 `json:"e2e_p99_ms"`

	// UploadP50Ms: per TGB, how long writing its data took (Append; for
	// raw-put the Puts).
	UploadP50Ms    float64 `json:"upload_p50_ms"`
	Ranks          int     `json:"ranks"`
	StoreLatencyMs float64 `json:"store_latency_ms"`
	Seconds        float64 `json:"seconds"` // length of the window measured
	TGBs           int64   `json:"tgbs"`
	Commits        int64   `json:"commits"`
	// CommittingProducers counts the producers with at least one commit
	// in the window: below Producers, some were starved.
	CommittingProducers int `json:"committing_producers"`
	// Uploaded counts TGBs whose data became durable within the window,
	// committed or not: above TGBs when commits fall behind the uploads.
	Uploaded  int64 `json:"uploaded"`
	Processes bool  `json:"processes,omitempty"`
	// Long-run mode: the window's number (from 1) and the log's version at
	// its end.
	Window  int    `json:"window,omitempty"`
	Version uint64 `json:"version,omitempty"`

	// Store requests per TGB committed in the window, by kind as S3 bills
	// them (PUT counts creates; GET whole, ranged and tail reads), from
	// every worker's store.
	PutsPerTGB    float64 `json:"puts_per_tgb"`
	GetsPerTGB    float64 `json:"gets_per_tgb"`
	HeadsPerTGB   float64 `json:"heads_per_tgb"`
	ListsPerTGB   float64 `json:"lists_per_tgb"`
	DeletesPerTGB float64 `json:"deletes_per_tgb"`
	// VersionsPerS: versions created per second; TGBsPerVersion is
	// TGBsPerCommit under the name the combining commit gives it.
	VersionsPerS   float64 `json:"versions_per_s"`
	TGBsPerVersion float64 `json:"tgbs_per_version"`
	// FirstCommitMaxMs: over the producers, the longest time from a
	// producer's first upload of the run to the first of its TGBs being
	// visible (still waiting: until the window's end).
	FirstCommitMaxMs float64 `json:"first_commit_max_ms"`
	// InFlight counts TGBs uploaded but not yet visible at the window's
	// end (NATS: the TGBs being published): work the window paid for
	// and did not count, large when windows are short against commit
	// latency.
	InFlight int64 `json:"in_flight"`
	// Load1 is the machine's 1-minute load average when the point started.
	Load1 float64 `json:"load1"`
}

// window is what the workers reported between two cuts.
type window struct {
	n          int
	from, to   time.Time
	tgbs       int64
	commits    int64
	attempts   int64
	commitTGBs int64
	latency    []float64 // ms, per committed TGB
	e2e        []float64 // ms, per committed TGB, from its upload's start
	upload     []float64 // ms, per written TGB
	version    uint64
	committers map[string]bool
	requests   requests
	firstWait  time.Duration
	inFlight   int64
}

func (w window) row(c combo, o *IngestOptions) Row {
	secs := w.to.Sub(w.from).Seconds()
	r := Row{
		Strategy: c.strategy, Producers: c.producers, PayloadBytes: c.payload,
		Ranks: o.Ranks, StoreLatencyMs: ms(o.StoreLatency), Seconds: round(secs, 3),
		TGBs: w.tgbs, Commits: w.commits, Uploaded: int64(len(w.upload)), Processes: o.Processes,
		CommittingProducers: len(w.committers),
		P50Ms:               round(percentile(w.latency, 50), 2), P99Ms: round(percentile(w.latency, 99), 2),
		E2EP50Ms: round(percentile(w.e2e, 50), 2), E2EP99Ms: round(percentile(w.e2e, 99), 2),
		UploadP50Ms: round(percentile(w.upload, 50), 2),
	}
	if secs > 0 {
		r.TGBsPerS = round(float64(w.tgbs)/secs, 2)
		r.MBPerS = round(float64(w.tgbs)*float64(c.payload)/1e6/secs, 2)
	}
	if w.commits > 0 {
		r.AttemptsPerCommit = round(float64(w.attempts)/float64(w.commits), 3)
		r.TGBsPerCommit = round(float64(w.commitTGBs)/float64(w.commits), 3)
		r.TGBsPerVersion = r.TGBsPerCommit
		if secs > 0 {
			r.VersionsPerS = round(float64(w.commits)/secs, 2)
		}
	}
	if w.tgbs > 0 {
		per := func(n int64) float64 { return round(float64(n)/float64(w.tgbs), 3) }
		q := w.requests
		r.PutsPerTGB, r.GetsPerTGB, r.HeadsPerTGB, r.ListsPerTGB, r.DeletesPerTGB = per(q.Puts), per(q.Gets), per(q.Heads), per(q.Lists), per(q.Deletes)
	}
	r.FirstCommitMaxMs = round(ms(w.firstWait), 1)
	r.InFlight, r.Load1 = w.inFlight, c.load1
	if o.Versions > 0 || o.Windows > 1 {
		r.Window, r.Version = w.n, w.version
	}
	return r
}

// recorder accumulates the workers' events into the current window.
// Events dated outside it are dropped: registration before the start, and
// the drain after the end of a fixed-length run.
type recorder struct {
	target  uint64
	reached chan struct{} // closed when a commit reaches version target
	// counts reads the store requests of in-process workers (nil: worker
	// processes report theirs in counts events).
	counts func() requests

	mu     sync.Mutex
	cur    window    // GUARDED_BY(mu)
	end    time.Time // GUARDED_BY(mu): zero: open-ended
	closed bool      // GUARDED_BY(mu)
	// A TGB's upload and its becoming visible are reported by different
	// workers (the combining commit), in either order: durable and started
	// wait for visible, pending for the upload. GUARDED_BY(mu), for the run.
	durable, started, pending map[tgbKey]time.Time
	// Per producer, its first upload and its first TGB visible.
	firstUp, firstVis map[string]time.Time   // GUARDED_BY(mu)
	reqBase           requests               // GUARDED_BY(mu): counts at the window's start
	workerReq         map[string][2]requests // GUARDED_BY(mu): per worker process, at go and at stop
}

type tgbKey struct {
	producer string
	seq      uint64
}

func newRecorder(target uint64) *recorder {
	return &recorder{target: target, reached: make(chan struct{}),
		durable: map[tgbKey]time.Time{}, started: map[tgbKey]time.Time{}, pending: map[tgbKey]time.Time{},
		firstUp: map[string]time.Time{}, firstVis: map[string]time.Time{}, workerReq: map[string][2]requests{}}
}

// begin opens the first window at start; bounded closes it at start+d.
func (r *recorder) begin(start time.Time, bounded bool, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cur.n, r.cur.from = 1, start
	if r.counts != nil {
		r.reqBase = r.counts()
	}
	if bounded {
		r.end = start.Add(d)
	}
}

func (r *recorder) in(t time.Time) bool {
	return !r.cur.from.IsZero() && !t.Before(r.cur.from) && (r.end.IsZero() || t.Before(r.end))
}

func (r *recorder) add(ev event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch ev.Kind {
	case "upload":
		if r.in(ev.Time) {
			r.cur.upload = append(r.cur.upload, ms(ev.Dur))
		}
		if ev.Producer == "" {
			return
		}
		k := tgbKey{ev.Producer, ev.Seq}
		r.durable[k], r.started[k] = ev.Time, ev.Time.Add(-ev.Dur)
		if t, ok := r.firstUp[ev.Producer]; !ok || ev.Time.Before(t) {
			r.firstUp[ev.Producer] = ev.Time
		}
		if vis, ok := r.pending[k]; ok {
			delete(r.pending, k)
			r.visible(k, vis)
		}
	case "put":
		if r.in(ev.Time) {
			r.cur.tgbs++
			r.cur.upload = append(r.cur.upload, ms(ev.Dur))
		}
	case "counts":
		c := r.workerReq[ev.Producer]
		if ev.Phase == "go" {
			c[0] = ev.Requests
		} else {
			c[1] = ev.Requests
		}
		r.workerReq[ev.Producer] = c
	case "commit":
		cs := ev.Commit
		r.cur.version = max(r.cur.version, cs.Version)
		if r.target > 0 && cs.Version >= r.target && !r.closed {
			r.closed = true
			close(r.reached)
		}
		if !cs.Created || !r.in(cs.Visible) {
			return
		}
		r.cur.commits++
		r.cur.attempts += int64(cs.Attempts)
		r.cur.commitTGBs += int64(cs.VersionTGBs)
		r.cur.tgbs += int64(cs.VersionTGBs)
		for _, ref := range cs.Included {
			k := tgbKey{ref.Producer, ref.Seq}
			if t, ok := r.firstVis[ref.Producer]; !ok || cs.Visible.Before(t) {
				r.firstVis[ref.Producer] = cs.Visible
			}
			if _, ok := r.durable[k]; ok {
				r.visible(k, cs.Visible)
			} else {
				r.pending[k] = cs.Visible
			}
		}
	}
}

// waitStops waits up to d for n worker processes' counts at "stop" (they
// arrive through pipes after the run was told to stop).
func (r *recorder) waitStops(n int, d time.Duration) {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		r.mu.Lock()
		got := 0
		for _, c := range r.workerReq {
			if c[1] != (requests{}) {
				got++
			}
		}
		r.mu.Unlock()
		if got >= n {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// visible records a TGB of the window becoming visible at vis.
func (r *recorder) visible(k tgbKey, vis time.Time) {
	if r.cur.committers == nil {
		r.cur.committers = map[string]bool{}
	}
	r.cur.committers[k.producer] = true
	r.cur.latency = append(r.cur.latency, ms(vis.Sub(r.durable[k])))
	r.cur.e2e = append(r.cur.e2e, ms(vis.Sub(r.started[k])))
	delete(r.durable, k)
	delete(r.started, k)
}

// firstWait is the longest time a producer waited from its first upload
// to its first TGB visible, as of t.
func (r *recorder) firstWait(t time.Time) time.Duration {
	var worst time.Duration
	for p, up := range r.firstUp {
		vis, ok := r.firstVis[p]
		if !ok {
			vis = t
		}
		worst = max(worst, vis.Sub(up))
	}
	return worst
}

// cut ends the current window at t, returns it and opens the next.
func (r *recorder) cut(t time.Time) window {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.cur
	w.to = t
	w.firstWait = r.firstWait(t)
	w.inFlight = int64(len(r.durable))
	if r.counts != nil {
		now := r.counts()
		w.requests, r.reqBase = now.minus(r.reqBase), now
	} else {
		for id, c := range r.workerReq {
			w.requests = w.requests.plus(c[1].minus(c[0]))
			r.workerReq[id] = [2]requests{c[1], c[1]}
		}
	}
	r.cur = window{n: w.n + 1, from: t, version: w.version}
	return w
}

// percentile is the nearest-rank p-th percentile of xs (0 when empty).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// printer writes rows as a table or as JSON lines, each row as soon as it
// is known (a run takes a while).
type printer struct {
	out     io.Writer
	json    bool
	longRun bool
	tw      *tabwriter.Writer
	header  bool
	width   int // of the strategy column: the longest strategy name
}

func newPrinter(out io.Writer, asJSON, longRun bool, strategies []string) *printer {
	// A minimum width above every header and usual value, and the strategy
	// names padded to the longest, keep the columns aligned although every
	// row is flushed on its own.
	p := &printer{out: out, json: asJSON, longRun: longRun, tw: tabwriter.NewWriter(out, 12, 0, 2, ' ', tabwriter.AlignRight)}
	for _, s := range strategies {
		p.width = max(p.width, len(s))
	}
	return p
}

func (p *printer) print(r Row) {
	if p.json {
		b, _ := json.Marshal(r) // a struct of plain fields always encodes
		fmt.Fprintf(p.out, "%s\n", b)
		return
	}
	if !p.header {
		p.header = true
		if p.longRun {
			fmt.Fprint(p.tw, "WINDOW\tVERSION\t")
		}
		fmt.Fprintf(p.tw, "%*s\tPRODUCERS\tPAYLOAD\tTGB/S\tMB/S\tATT/COMMIT\tTGB/COMMIT\tP50_MS\tP99_MS\tE2E_P50\tE2E_P99\tUPLOAD_P50\tCOMMITTERS\t\n", p.width, "STRATEGY")
	}
	if p.longRun {
		fmt.Fprintf(p.tw, "%d\t%d\t", r.Window, r.Version)
	}
	committers := "-"
	if !baseline(r.Strategy) {
		committers = fmt.Sprintf("%d/%d", r.CommittingProducers, r.Producers)
	}
	fmt.Fprintf(p.tw, "%*s\t%d\t%s\t%.1f\t%.1f\t%.2f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%s\t\n",
		p.width, r.Strategy, r.Producers, sizeString(r.PayloadBytes), r.TGBsPerS, r.MBPerS,
		r.AttemptsPerCommit, r.TGBsPerCommit, r.P50Ms, r.P99Ms, r.E2EP50Ms, r.E2EP99Ms, r.UploadP50Ms, committers)
	p.flush()
}

func (p *printer) flush() { _ = p.tw.Flush() } // errors surface on the next write to out, if ever

// sizeString prints whole KiB/MiB sizes as such, others in bytes.
func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}
