package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/lakestream/lakestream/bench"
	"github.com/lakestream/lakestream/store"
	"github.com/lakestream/lakestream/txn"
)

// The cost run (--cost): what a million steps cost in S3 requests.
//
// One producer commits a step of R ranks every StepInterval; CostNodes
// lakefs-mount processes per build each show CostRanks adjacent ranks
// (node i: ranks i*CostRanks..) and a reader per node reads every file of
// its ranks of each new step as soon as it is committed (the first open
// waits with --wait), as a trainer at the head does. Each role has its own
// counting proxy in front of the S3 endpoint: the producer, this build's
// mounts, and with CompareMountBin another build's mounts side by side in
// the same run, against the same stream and commits. Requests are split by
// kind: log reads (polls), index GETs and data GETs (told apart by the
// object's layout: a GET starting at or after the object's data end reads
// its index), heartbeat writes, the rest. From the per-node, per-step
// figures it prices the deployment the issue names (CostDeployNodes nodes,
// one step a second, S3 Standard list prices) and prints the floor beside
// it: per step one data PUT and one log PUT, and per node one GET for the
// version, one for its part of the index and one for its bytes.

// S3 Standard list prices, dollars per request.
const (
	pricePut = 0.005 / 1000
	priceGet = 0.0004 / 1000
)

// CostRow is one build's column of the cost table; the producer's figures
// are the same in every row of a run.
type CostRow struct {
	Kind     string  `json:"kind"` // "cost"
	Build    string  `json:"build"`
	MountBin string  `json:"mount_bin"`
	Ranks    int     `json:"ranks"`
	Nodes    int     `json:"nodes"`
	NodeRank int     `json:"ranks_per_node"`
	Steps    int     `json:"steps"` // committed in the window
	WindowS  float64 `json:"window_s"`

	// Per node per step.
	IndexGets float64 `json:"index_gets_per_node_step"`
	DataGets  float64 `json:"data_gets_per_node_step"`
	LogGets   float64 `json:"log_gets_per_node_step"` // polls: GETs of _log/
	LogLists  float64 `json:"log_lists_per_node_step"`
	OtherGets float64 `json:"other_gets_per_node_step"` // HEAD _stream.json, ...
	OtherPuts float64 `json:"other_puts_per_node_step"` // besides heartbeats
	// KiB downloaded (response bodies: index, data, log).
	KiB float64 `json:"kib_per_node_step"`
	// Per node per minute.
	HeartbeatPuts float64 `json:"heartbeat_puts_per_node_min"`
	// Log-prefix GETs per second if 1,000 nodes followed like these.
	LogGetsPerS1000 float64 `json:"log_gets_per_s_1000_nodes"`
	SeenP50Ms       float64 `json:"seen_p50_ms"`
	SeenP99Ms       float64 `json:"seen_p99_ms"`
	SeenMaxMs       float64 `json:"seen_max_ms"`
	// The producer, per step.
	ProducerPuts float64 `json:"producer_puts_per_step"`
	ProducerGets float64 `json:"producer_gets_per_step"`

	// Dollars per million steps at DeployNodes nodes, one step a second.
	DeployNodes int          `json:"deploy_nodes"`
	Cost        CostSplit    `json:"cost"`
	Floor       float64      `json:"floor"`
	Ratio       float64      `json:"ratio_to_floor"`
	OneDataGet  CostSplitSum `json:"cost_with_one_data_get"` // data GETs counted as min(measured, 1)
}

// CostSplit is the cost per million steps by kind.
type CostSplit struct {
	Producer  float64 `json:"producer"`
	Log       float64 `json:"log"`
	Index     float64 `json:"index"`
	Data      float64 `json:"data"`
	Heartbeat float64 `json:"heartbeat"`
	Other     float64 `json:"other"`
	Total     float64 `json:"total"`
}

// CostSplitSum is a total and its ratio to the floor.
type CostSplitSum struct {
	Total float64 `json:"total"`
	Ratio float64 `json:"ratio_to_floor"`
}

// costFloor is the floor per million steps at nodes nodes.
func costFloor(nodes int) float64 {
	return 1e6 * (2*pricePut + float64(nodes)*3*priceGet)
}

// price fills r's cost from its per-node figures, at one step a second
// (so a per-minute heartbeat rate is rate/60 per step).
func (r *CostRow) price() {
	n := float64(r.DeployNodes)
	perStep := func(gets, puts float64) float64 { return 1e6 * n * (gets*priceGet + puts*pricePut) }
	c := CostSplit{
		Producer:  1e6 * (r.ProducerPuts*pricePut + r.ProducerGets*priceGet),
		Log:       perStep(r.LogGets, r.LogLists), // LIST is priced as a PUT
		Index:     perStep(r.IndexGets, 0),
		Data:      perStep(r.DataGets, 0),
		Heartbeat: perStep(0, r.HeartbeatPuts/60),
		Other:     perStep(r.OtherGets, r.OtherPuts),
	}
	c.Total = c.Producer + c.Log + c.Index + c.Data + c.Heartbeat + c.Other
	r.Cost, r.Floor = c, costFloor(r.DeployNodes)
	r.Ratio = c.Total / r.Floor
	one := c.Total - c.Data + perStep(min(r.DataGets, 1), 0)
	r.OneDataGet = CostSplitSum{Total: one, Ratio: one / r.Floor}
}

// costBuild is one build's mounts, proxy and readers' sightings.
type costBuild struct {
	name, tag, bin string // tag names its node ids
	proxy          *countingProxy
	url            string
	mounts         []*mountProc
	sent0          int64 // proxy bytes sent when the window started

	mu   sync.Mutex
	seen []float64 // GUARDED_BY(mu): ms from commit to a waiting reader's first byte
}

// runCost measures the cost rows at ranks ranks.
func runCost(ctx context.Context, o Options, ranks int, out io.Writer) error {
	if o.CostNodes*o.CostRanks > ranks {
		return fmt.Errorf("bench scale --cost: %d nodes x %d ranks do not fit %d ranks", o.CostNodes, o.CostRanks, ranks)
	}
	dst, url, done, err := bench.OpenRun(ctx, o.StoreURL, fmt.Sprintf("cost-%d-%d", ranks, time.Now().UnixNano()), o.Keep, o.Logger)
	if err != nil {
		return err
	}
	defer done()
	if _, err := txn.Create(ctx, dst, txn.CreateOptions{Ranks: ranks}); err != nil {
		return err
	}
	prodURL, prodProxy, err := viaProxy(url)
	if err != nil || prodProxy == nil {
		return errors.Join(err, errors.New("bench scale --cost: needs an s3:// store with endpoint= (its requests are counted by a proxy)"))
	}
	defer prodProxy.srv.Close()
	builds := []*costBuild{{name: "this build", tag: "this", bin: o.MountBin}}
	if o.CompareMountBin != "" {
		builds = append(builds, &costBuild{name: "compare", tag: "compare", bin: o.CompareMountBin})
	}
	for _, b := range builds {
		if b.url, b.proxy, err = viaProxy(url); err != nil {
			return err
		}
		defer b.proxy.srv.Close()
	}
	ps, err := store.Open(ctx, prodURL)
	if err != nil {
		return err
	}
	l, err := txn.Open(ctx, ps)
	if err != nil {
		return err
	}
	rows, err := costMeasure(ctx, o, l, builds, prodProxy)
	if err != nil {
		return err
	}
	printCost(out, o.JSON, rows)
	return nil
}

// costMeasure runs the producer from the start, starts the mounts and
// their readers, lets them settle (the cadence learned, the start-up
// heartbeats written), then counts o.Window.
func costMeasure(ctx context.Context, o Options, l *txn.Log, builds []*costBuild, prodProxy *countingProxy) ([]CostRow, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var cmu sync.Mutex
	committed := map[int64]time.Time{}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return costProducer(gctx, l, o, committed, &cmu) })
	// Stop the mounts before waiting for the readers: a reader blocked in
	// a --wait lookup returns when its mount goes.
	var once sync.Once
	var stopErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			for _, b := range builds {
				stopMounts(b.mounts)
			}
			stopErr = g.Wait()
		})
		return stopErr
	}
	defer stop()
	head, err := waitHead(gctx, l, 2)
	if err != nil {
		return nil, err
	}
	for _, b := range builds {
		if err := b.start(gctx, o, head, g, committed, &cmu); err != nil {
			return nil, err
		}
	}
	time.Sleep(o.CostSettle)
	prodProxy.take()
	first := countSteps(committed, &cmu)
	for _, b := range builds {
		b.proxy.take()
		b.sent0 = b.proxy.sent.Load()
		b.mu.Lock()
		b.seen = nil
		b.mu.Unlock()
	}
	start := time.Now()
	select {
	case <-gctx.Done(): // a reader or the producer failed
		return nil, fmt.Errorf("bench scale --cost: %w", errors.Join(stop(), gctx.Err()))
	case <-time.After(o.Window):
	}
	window := time.Since(start)
	steps := countSteps(committed, &cmu) - first
	prod, _ := prodProxy.take()
	if steps < 1 {
		return nil, errors.New("bench scale --cost: no step committed in the window")
	}
	st, err := l.Load(context.WithoutCancel(ctx))
	if err != nil {
		return nil, err
	}
	var rows []CostRow
	for _, b := range builds {
		rows = append(rows, b.row(o, l.Config.Ranks, steps, window, prod, st))
	}
	return rows, nil
}

func countSteps(committed map[int64]time.Time, mu *sync.Mutex) int {
	mu.Lock()
	defer mu.Unlock()
	return len(committed)
}

// waitHead waits until the stream's head is at least n-1 and returns it.
func waitHead(ctx context.Context, l *txn.Log, n int64) (int64, error) {
	for {
		st, err := l.Load(ctx)
		if err != nil {
			return 0, err
		}
		if h, ok := st.Head(); ok && h >= n-1 {
			return h, nil
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// start starts the build's mounts (node i shows ranks i*CostRanks..) and a
// reader per mount.
func (b *costBuild) start(ctx context.Context, o Options, head int64, g *errgroup.Group, committed map[int64]time.Time, cmu *sync.Mutex) error {
	bo := o
	bo.MountBin = b.bin
	for i := range o.CostNodes {
		lo := i * o.CostRanks
		m, err := startMount(ctx, bo, b.url, fmt.Sprintf("cost-%s-%d", b.tag, i),
			"--ranks", fmt.Sprintf("%d-%d", lo, lo+o.CostRanks-1))
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		b.mounts = append(b.mounts, m)
		g.Go(func() error {
			return costReader(ctx, m, o, lo, head, func(n int64, at time.Time) {
				cmu.Lock()
				c, ok := committed[n]
				cmu.Unlock()
				if ok {
					b.mu.Lock()
					b.seen = append(b.seen, max(0, ms(at.Sub(c))))
					b.mu.Unlock()
				}
			})
		})
	}
	return nil
}

// costReader reads every file of ranks lo..lo+CostRanks-1 of each step
// after head as soon as the mount shows it; saw gets each step and when
// its first file was read (the waiting open).
func costReader(ctx context.Context, m *mountProc, o Options, lo int, head int64, saw func(int64, time.Time)) error {
	for n := head + 1; ; n++ {
		for r := lo; r < lo+o.CostRanks; r++ {
			for f := range o.Files {
				p := filepath.Join(m.Mountpoint(), "steps", strconv.FormatInt(n, 10), "rank-"+strconv.Itoa(r), fmt.Sprintf("sample-%03d.bin", f))
				_, err := os.ReadFile(p)
				if ctx.Err() != nil {
					return nil
				}
				if err != nil {
					return fmt.Errorf("reader of %s: %w", m.Mountpoint(), err)
				}
				if r == lo && f == 0 {
					saw(n, time.Now())
				}
			}
		}
	}
}

// costProducer commits a step of every rank x o.Files files every
// o.StepInterval and records when each commit returned.
func costProducer(ctx context.Context, l *txn.Log, o Options, committed map[int64]time.Time, mu *sync.Mutex) error {
	p, err := txn.OpenProducer(ctx, l, txn.ProducerOptions{ID: "cost", Logger: o.Logger})
	if err != nil {
		return err
	}
	defer p.Close(context.WithoutCancel(ctx))
	data := make([]byte, o.FileSize)
	t := time.NewTicker(o.StepInterval)
	defer t.Stop()
	for {
		b := txn.Batch{Ranks: make([][]txn.FileSource, l.Config.Ranks)}
		for r := range b.Ranks {
			for f := range o.Files {
				b.Ranks[r] = append(b.Ranks[r], txn.BytesFile(fmt.Sprintf("sample-%03d.bin", f), data))
			}
		}
		pd, err := p.Append(ctx, b)
		if err != nil {
			return nil // the run ended
		}
		step, err := pd.Wait(ctx)
		if err != nil {
			return nil
		}
		mu.Lock()
		committed[step] = time.Now()
		mu.Unlock()
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// row turns the build's counts over the window into its column.
func (b *costBuild) row(o Options, ranks, steps int, window time.Duration, prod map[reqKind]int64, st *txn.State) CostRow {
	counts, gets := b.proxy.take()
	nodes := len(b.mounts)
	perNodeStep := func(n int64) float64 { return float64(n) / float64(nodes*steps) }
	index, data := splitObjGets(gets, st)
	r := CostRow{Kind: "cost", Build: b.name, MountBin: b.bin, Ranks: ranks, Nodes: nodes, NodeRank: o.CostRanks,
		Steps: steps, WindowS: window.Seconds(), DeployNodes: o.CostDeployNodes}
	r.IndexGets, r.DataGets = perNodeStep(index), perNodeStep(data)
	r.KiB = perNodeStep(b.proxy.sent.Load()-b.sent0) / 1024
	r.LogGets, r.LogLists = perNodeStep(counts[reqKind{"log", "get"}]), perNodeStep(counts[reqKind{"log", "list"}])
	r.HeartbeatPuts = float64(counts[reqKind{"heartbeat", "put"}]) / float64(nodes) / window.Minutes()
	var otherGets, otherPuts int64
	for k, n := range counts {
		counted := k.area == "log" && (k.op == "get" || k.op == "list") || k == reqKind{"data", "get"} || k == reqKind{"heartbeat", "put"}
		switch {
		case counted:
		case k.op == "get" || k.op == "head":
			otherGets += n
		case k.op == "put" || k.op == "list": // LIST is priced as a PUT
			otherPuts += n
		}
	}
	r.OtherGets, r.OtherPuts = perNodeStep(otherGets), perNodeStep(otherPuts)
	r.LogGetsPerS1000 = float64(counts[reqKind{"log", "get"}]) / float64(nodes) / window.Seconds() * 1000
	for k, n := range prod {
		switch k.op {
		case "put", "list":
			r.ProducerPuts += float64(n) / float64(steps)
		case "get", "head":
			r.ProducerGets += float64(n) / float64(steps)
		}
	}
	b.mu.Lock()
	seen := slices.Clone(b.seen)
	b.mu.Unlock()
	if len(seen) > 0 {
		slices.Sort(seen)
		r.SeenP50Ms, r.SeenP99Ms, r.SeenMaxMs = seen[len(seen)/2], seen[min(len(seen)-1, len(seen)*99/100)], seen[len(seen)-1]
	}
	r.price()
	return r
}

// splitObjGets tells index GETs (starting at or after the object's data
// end) from data GETs, by the TGBs of st; a GET of an object st does not
// know counts as data.
func splitObjGets(gets []objGet, st *txn.State) (index, data int64) {
	dataEnd := map[string]int64{}
	for _, t := range st.Steps {
		dataEnd[t.Object.Key] = t.Object.Data
	}
	for _, g := range gets {
		if end, ok := dataEnd[g.key]; ok && g.off >= end {
			index++
		} else {
			data++
		}
	}
	return index, data
}

// printCost prints the builds side by side, one metric a line, with the
// target or floor beside it.
func printCost(w io.Writer, asJSON bool, rows []CostRow) {
	if asJSON {
		for _, r := range rows {
			b, _ := json.Marshal(r)
			fmt.Fprintln(w, string(b))
		}
		return
	}
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	r0 := rows[0]
	fmt.Fprintf(tw, "cost: %d ranks, %d nodes x %d adjacent ranks per build, %d steps in %.0f s; priced for %d nodes at 1 step/s\t\n\n",
		r0.Ranks, r0.Nodes, r0.NodeRank, r0.Steps, r0.WindowS, r0.DeployNodes)
	hdr := "metric\t"
	for _, r := range rows {
		hdr += r.Build + "\t"
	}
	fmt.Fprintln(tw, hdr+"target\t")
	line := func(name, target string, f func(CostRow) string) {
		s := name + "\t"
		for _, r := range rows {
			s += f(r) + "\t"
		}
		fmt.Fprintln(tw, s+target+"\t")
	}
	num := func(x float64) string { return fmt.Sprintf("%.2f", x) }
	line("index GETs/node/step", "", func(r CostRow) string { return num(r.IndexGets) })
	line("KiB downloaded/node/step", "", func(r CostRow) string { return num(r.KiB) })
	line("data GETs/node/step", "", func(r CostRow) string { return num(r.DataGets) })
	line("index+data GETs/node/step", "<= 2.2", func(r CostRow) string { return num(r.IndexGets + r.DataGets) })
	line("log GETs (polls)/node/step", "<= 1.2", func(r CostRow) string { return num(r.LogGets) })
	line("log LISTs/node/step", "", func(r CostRow) string { return num(r.LogLists) })
	line("other GETs+HEADs/node/step", "", func(r CostRow) string { return num(r.OtherGets) })
	line("heartbeat PUTs/node/min", "<= 1", func(r CostRow) string { return num(r.HeartbeatPuts) })
	line("log-prefix GETs/s at 1,000 nodes", "", func(r CostRow) string { return fmt.Sprintf("%.0f", r.LogGetsPerS1000) })
	line("waiting reader p50/p99/max ms", "p99 <= 1000", func(r CostRow) string {
		return fmt.Sprintf("%.0f/%.0f/%.0f", r.SeenP50Ms, r.SeenP99Ms, r.SeenMaxMs)
	})
	line("producer PUTs, GETs/step", "floor 2, 0", func(r CostRow) string { return fmt.Sprintf("%.2f, %.2f", r.ProducerPuts, r.ProducerGets) })
	line("$/M steps: producer", "", func(r CostRow) string { return num(r.Cost.Producer) })
	line("  log polls", "", func(r CostRow) string { return num(r.Cost.Log) })
	line("  index", "", func(r CostRow) string { return num(r.Cost.Index) })
	line("  data", "", func(r CostRow) string { return num(r.Cost.Data) })
	line("  heartbeats", "", func(r CostRow) string { return num(r.Cost.Heartbeat) })
	line("  other", "", func(r CostRow) string { return num(r.Cost.Other) })
	line("$/M steps total (x floor)", fmt.Sprintf("floor %.2f, <= %.2f", r0.Floor, 1.15*r0.Floor), func(r CostRow) string {
		return fmt.Sprintf("%.2f (%.2fx)", r.Cost.Total, r.Ratio)
	})
	line("  with <= 1 data GET/node/step", "", func(r CostRow) string {
		return fmt.Sprintf("%.2f (%.2fx)", r.OneDataGet.Total, r.OneDataGet.Ratio)
	})
	tw.Flush()
}
