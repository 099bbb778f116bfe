package report

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// costArgs are the scale-and-cost run's parameters (docs/bench/COST.md's
// deployment: 1,024 ranks, mounts of 8 adjacent ranks each).
func costArgs(o *Options) []string {
	if o.Quick {
		return []string{"--ranks", "64", "--files", "1", "--nodes", "2", "--node-ranks", "8", "--window", o.CostWindow.String()}
	}
	return []string{"--ranks", "1024", "--files", "1", "--nodes", "8", "--node-ranks", "8", "--window", o.CostWindow.String()}
}

// measureCost runs `lakefs-bench scale --cost --json` (bench/scale/cost.go)
// on versitygw and keeps its rows.
func (e *env) measureCost(ctx context.Context) ([]Row, error) {
	if !e.has(ctx, "scale", "--cost") {
		return []Row{{"note": "`lakefs-bench scale --cost` does not exist in this build; the cost figures are missing."}}, nil
	}
	bucket, err := e.newBucket(ctx, "cost")
	if err != nil {
		return nil, err
	}
	args := append([]string{"scale", "--cost", "--json", "--store", e.s3.URL(bucket, "cost"),
		"--mount-bin", filepath.Join(filepath.Dir(e.produce), "lakefs-mount")}, costArgs(e.o)...)
	rows, err := e.bench(ctx, e.o.CostWindow+3*time.Minute, args...)
	if err != nil {
		rows = append(rows, Row{"note": fmt.Sprintf("bench scale --cost failed or was cut: %v", err)})
	}
	return rows, nil
}

// renderCost writes the scale-and-cost section and its headline: dollars
// per million steps against the floor docs/bench/COST.md derives.
func (e *env) renderCost(rep *Report, rows []Row, notes []string) {
	sec := &Section{Title: "Scale and cost: a million steps in S3 requests"}
	rep.Sections = append(rep.Sections, sec)
	sec.printf("`lakefs-bench scale --cost` (bench/scale/cost.go; method and floor in [COST.md](COST.md)): a producer commits a step of 1,024 ranks a second while 8 lakefs-mount processes, each showing 8 adjacent ranks, follow the head and read every file of their ranks of each step; counting proxies split the requests by kind, per node per step, priced for 128 nodes at one step a second at S3 Standard list prices, beside the floor (per step 2 PUTs, per node 3 GETs).\n\n")
	for _, n := range notes {
		sec.printf("Note: %s\n\n", n)
	}
	t := Table{Header: []string{"build", "index GETs", "data GETs", "log GETs", "log LISTs", "heartbeat PUTs/min", "seen p50 ms", "seen p99 ms", "$ per 1M steps", "floor $", "ratio to floor", "load"}}
	h := Headline{LimitName: "floor", PeerName: "none measured", Unit: "$", LowerIsBetter: true}
	for _, r := range rows {
		if r.Str("kind") != "cost" {
			continue
		}
		c, _ := r["cost"].(map[string]any)
		total, _ := c["total"].(float64)
		t.Rows = append(t.Rows, []string{r.Str("build"), num(r.Num("index_gets_per_node_step")), num(r.Num("data_gets_per_node_step")),
			num(r.Num("log_gets_per_node_step")), num(r.Num("log_lists_per_node_step")), num(r.Num("heartbeat_puts_per_node_min")),
			num(r.Num("seen_p50_ms")), num(r.Num("seen_p99_ms")), num(total), num(r.Num("floor")), num(r.Num("ratio_to_floor")), cell(r["load1"], "load1")})
		if r.Str("build") == "this build" || h.Lakestream.N == 0 {
			h.Lakestream, h.Limit = Summarize([]float64{total}), Summarize([]float64{r.Num("floor")})
			h.Figure = fmt.Sprintf("$ per million steps, %s ranks, %s nodes, 1 step/s", num(r.Num("ranks")), num(r.Num("deploy_nodes")))
		}
	}
	sec.printf("Per node per step unless named otherwise.\n\n%s\n", t.Markdown())
	sec.printf("%s%s", rep.Stamp(fmt.Sprint(costArgs(e.o))), commands(rows))
	if h.Lakestream.N == 0 {
		h.Figure = "$ per million steps"
		h.MissingComment = "no cost rows: `bench scale --cost` missing or failed"
	} else if h.Lakestream.Med > 2*h.Limit.Med {
		rep.Losses = append(rep.Losses, fmt.Sprintf("Cost: $%s per million steps, %s the floor of $%s.", num(h.Lakestream.Med), Ratio(h.Lakestream.Med, h.Limit.Med), num(h.Limit.Med)))
	}
	rep.Summary = append(rep.Summary, h)
}
