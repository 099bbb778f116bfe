package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ingestSeries are the lines of section 1, in legend order: per store
// Lakestream's strategies and the store's limits, then the broker.
func ingestSeries(o *Options) []string {
	var out []string
	for _, st := range o.Stores {
		for _, strat := range []string{"dac", "naive", "raw-put", "plain-put"} {
			out = append(out, strat+" "+st)
		}
	}
	return append(out, "nats", "nats-fsync")
}

// seriesOf names the line a row of section 1 belongs to.
func seriesOf(r Row) string {
	s := r.Str("strategy")
	if s == "nats" || s == "nats-fsync" {
		return s
	}
	return s + " " + r.Str("store")
}

// limitSeries are the strategies that are a store's limit, not
// Lakestream.
func isLimit(series string) bool {
	return strings.HasPrefix(series, "raw-put") || strings.HasPrefix(series, "plain-put")
}

// ingestRun is one `bench ingest` invocation of the grid: one point
// (payload, producers) on one store, every strategy of that store.
type ingestRun struct {
	store      string // s3, file, file+50ms or nats
	strategies string
	payload    int64
	producers  int
	window     time.Duration
}

// ingestRuns is the grid in run order: per payload and producer count
// every store one after the other, so the peers share the machine's
// state.
func ingestRuns(o *Options) []ingestRun {
	var runs []ingestRun
	for _, payload := range o.Payloads {
		for _, p := range o.Producers {
			for _, st := range append(slices.Clone(o.Stores), "nats") {
				strat := "dac,naive,raw-put,plain-put"
				if st == "nats" {
					strat = "nats,nats-fsync"
				}
				runs = append(runs, ingestRun{store: st, strategies: strat, payload: payload, producers: p, window: ingestWindow(o, st, payload, p)})
			}
		}
	}
	return runs
}

// storeBandwidth is roughly what each store takes on this kind of
// machine (bytes/s), for sizing windows and projecting the run.
func storeBandwidth(store string) float64 {
	switch store {
	case "s3":
		return 100e6
	case "nats":
		return 150e6
	}
	return 300e6
}

// ingestWindow is a point's window: at least o.Window, and long enough
// for several rounds of every producer's TGB (a window short against
// the commit latency turns latency into missing throughput), at most
// four times o.Window.
func ingestWindow(o *Options, store string, payload int64, producers int) time.Duration {
	round := time.Duration(float64(payload*int64(producers)) / storeBandwidth(store) * float64(time.Second))
	w := max(o.Window, 4*round)
	return min(w.Round(time.Second), 4*o.Window)
}

// warmup is the uncounted time before a point's first window: 2 s
// (connections made, queues filled), a quarter of a long window, and no
// longer than a short one (bench-quick's).
func warmup(w time.Duration) time.Duration { return max(min(2*time.Second, w), w/4).Round(time.Second) }

// args is the command line of r.
func (r ingestRun) args(o *Options, url string) []string {
	a := []string{"ingest", "--json", "--store", url, "--strategy", r.strategies,
		"--producers", fmt.Sprint(r.producers), "--payload", Bytes(float64(r.payload)), "--ranks", fmt.Sprint(o.Ranks),
		"--warmup", warmup(r.window).String(), "--duration", r.window.String(), "--windows", fmt.Sprint(o.Windows)}
	if r.store == "file+50ms" {
		a = append(a, "--store-latency", "50ms")
	}
	return a
}

// url is the store of r's runs.
func (e *env) ingestURL(ctx context.Context, r ingestRun) (string, error) {
	switch r.store {
	case "s3":
		bucket, err := e.newBucket(ctx, "ingest")
		if err != nil {
			return "", err
		}
		return e.s3.URL(bucket, "bench"), nil
	case "nats":
		return "file://" + e.work + "/nats-unused", nil
	}
	return "file://" + e.work + "/file-ingest", nil
}

// measureIngest runs section 1's grid; a failed run is a note, its rows
// so far kept.
func (e *env) measureIngest(ctx context.Context) ([]Row, error) {
	o := e.o
	var rows []Row
	runs := ingestRuns(o)
	for i, r := range runs {
		url, err := e.ingestURL(ctx, r)
		if err != nil {
			return rows, err
		}
		e.logf("ingest %d/%d: %s %s, %s x %d producers, %s windows", i+1, len(runs), r.store, r.strategies, Bytes(float64(r.payload)), r.producers, r.window)
		got, err := e.bench(ctx, 3*r.cost(o)+time.Minute, r.args(o, url)...)
		for _, g := range got {
			g["store"] = r.store
		}
		rows = append(rows, got...)
		if err != nil {
			if ctx.Err() != nil {
				return rows, err
			}
			rows = append(rows, Row{"note": fmt.Sprintf("ingest, %s %s, %s x %d producers failed (its later strategies are missing): %v",
				r.store, r.strategies, Bytes(float64(r.payload)), r.producers, err)})
		}
	}
	return rows, nil
}

// renderIngest writes section 1 and its headlines from its rows; the
// windows of a point are its repeats.
func (e *env) renderIngest(rep *Report, rows []Row) {
	g := GroupRows(rows, "strategy", "store", "producers", "payload_bytes")
	e.ingestSection(rep, g, rows)
	e.ingestHeadlines(rep, g)
}

// ingestSection writes section 1: a table and two figures per payload.
func (e *env) ingestSection(rep *Report, g *Group, rows []Row) {
	o := e.o
	sec := &Section{Title: "Ingestion vs producers"}
	sec.printf("Each producer appends TGBs of %d ranks as fast as it can; a TGB counts when its step is visible (Lakestream), its objects are written (raw-put: the store's limit through our store layer, no commit; plain-put: the same bytes without our store layer, one SDK PutObject per part or a write and fsync per file), or all its messages are acked (NATS JetStream, embedded nats-server with file storage, one message per rank part; `nats` acks from the page cache, `nats-fsync` syncs before every ack, the durability an object-store PUT gives). `s3` is versitygw on loopback, `file` a local directory, `file+50ms` the same with 50 ms added to every store call (`--store-latency 50ms`), as a remote store would. Every point runs an uncounted warm-up, then %d back-to-back windows: figures are the median over the windows (min-max). A window is at least %s and long enough for several rounds of every producer's TGB (window column), so commit latency is not turned into missing throughput; `in flight` is the median count of TGBs uploaded but not yet visible at a window's end (NATS: being published). Latency: Lakestream's p50/p99 is from the TGB's data being durable to its step being visible; NATS's from first publish to last ack (the upload included, so it favours Lakestream). `load` is the highest 1-minute load average at the point's start.\n\n",
		o.Ranks, o.Windows, o.Window)
	for _, payload := range o.Payloads {
		pb := float64(payload)
		t := Table{Header: []string{"series", "producers", "TGB/s", "MB/s", "p50 ms", "p99 ms", "attempts/commit", "TGBs/commit", "in flight", "window s", "load"}}
		tput := Figure{Title: "Ingestion, " + Bytes(pb) + " TGBs of " + fmt.Sprint(o.Ranks) + " ranks", XLabel: "producers", YLabel: "TGB/s (median, min-max)"}
		lat := Figure{Title: "p99 latency, " + Bytes(pb) + " TGBs", XLabel: "producers", YLabel: "p99 ms (log)", LogY: true}
		for _, name := range ingestSeries(o) {
			st, sl := e.ingestRowsOf(g, &t, name, pb)
			if len(st.X) > 0 {
				tput.Series = append(tput.Series, st)
			}
			if len(sl.X) > 0 {
				lat.Series = append(lat.Series, sl)
			}
		}
		sec.printf("### %s TGBs\n\n%s\n", Bytes(pb), t.Markdown())
		sec.printf("%s", rep.Stamp(fmt.Sprintf("%d ranks, payload %s per TGB, producers %s as goroutines, %d windows per point", o.Ranks, Bytes(pb), joinInts(o.Producers), o.Windows)))
		sec.printf("%s", commands(filterRows(rows, func(r Row) bool { return r.Num("payload_bytes") == pb })))
		slug := strings.ToLower(Bytes(pb))
		sec.figure("ingest-tgbs-"+slug+".png", tput)
		sec.figure("ingest-p99-"+slug+".png", lat)
	}
	rep.Sections = append(rep.Sections, sec)
}

// ingestRowsOf adds series name's table rows at payload pb to t and
// returns its throughput and p99 lines.
func (e *env) ingestRowsOf(g *Group, t *Table, name string, pb float64) (Series, Series) {
	st, sl := Series{Name: name}, Series{Name: name}
	for _, k := range g.Filter(func(r Row) bool { return seriesOf(r) == name && r.Num("payload_bytes") == pb }) {
		p := g.Rows[k].Num("producers")
		st.X, st.Y = append(st.X, p), append(st.Y, g.Stat(k, "tgbs_per_s"))
		if !isLimit(name) {
			sl.X, sl.Y = append(sl.X, p), append(sl.Y, g.Stat(k, "p99_ms"))
		}
		att, per, lat50, lat99 := "", "", "", ""
		if !isLimit(name) {
			lat50, lat99 = g.Stat(k, "p50_ms").String(), g.Stat(k, "p99_ms").String()
		}
		if !isLimit(name) && !strings.HasPrefix(name, "nats") {
			att, per = g.Stat(k, "attempts_per_commit").String(), g.Stat(k, "tgbs_per_commit").String()
		}
		t.Rows = append(t.Rows, []string{name, fmt.Sprint(p), g.Stat(k, "tgbs_per_s").String(), g.Stat(k, "mb_per_s").String(),
			lat50, lat99, att, per, num(g.Stat(k, "in_flight").Med), num(g.Stat(k, "seconds").Med), loadCell(g, k)})
	}
	return st, sl
}

// filterRows is the rows keep accepts.
func filterRows(rows []Row, keep func(Row) bool) []Row {
	var out []Row
	for _, r := range rows {
		if keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// headlinePayload is the TGB size of the ingest headlines: 1 MiB when
// measured, else the first.
func headlinePayload(o *Options) int64 {
	if slices.Contains(o.Payloads, 1<<20) {
		return 1 << 20
	}
	return o.Payloads[0]
}

// headlineStore is the store of the ingest headlines: s3 when measured.
func headlineStore(o *Options) string {
	if slices.Contains(o.Stores, "s3") {
		return "s3"
	}
	return o.Stores[0]
}

// ingestHeadlines adds the summary lines (one per producer count) and
// the losses of section 1.
func (e *env) ingestHeadlines(rep *Report, g *Group) {
	o := e.o
	s := ingestStats{g}
	payload, store := headlinePayload(o), headlineStore(o)
	for _, p := range o.Producers {
		peer, pn := s.bestNATS(p, payload, "tgbs_per_s", false)
		h := Headline{
			Figure:     fmt.Sprintf("ingest TGB/s, %s TGBs, %d producers, dac on %s", Bytes(float64(payload)), p, store),
			Lakestream: s.stat("dac "+store, p, payload, "tgbs_per_s"), Limit: s.stat("raw-put "+store, p, payload, "tgbs_per_s"), LimitName: "raw-put " + store,
			Peer: peer, PeerName: pn, Unit: "TGB/s",
		}
		if h.Lakestream.N == 0 {
			h.MissingComment = "not measured in this run"
		}
		rep.Summary = append(rep.Summary, h)
	}
	e.ingestLosses(rep, s)
	e.attemptsFigure(rep, g)
}

// ingestStats looks ingest rows up by series, producers and payload.
type ingestStats struct{ g *Group }

func (s ingestStats) stat(series string, producers int, payload int64, metric string) Stat {
	for _, k := range s.g.Keys {
		r := s.g.Rows[k]
		if seriesOf(r) == series && r.Num("producers") == float64(producers) && r.Num("payload_bytes") == float64(payload) {
			return s.g.Stat(k, metric)
		}
	}
	return Stat{}
}

// bestNATS is the better of nats and nats-fsync on metric (lower: the
// lower is better) and its name.
func (s ingestStats) bestNATS(producers int, payload int64, metric string, lower bool) (Stat, string) {
	var bs Stat
	var bn string
	for _, n := range []string{"nats", "nats-fsync"} {
		st := s.stat(n, producers, payload, metric)
		if st.N > 0 && (bs.N == 0 || (st.Med > bs.Med) != lower) {
			bs, bn = st, n
		}
	}
	return bs, bn
}

// ingestLosses lists every point where dac loses to a peer or stays below
// half its limit, one line per store and opponent, and each producer count
// where dac's p99 with 1 MiB TGBs is above nats-fsync's.
func (e *env) ingestLosses(rep *Report, s ingestStats) {
	o := e.o
	type versus struct{ store, other string }
	var order []versus
	points := map[versus][]string{}
	lose := func(v versus, point string) {
		if points[v] == nil {
			order = append(order, v)
		}
		points[v] = append(points[v], point)
	}
	for _, store := range o.Stores {
		for _, payload := range o.Payloads {
			for _, p := range o.Producers {
				ls := s.stat("dac "+store, p, payload, "tgbs_per_s")
				if ls.N == 0 {
					continue
				}
				at := fmt.Sprintf("%s x %d producers", Bytes(float64(payload)), p)
				for _, peer := range []string{"nats-fsync", "nats", "naive " + store} {
					if ps := s.stat(peer, p, payload, "tgbs_per_s"); ps.N > 0 && ls.Med < ps.Med {
						lose(versus{store, peer}, fmt.Sprintf("%s (%s vs %s TGB/s, %s)", at, num(ls.Med), num(ps.Med), Ratio(ls.Med, ps.Med)))
					}
				}
				if lim := s.stat("raw-put "+store, p, payload, "tgbs_per_s"); lim.N > 0 && ls.Med < 0.5*lim.Med {
					lose(versus{store, "half the raw-put limit"}, fmt.Sprintf("%s (%s of the limit)", at, Ratio(ls.Med, lim.Med)))
				}
			}
		}
	}
	for _, v := range order {
		rep.Losses = append(rep.Losses, fmt.Sprintf("Ingestion TGB/s, dac on %s below %s at %s.", v.store, v.other, strings.Join(points[v], "; ")))
	}
	if !slices.Contains(o.Payloads, 1<<20) {
		return
	}
	for _, p := range o.Producers {
		ls := s.stat("dac s3", p, 1<<20, "p99_ms")
		ps := s.stat("nats-fsync", p, 1<<20, "p99_ms")
		if ls.N > 0 && ps.N > 0 && ls.Med > ps.Med {
			rep.Losses = append(rep.Losses, fmt.Sprintf("Latency, 1MiB TGBs, %d producers: dac on s3 p99 %s ms vs nats-fsync %s ms (%s), although NATS's figure includes the upload.",
				p, num(ls.Med), num(ps.Med), Ratio(ls.Med, ps.Med)))
		}
	}
}

// attemptsFigure is the attempts-per-commit part of section 2, from the
// section 1 runs on s3.
func (e *env) attemptsFigure(rep *Report, g *Group) {
	o := e.o
	payload := float64(headlinePayload(o))
	f := Figure{Title: "Create attempts per commit, " + Bytes(payload) + " TGBs", XLabel: "producers", YLabel: "attempts per committed version"}
	f2 := Figure{Title: "TGBs per commit, " + Bytes(payload) + " TGBs", XLabel: "producers", YLabel: "TGBs per committed version"}
	for _, name := range ingestSeries(o) {
		if !strings.HasPrefix(name, "dac") && !strings.HasPrefix(name, "naive") {
			continue
		}
		a, b := Series{Name: name}, Series{Name: name}
		for _, k := range g.Filter(func(r Row) bool { return seriesOf(r) == name && r.Num("payload_bytes") == payload }) {
			p := g.Rows[k].Num("producers")
			a.X, a.Y = append(a.X, p), append(a.Y, g.Stat(k, "attempts_per_commit"))
			b.X, b.Y = append(b.X, p), append(b.Y, g.Stat(k, "tgbs_per_commit"))
		}
		if len(a.X) > 0 {
			f.Series, f2.Series = append(f.Series, a), append(f2.Series, b)
		}
	}
	rep.pending = append(rep.pending, NamedFigure{File: "dac-attempts.png", Figure: f}, NamedFigure{File: "dac-group.png", Figure: f2})
}

// dacOverTime runs section 2: long runs of dac and naive on s3.
// The long runs' shape.
const dacProducers, dacPayload = 8, 64 << 10

func (e *env) measureDAC(ctx context.Context) ([]Row, error) {
	o := e.o
	var rows []Row
	for _, strategy := range []string{"dac", "naive"} {
		bucket, err := e.newBucket(ctx, "longrun")
		if err != nil {
			return rows, err
		}
		e.logf("long run %s for %s", strategy, o.LongRun)
		// The run is cut by time: the version target is out of reach.
		got, err := e.bench(ctx, o.LongRun+5*time.Second, "ingest", "--json", "--store", e.s3.URL(bucket, "long"),
			"--strategy", strategy, "--producers", fmt.Sprint(dacProducers), "--payload", Bytes(dacPayload), "--ranks", fmt.Sprint(o.Ranks),
			"--duration", "1s", "--versions", "100000000")
		if err != nil && !errors.Is(err, errTimedOut) {
			rows = append(rows, Row{"note": fmt.Sprintf("long run of %s: %v", strategy, err)})
		}
		rows = append(rows, got...)
	}
	return rows, nil
}

// renderDAC writes section 2 from the long runs' rows.
func (e *env) renderDAC(rep *Report, rows []Row) {
	o := e.o
	const producers, payload = dacProducers, dacPayload
	sec := &Section{Title: "DAC over time"}
	sec.printf("%d producers append %s TGBs of %d ranks to versitygw for about %s per strategy, with a checkpoint and a gc after every 1 s window (as a training job would), so the log keeps growing while the live window stays bounded. Per window: TGB/s and the p99 commit latency (durable -> visible). `naive` commits one TGB per version and retries at once.\n\n",
		producers, Bytes(payload), o.Ranks, o.LongRun)
	g := GroupRows(rows, "strategy")
	t := Table{Header: []string{"strategy", "windows", "TGB/s per window", "p99 ms per window", "attempts/commit", "TGBs/commit", "versions at end", "load"}}
	tf := Figure{Title: "TGB/s per 1 s window, " + Bytes(payload) + " TGBs, 8 producers, s3", XLabel: "window (s)", YLabel: "TGB/s"}
	lf := Figure{Title: "p99 commit latency per window", XLabel: "window (s)", YLabel: "p99 ms (log)", LogY: true}
	for _, k := range g.Keys {
		name := g.Rows[k].Str("strategy")
		ts, ls := Series{Name: name}, Series{Name: name}
		var last float64
		for _, r := range rows {
			if r.Str("strategy") != name {
				continue
			}
			w := r.Num("window")
			ts.X, ts.Y = append(ts.X, w), append(ts.Y, Summarize([]float64{r.Num("tgbs_per_s")}))
			ls.X, ls.Y = append(ls.X, w), append(ls.Y, Summarize([]float64{r.Num("p99_ms")}))
			last = max(last, r.Num("version"))
		}
		tf.Series, lf.Series = append(tf.Series, ts), append(lf.Series, ls)
		t.Rows = append(t.Rows, []string{name, fmt.Sprint(len(ts.X)), g.Stat(k, "tgbs_per_s").String(), g.Stat(k, "p99_ms").String(),
			g.Stat(k, "attempts_per_commit").String(), g.Stat(k, "tgbs_per_commit").String(), fmt.Sprint(last), loadCell(g, k)})
	}
	sec.printf("%s\nFigures per strategy are the median over its windows (min-max).\n\n", t.Markdown())
	sec.printf("%s", rep.Stamp(fmt.Sprintf("%d producers, %s TGBs, %d ranks, 1 s windows, about %s per strategy, one run each", producers, Bytes(payload), o.Ranks, o.LongRun)))
	sec.printf("%s", commands(rows))
	sec.figure("dac-time-tgbs.png", tf)
	sec.figure("dac-time-p99.png", lf)
	if len(rep.pending) > 0 {
		sec.printf("Attempts per commit and TGBs per commit against the producer count, from the section 1 runs (the median over each point's %d windows): as producers are added DAC should make commits larger rather than collide more.\n\n", o.Windows)
		for _, f := range rep.pending {
			sec.figure(f.File, f.Figure)
		}
		rep.pending = nil
	}
	rep.Sections = append(rep.Sections, sec)
}
