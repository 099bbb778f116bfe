package report

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarizeMedianAndRange(t *testing.T) {
	for _, c := range []struct {
		in            []float64
		med, min, max float64
	}{
		{[]float64{3, 1, 2}, 2, 1, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
		{[]float64{7}, 7, 7, 7},
	} {
		s := Summarize(c.in)
		if s.Med != c.med || s.Min != c.min || s.Max != c.max || s.N != len(c.in) {
			t.Errorf("Summarize(%v) = %+v, want med %v min %v max %v", c.in, s, c.med, c.min, c.max)
		}
	}
	if s := Summarize(nil); s.N != 0 || s.String() != "n/a" {
		t.Errorf("Summarize(nil) = %+v %q, want empty n/a", s, s.String())
	}
	if got := Summarize([]float64{250, 212.4, 301}).String(); got != "250 (212-301)" {
		t.Errorf("String = %q", got)
	}
	if got := Summarize([]float64{1.5, 1.5}).String(); got != "1.50" {
		t.Errorf("String of equal values = %q", got)
	}
}

func TestParseRowsSkipsNonJSON(t *testing.T) {
	out := []byte("progress line\n{\"strategy\":\"dac\",\"producers\":4,\"tgbs_per_s\":10.5}\n\n[1,2]\n{\"strategy\":\"dac\",\"producers\":4,\"tgbs_per_s\":12}\n")
	rows, skipped := ParseRows(out)
	if len(rows) != 2 || skipped != 2 {
		t.Fatalf("rows %d skipped %d, want 2 and 2", len(rows), skipped)
	}
	if rows[0].Str("strategy") != "dac" || rows[0].Num("tgbs_per_s") != 10.5 || rows[0].Num("missing") != 0 {
		t.Errorf("row 0 = %v", rows[0])
	}
}

func TestGroupRowsPerConfiguration(t *testing.T) {
	var rows []Row
	for rep, v := range []float64{10, 30, 20} {
		rows = append(rows, Row{"strategy": "dac", "producers": 4.0, "tgbs_per_s": v, "repeat": float64(rep)})
		rows = append(rows, Row{"strategy": "naive", "producers": 4.0, "tgbs_per_s": v / 10})
	}
	rows = append(rows, Row{"strategy": "dac", "producers": 16.0, "tgbs_per_s": 99.0})
	g := GroupRows(rows, "strategy", "producers")
	if len(g.Keys) != 3 {
		t.Fatalf("keys %v, want 3 in first-seen order", g.Keys)
	}
	if g.Keys[0] != "dac|4" || g.Keys[1] != "naive|4" || g.Keys[2] != "dac|16" {
		t.Errorf("keys %v", g.Keys)
	}
	if s := g.Stat("dac|4", "tgbs_per_s"); s.Med != 20 || s.Min != 10 || s.Max != 30 || s.N != 3 {
		t.Errorf("dac|4 = %+v", s)
	}
	dac := g.Filter(func(r Row) bool { return r.Str("strategy") == "dac" })
	if len(dac) != 2 {
		t.Errorf("filter dac = %v", dac)
	}
}

func TestTableAndFormatting(t *testing.T) {
	md := Table{Header: []string{"a", "b|c"}, Rows: [][]string{{"1", "2"}}}.Markdown()
	want := "| a | b\\|c |\n| --- | --- |\n| 1 | 2 |\n"
	if md != want {
		t.Errorf("Markdown =\n%s\nwant\n%s", md, want)
	}
	if got := Ratio(50, 200); got != "0.25x" {
		t.Errorf("Ratio = %q", got)
	}
	if got := Ratio(1, 0); got != "n/a" {
		t.Errorf("Ratio by 0 = %q", got)
	}
	for in, want := range map[float64]string{64 << 10: "64KiB", 1 << 20: "1MiB", 16 << 20: "16MiB", 1536: "1.5KiB", 10: "10B"} {
		if got := Bytes(in); got != want {
			t.Errorf("Bytes(%v) = %q, want %q", in, got, want)
		}
	}
	if got := percentile([]float64{5, 1, 4, 2, 3}, 50); got != 3 {
		t.Errorf("p50 = %v", got)
	}
	if got := percentile([]float64{5, 1, 4, 2, 3}, 99); got != 5 {
		t.Errorf("p99 = %v", got)
	}
}

func TestReportWritesMarkdownAndPlots(t *testing.T) {
	dir := t.TempDir()
	r := &Report{Env: Machine{CPU: "test cpu", Cores: 2, Memory: "1 GiB", Kernel: "6", Go: "go1", Commit: "abc"}, Date: time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC), Total: time.Minute}
	r.Summary = []Headline{
		{Figure: "ingest", Lakestream: Summarize([]float64{100, 90, 110}), Limit: Summarize([]float64{200}), LimitName: "raw-put", Peer: Summarize([]float64{400}), PeerName: "nats", Unit: "TGB/s"},
		{Figure: "read", MissingComment: "bench read missing"},
	}
	r.Losses = []string{"ingest loses to nats"}
	sec := &Section{Title: "Ingestion"}
	sec.printf("text\n\n")
	sec.figure("f.png", Figure{Title: "t", XLabel: "x", YLabel: "y", LogY: true, Series: []Series{
		{Name: "a", X: []float64{1, 4, 16}, Y: []Stat{Summarize([]float64{1, 2, 3}), Summarize([]float64{10, 12}), Summarize([]float64{0})}},
		{Name: "empty"},
	}})
	r.Sections = append(r.Sections, sec)
	if err := r.Write(dir); err != nil {
		t.Fatal(err)
	}
	png, err := os.ReadFile(filepath.Join(dir, "f.png"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(png, []byte("\x89PNG\r\n\x1a\n")) || len(png) < 1000 {
		t.Errorf("f.png is not a PNG (%d bytes)", len(png))
	}
	md, err := os.ReadFile(filepath.Join(dir, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| ingest | 100 (90-110) TGB/s | 200 TGB/s (raw-put) | 0.50x | 400 TGB/s (nats) | 0.25x |",
		"bench read missing", "- ingest loses to nats", "## 1. Ingestion", "![t](f.png)", "test cpu, 2 vCPU",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, md)
		}
	}
	if i, j := strings.Index(string(md), "## Summary"), strings.Index(string(md), "## 1."); i < 0 || i > j {
		t.Errorf("the summary is not first")
	}
}

// fixture is testdata/rows.json: a trimmed quick run with rows of every
// section.
func fixture(t *testing.T) *RunFile {
	t.Helper()
	f, err := LoadRunFile(filepath.Join("testdata", RowsFile))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// TestRenderFromRows: the report rendered from recorded rows alone has
// every section with a table, no empty figure or series, a figure for
// every summary line, the commands that reproduce the tables, and the
// load range; writing it makes REPORT.md and every PNG.
func TestRenderFromRows(t *testing.T) {
	f := fixture(t)
	rep := Render(f)
	if err := rep.Check(allSections); err != nil {
		t.Fatalf("report from %s:\n%v", RowsFile, err)
	}
	md := rep.Markdown()
	for _, want := range []string{
		"## Summary", "### Where Lakestream loses", "Projected duration before the run:",
		"1-minute load average when the points started:", "lakefs-bench ingest --json",
		"lakefs-bench read --follow", "lakefs-bench scale --cost", "file+50ms",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("REPORT.md lacks %q", want)
		}
	}
	var heads []string
	for _, h := range rep.Summary {
		heads = append(heads, h.Figure)
	}
	for _, want := range []string{"ingest TGB/s, 1MiB TGBs, 1 producers", "consumer latency p99 ms, 1 reader", "read MB/s, 4 reader", "$ per million steps"} {
		if !strings.Contains(strings.Join(heads, "\n"), want) {
			t.Errorf("summary lacks %q: %q", want, heads)
		}
	}
	dir := t.TempDir()
	if err := rep.Write(dir); err != nil {
		t.Fatal(err)
	}
	for _, s := range rep.Sections {
		for _, fig := range s.Figures {
			if _, err := os.Stat(filepath.Join(dir, fig.File)); err != nil {
				t.Errorf("figure %s not written: %v", fig.File, err)
			}
		}
	}
}

// TestCheckFailsOnMissingSection: without a section's rows the rendered
// report fails the check, naming the section.
func TestCheckFailsOnMissingSection(t *testing.T) {
	for _, drop := range []string{"latency", "cost", "ingest"} {
		f := fixture(t)
		f.Rows = filterRows(f.Rows, func(r Row) bool { return r.Str("section") != drop })
		f.Options.Sections = slices.DeleteFunc(slices.Clone(allSections), func(s string) bool { return s == drop })
		err := Render(f).Check(allSections)
		if err == nil || !strings.Contains(err.Error(), "section "+drop+" is missing") {
			t.Errorf("without %s rows: check says %v", drop, err)
		}
	}
	// Rows present but a series emptied: the figure's check fails too.
	rep := &Report{Sections: []*Section{{Title: sectionTitles["read"], Figures: []NamedFigure{{File: "x.png", Figure: Figure{Series: []Series{{Name: "mount"}}}}}}}}
	rep.Sections[0].printf("| a |\n| --- |\n| 1 |\n")
	if err := rep.Check([]string{"read"}); err == nil || !strings.Contains(err.Error(), `series "mount" is empty`) {
		t.Errorf("empty series: check says %v", err)
	}
}

// TestRunFromRowsFile: `report --from rows.json` renders without
// measuring (no binaries, no versitygw) and keeps the rows beside it.
func TestRunFromRowsFile(t *testing.T) {
	out := t.TempDir()
	var log bytes.Buffer
	if err := Run(t.Context(), Options{From: filepath.Join("testdata", RowsFile), OutDir: out, BinDir: "/nonexistent", Log: &log}); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(out, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "## 1. Ingestion vs producers") {
		t.Errorf("REPORT.md:\n%.400s", md)
	}
	if _, err := LoadRunFile(filepath.Join(out, RowsFile)); err != nil {
		t.Errorf("rows.json beside the report: %v", err)
	}
	if strings.Contains(log.String(), "incomplete") {
		t.Errorf("the fixture's report is incomplete: %s", log.String())
	}
}

// TestProjectionWithinBudget: the full run's projection stays within the
// 75 minutes make bench may take, and bench-quick's within 10.
func TestProjectionWithinBudget(t *testing.T) {
	var full Options
	full.fill()
	if d := Projection(&full); d > 75*time.Minute {
		t.Errorf("full run projected at %s, over 75m", d)
	}
	quick := Options{Quick: true, Windows: 1, Window: time.Second, Producers: []int{1, 4}, Payloads: []int64{1 << 20},
		Repeats: 1, LongRun: 3 * time.Second, LatencySteps: 10, CostWindow: 10 * time.Second}
	quick.fill()
	if d := Projection(&quick); d > 10*time.Minute {
		t.Errorf("bench-quick projected at %s, over 10m", d)
	}
}
