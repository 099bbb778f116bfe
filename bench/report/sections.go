package report

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ingestSeries are the lines of section 1, in legend order: Lakestream
// on both stores, each store's raw-put limit, and the broker.
var ingestSeries = []string{"dac s3", "naive s3", "raw-put s3", "dac file", "naive file", "raw-put file", "nats", "nats-fsync"}

// seriesOf names the line a row of section 1 belongs to.
func seriesOf(r Row) string {
	s := r.Str("strategy")
	if s == "nats" || s == "nats-fsync" {
		return s
	}
	return s + " " + r.Str("store")
}

// ingest runs section 1: every strategy, producer count and payload, on
// versitygw and file://, and the NATS peers, repeated; within a repeat
// all of them run one after the other, so the peers share the machine's
// state.
func (e *env) ingest(ctx context.Context, rep *Report) error {
	rows, err := e.ingestRows(ctx, rep)
	if err != nil {
		return err
	}
	g := GroupRows(rows, "strategy", "store", "producers", "payload_bytes")
	e.ingestSection(rep, g)
	e.ingestHeadlines(rep, g)
	return nil
}

// ingestRows runs bench ingest for every repeat, payload and store; a
// failed run is a note, its rows so far kept.
func (e *env) ingestRows(ctx context.Context, rep *Report) ([]Row, error) {
	o := e.o
	var rows []Row
	for i := range o.IngestRepeats {
		bucket, err := e.newBucket(ctx, "ingest")
		if err != nil {
			return nil, err
		}
		runs := []struct{ store, url, strategies string }{
			{"s3", e.s3.URL(bucket, "bench"), "dac,naive,raw-put"},
			{"file", "file://" + e.work + "/file-ingest", "dac,naive,raw-put"},
			{"nats", "file://" + e.work + "/nats-unused", "nats,nats-fsync"},
		}
		for _, payload := range o.Payloads {
			d, producers := ingestPlan(o, payload)
			// Each run drains for up to a window and cleans up its prefix.
			limit := time.Duration(len(producers)*3)*(3*d+20*time.Second) + time.Minute
			for _, r := range runs {
				e.logf("ingest repeat %d/%d: %s %s, %s TGBs", i+1, o.IngestRepeats, r.store, r.strategies, Bytes(float64(payload)))
				got, err := e.bench(ctx, limit, "bench", "ingest", "--json", "--ranks", fmt.Sprint(o.Ranks), "--duration", d.String(),
					"--producers", joinInts(producers), "--payload", Bytes(float64(payload)), "--store", r.url, "--strategy", r.strategies)
				for _, g := range got {
					g["store"], g["repeat"] = r.store, float64(i+1)
				}
				rows = append(rows, got...)
				if err != nil {
					if ctx.Err() != nil {
						return nil, err
					}
					// The other points still say something.
					rep.Notes = append(rep.Notes, fmt.Sprintf("Ingest, %s %s, %s TGBs, repeat %d failed (its later points are missing): %v",
						r.store, r.strategies, Bytes(float64(payload)), i+1, err))
				}
			}
		}
	}
	return rows, nil
}

// ingestSection writes section 1: a table and two figures per payload.
func (e *env) ingestSection(rep *Report, g *Group) {
	o := e.o
	sec := &Section{Title: "Ingestion vs producers"}
	sec.printf("Each producer appends TGBs of %d ranks as fast as it can for a window; a TGB counts when its step is visible (Lakestream), its objects are written (raw-put: the store's limit, no commit), or all its messages are acked (NATS JetStream, embedded nats-server with file storage, one message per rank part; `nats` acks from the page cache, `nats-fsync` syncs before every ack, the durability an object-store PUT gives). `s3` is versitygw on loopback (every PUT signed and hashed by the SDK), `file` a local directory. Latency: Lakestream's p50/p99 is from the TGB's data being durable to its step being visible; NATS's is from first publish to last ack (the upload included, so it favours Lakestream); raw-put has none. JetStream answers a burst of large writes with 429 (too many requests); the NATS producer re-publishes such a part after 10 ms, as a client under back-pressure would. %d repeats of every point. A run counts the TGBs completed inside its window, so the windows of 16 MiB TGBs are longer (and their producer counts stop at 16: 32 x 16 MiB in flight is more than this machine's store completes in a window).\n\n",
		o.Ranks, o.IngestRepeats)
	for _, payload := range o.Payloads {
		pb := float64(payload)
		t := Table{Header: []string{"series", "producers", "TGB/s", "MB/s", "p50 ms", "p99 ms", "attempts/commit", "TGBs/commit"}}
		tput := Figure{Title: "Ingestion, " + Bytes(pb) + " TGBs of " + fmt.Sprint(o.Ranks) + " ranks", XLabel: "producers", YLabel: "TGB/s (median, min-max)"}
		lat := Figure{Title: "p99 latency, " + Bytes(pb) + " TGBs", XLabel: "producers", YLabel: "p99 ms (log)", LogY: true}
		for _, name := range ingestSeries {
			keys := g.Filter(func(r Row) bool { return seriesOf(r) == name && r.Num("payload_bytes") == pb })
			if len(keys) == 0 {
				continue
			}
			st, sl := Series{Name: name}, Series{Name: name}
			for _, k := range keys {
				r := g.Rows[k]
				p := r.Num("producers")
				st.X, st.Y = append(st.X, p), append(st.Y, g.Stat(k, "tgbs_per_s"))
				if !strings.HasPrefix(name, "raw-put") {
					sl.X, sl.Y = append(sl.X, p), append(sl.Y, g.Stat(k, "p99_ms"))
				}
				att, per := "", ""
				if !strings.HasPrefix(name, "raw-put") && !strings.HasPrefix(name, "nats") {
					att, per = g.Stat(k, "attempts_per_commit").String(), g.Stat(k, "tgbs_per_commit").String()
				}
				t.Rows = append(t.Rows, []string{name, fmt.Sprint(p), g.Stat(k, "tgbs_per_s").String(), g.Stat(k, "mb_per_s").String(),
					g.Stat(k, "p50_ms").String(), g.Stat(k, "p99_ms").String(), att, per})
			}
			tput.Series = append(tput.Series, st)
			if len(sl.X) > 0 {
				lat.Series = append(lat.Series, sl)
			}
		}
		sec.printf("### %s TGBs\n\n%s\n", Bytes(pb), t.Markdown())
		d, producers := ingestPlan(o, payload)
		sec.printf("%s", rep.Stamp(fmt.Sprintf("%d ranks, payload %s per TGB, producers %s as goroutines, %s windows, %d repeats", o.Ranks, Bytes(pb), joinInts(producers), d, o.IngestRepeats)))
		slug := strings.ToLower(Bytes(pb))
		sec.figure("ingest-tgbs-"+slug+".png", tput)
		sec.figure("ingest-p99-"+slug+".png", lat)
	}
	rep.Sections = append(rep.Sections, sec)
}

// ingestHeadlines adds the summary lines and losses of section 1.
func (e *env) ingestHeadlines(rep *Report, g *Group) {
	o := e.o
	s := ingestStats{g}
	head := 16
	if !slices.Contains(o.Producers, head) {
		head = o.Producers[len(o.Producers)-1]
	}
	for _, payload := range o.Payloads {
		for _, store := range []string{"s3", "file"} {
			peer, pn := s.bestNATS(head, payload, "tgbs_per_s", false)
			rep.Summary = append(rep.Summary, Headline{
				Figure:     fmt.Sprintf("ingest TGB/s, %s TGBs, %d producers, dac on %s", Bytes(float64(payload)), head, store),
				Lakestream: s.stat("dac "+store, head, payload, "tgbs_per_s"), Limit: s.stat("raw-put "+store, head, payload, "tgbs_per_s"), LimitName: "raw-put " + store,
				Peer: peer, PeerName: pn, Unit: "TGB/s",
			})
		}
	}
	if slices.Contains(o.Payloads, 1<<20) {
		peer, pn := s.bestNATS(head, 1<<20, "p99_ms", true)
		rep.Summary = append(rep.Summary, Headline{
			Figure:     fmt.Sprintf("ingest p99 ms, 1MiB TGBs, %d producers, dac on s3", head),
			Lakestream: s.stat("dac s3", head, 1<<20, "p99_ms"), Peer: peer, PeerName: pn, Unit: "ms", LowerIsBetter: true,
		})
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
	for _, store := range []string{"s3", "file"} {
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
	payload := float64(o.Payloads[0])
	if slices.Contains(o.Payloads, 1<<20) {
		payload = 1 << 20
	}
	f := Figure{Title: "Create attempts per commit, " + Bytes(payload) + " TGBs on s3", XLabel: "producers", YLabel: "attempts per committed version"}
	f2 := Figure{Title: "TGBs per commit, " + Bytes(payload) + " TGBs on s3", XLabel: "producers", YLabel: "TGBs per committed version"}
	for _, name := range []string{"dac s3", "naive s3", "dac file", "naive file"} {
		a, b := Series{Name: name}, Series{Name: name}
		for _, k := range g.Filter(func(r Row) bool { return seriesOf(r) == name && r.Num("payload_bytes") == payload }) {
			p := g.Rows[k].Num("producers")
			a.X, a.Y = append(a.X, p), append(a.Y, g.Stat(k, "attempts_per_commit"))
			b.X, b.Y = append(b.X, p), append(b.Y, g.Stat(k, "tgbs_per_commit"))
		}
		f.Series, f2.Series = append(f.Series, a), append(f2.Series, b)
	}
	rep.pending = append(rep.pending, NamedFigure{File: "dac-attempts.png", Figure: f}, NamedFigure{File: "dac-group.png", Figure: f2})
}

// ingestPlan is the window and the producer counts of payload's runs:
// TGBs of 16 MiB and more get three windows' time and at most 16
// producers.
func ingestPlan(o *Options, payload int64) (time.Duration, []int) {
	if payload < 16<<20 {
		return o.Duration, o.Producers
	}
	var ps []int
	for _, p := range o.Producers {
		if p <= 16 {
			ps = append(ps, p)
		}
	}
	return 3 * o.Duration, ps
}

// dacOverTime runs section 2: long runs of dac and naive on s3.
func (e *env) dacOverTime(ctx context.Context, rep *Report) error {
	o := e.o
	const producers, payload = 8, 64 << 10
	var rows []Row
	var notes []string
	for _, strategy := range []string{"dac", "naive"} {
		bucket, err := e.newBucket(ctx, "longrun")
		if err != nil {
			return err
		}
		e.logf("long run %s for %s", strategy, o.LongRun)
		// The run is cut by time: the version target is out of reach.
		got, err := e.bench(ctx, o.LongRun+5*time.Second, "bench", "ingest", "--json", "--store", e.s3.URL(bucket, "long"),
			"--strategy", strategy, "--producers", fmt.Sprint(producers), "--payload", Bytes(payload), "--ranks", fmt.Sprint(o.Ranks),
			"--duration", "1s", "--versions", "100000000")
		if err != nil && !errors.Is(err, errTimedOut) {
			notes = append(notes, fmt.Sprintf("long run of %s: %v", strategy, err))
		}
		rows = append(rows, got...)
	}
	sec := &Section{Title: "DAC over time"}
	sec.printf("%d producers append %s TGBs of %d ranks to versitygw for about %s per strategy, with a checkpoint and a gc after every 1 s window (as a training job would), so the log keeps growing while the live window stays bounded. Per window: TGB/s and the p99 commit latency (durable -> visible). `naive` commits one TGB per version and retries at once.\n\n",
		producers, Bytes(payload), o.Ranks, o.LongRun)
	g := GroupRows(rows, "strategy")
	t := Table{Header: []string{"strategy", "windows", "TGB/s per window", "p99 ms per window", "attempts/commit", "TGBs/commit", "versions at end"}}
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
			g.Stat(k, "attempts_per_commit").String(), g.Stat(k, "tgbs_per_commit").String(), fmt.Sprint(last)})
	}
	sec.printf("%s\nFigures per strategy are the median over its windows (min-max).\n\n", t.Markdown())
	sec.printf("%s", rep.Stamp(fmt.Sprintf("%d producers, %s TGBs, %d ranks, 1 s windows, about %s per strategy, one run each", producers, Bytes(payload), o.Ranks, o.LongRun)))
	sec.figure("dac-time-tgbs.png", tf)
	sec.figure("dac-time-p99.png", lf)
	if len(rep.pending) > 0 {
		sec.printf("Attempts per commit and TGBs per commit against the producer count, from the section 1 runs (%d repeats): as producers are added DAC should make commits larger rather than collide more.\n\n", o.IngestRepeats)
		for _, f := range rep.pending {
			sec.figure(f.File, f.Figure)
		}
		rep.pending = nil
	}
	for _, n := range notes {
		sec.printf("Note: %s\n\n", n)
	}
	rep.Sections = append(rep.Sections, sec)
	return nil
}
