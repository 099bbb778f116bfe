package report

import (
	"context"
	"fmt"
	"time"
)

// The consumer-latency section's shape: a 4 MiB step (4 ranks x 1 MiB)
// every 250 ms is 16 MB/s, well below what versitygw takes here.
const (
	latencyInterval = 250 * time.Millisecond
	latencySize     = "1MiB"
)

var latencyReaders = []int{1, 4}

// latencyArgs is the command line of the section's run on url.
func latencyArgs(o *Options, url string) []string {
	return []string{"read", "--follow", "--json", "--store", url, "--ranks", "4", "--size", latencySize,
		"--steps", fmt.Sprint(o.LatencySteps), "--interval", latencyInterval.String(), "--readers", joinInts(latencyReaders)}
}

// measureLatency runs `bench read --follow` on versitygw.
func (e *env) measureLatency(ctx context.Context) ([]Row, error) {
	if !e.has(ctx, "read", "--follow") {
		return []Row{{"note": "`lakefs-bench read --follow` does not exist in this build; the consumer latency is missing."}}, nil
	}
	bucket, err := e.newBucket(ctx, "follow")
	if err != nil {
		return nil, err
	}
	rows, err := e.bench(ctx, 2*sectionCost(e.o, "latency")+time.Minute, latencyArgs(e.o, e.s3.URL(bucket, "follow"))...)
	if err != nil {
		rows = append(rows, Row{"note": fmt.Sprintf("bench read --follow failed or was cut: %v", err)})
	}
	return rows, nil
}

// renderLatency writes the consumer-latency section and its headline:
// lakefs-mount's p99 against the NATS pull consumer's.
func (e *env) renderLatency(rep *Report, rows []Row, notes []string) {
	sec := &Section{Title: "Consumer latency at the head"}
	rep.Sections = append(rep.Sections, sec)
	sec.printf("A producer commits a step of 4 ranks x one %s file every %s (16 MB/s, below versitygw's limit) for %d steps; N readers, one per rank, each wait for the next step and read all of their rank's bytes. `mount`: through lakefs-mount with `--wait` on versitygw (the open blocks until the step is visible); `nats`: a JetStream pull consumer per rank (embedded nats-server, page-cache acks) fetching the same parts as they are published. A sample is the time from the step becoming visible (Lakestream: the commit returned to the producer; NATS: every part acked) to the reader having read its rank's bytes; a reader done before the producer learnt of its commit (or ack) counts 0, which a NATS consumer often is. The `from upload` columns measure from the producer starting the step (its upload; NATS: the first publish) instead, the fairer comparison: they include what each system does before the step is visible.\n\n",
		latencySize, latencyInterval, e.o.LatencySteps)
	for _, n := range notes {
		sec.printf("Note: %s\n\n", n)
	}
	g := GroupRows(rows, "system", "readers")
	t := Table{Header: []string{"system", "readers", "samples", "p50 ms", "p99 ms", "max ms", "from upload p50 ms", "from upload p99 ms", "load"}}
	fig := Figure{Title: "Consumer latency, p99", XLabel: "readers", YLabel: "p99 ms (log)", LogY: true}
	series := map[string]*Series{}
	var order []string
	for _, k := range g.Keys {
		r := g.Rows[k]
		sys := r.Str("system")
		t.Rows = append(t.Rows, []string{sys, num(r.Num("readers")), g.Stat(k, "samples").String(), g.Stat(k, "p50_ms").String(),
			g.Stat(k, "p99_ms").String(), g.Stat(k, "max_ms").String(), g.Stat(k, "e2e_p50_ms").String(), g.Stat(k, "e2e_p99_ms").String(), loadCell(g, k)})
		if series[sys] == nil {
			series[sys] = &Series{Name: sys}
			order = append(order, sys)
		}
		series[sys].X, series[sys].Y = append(series[sys].X, r.Num("readers")), append(series[sys].Y, g.Stat(k, "p99_ms"))
	}
	for _, n := range order {
		fig.Series = append(fig.Series, *series[n])
	}
	sec.printf("%s\n%s%s", t.Markdown(), rep.Stamp(fmt.Sprintf("4 ranks, %s per rank per step, a step every %s, %d steps, one run", latencySize, latencyInterval, e.o.LatencySteps)), commands(rows))
	sec.figure("latency-p99.png", fig)
	for _, readers := range latencyReaders {
		latencyHeadline(rep, g, float64(readers))
	}
}

// latencyHeadline is the summary line of one reader count.
func latencyHeadline(rep *Report, g *Group, readers float64) {
	stat := func(sys, metric string) Stat {
		for _, k := range g.Keys {
			if r := g.Rows[k]; r.Str("system") == sys && r.Num("readers") == readers {
				return g.Stat(k, metric)
			}
		}
		return Stat{}
	}
	h := Headline{Figure: fmt.Sprintf("consumer latency p99 ms, %v reader(s), lakefs-mount --wait on s3", readers),
		Lakestream: stat("mount", "p99_ms"), Peer: stat("nats", "p99_ms"), PeerName: "NATS pull consumer", Unit: "ms", LowerIsBetter: true}
	if h.Lakestream.N == 0 {
		h.MissingComment = "no consumer-latency rows: `bench read --follow` missing or failed"
	} else if h.Peer.N > 0 && h.Lakestream.Med > h.Peer.Med {
		rep.Losses = append(rep.Losses, fmt.Sprintf("Consumer latency, %v reader(s): lakefs-mount p99 %s ms vs the NATS pull consumer's %s ms (%s).",
			readers, num(h.Lakestream.Med), num(h.Peer.Med), Ratio(h.Lakestream.Med, h.Peer.Med)))
	}
	rep.Summary = append(rep.Summary, h)
}
