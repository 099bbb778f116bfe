package report

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// RunFile is rows.json: every measured row of a run and what the report
// needs besides them, so that `report --from rows.json` renders the same
// report without measuring.
type RunFile struct {
	Options   Options
	Machine   Machine
	Date      time.Time
	Total     time.Duration
	Projected time.Duration
	Elapsed   []string
	// Rows carry "section" (the section that measured them) and "load1"
	// (the 1-minute load average when their point started); a row with
	// "note" is a remark of that section (a failed run, a cut repeat).
	Rows []Row
}

// RowsFile is the name of the rows file beside REPORT.md.
const RowsFile = "rows.json"

// Save writes f as indented JSON to path.
func (f *RunFile) Save(path string) error {
	b, err := json.MarshalIndent(f, "", " ")
	if err != nil {
		return fmt.Errorf("encoding %s: %w", path, err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing rows: %w", err)
	}
	return nil
}

// LoadRunFile reads a rows.json written by Save.
func LoadRunFile(path string) (*RunFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading rows: %w", err)
	}
	var f RunFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("decoding %s: %w", path, err)
	}
	if len(f.Rows) == 0 {
		return nil, fmt.Errorf("%s holds no rows", path)
	}
	return &f, nil
}

// section is the measured rows of sec, notes left out, and its notes.
func (f *RunFile) section(sec string) (rows []Row, notes []string) {
	for _, r := range f.Rows {
		if r.Str("section") != sec {
			continue
		}
		if n := r.Str("note"); n != "" {
			notes = append(notes, n)
			continue
		}
		rows = append(rows, r)
	}
	return rows, notes
}

// Render builds the report from f's rows alone.
func Render(f *RunFile) *Report {
	o := f.Options
	o.fill()
	e := &env{o: &o}
	rep := &Report{Env: f.Machine, Date: f.Date, Total: f.Total, Projected: f.Projected, Elapsed: f.Elapsed, Quick: o.Quick}
	rep.LoadMin, rep.LoadMax, rep.Busy = loadRange(f.Rows)
	for _, sec := range o.Sections {
		rows, notes := f.section(sec)
		for _, n := range notes {
			rep.Notes = append(rep.Notes, fmt.Sprintf("%s: %s", sec, n))
		}
		switch sec {
		case "ingest":
			e.renderIngest(rep, rows)
		case "dac":
			e.renderDAC(rep, rows)
		case "latency":
			e.renderLatency(rep, rows, notes)
		case "read":
			e.renderRead(rep, rows, notes)
		case "storage":
			e.renderStorage(rep, rows)
		case "scale":
			e.renderScale(rep, rows, notes)
		case "cost":
			e.renderCost(rep, rows, notes)
		}
	}
	return rep
}

// busyLoad is the 1-minute load average above which a point is marked:
// on this 2-core machine the benchmark itself keeps about one core busy.
const busyLoad = 1.0

// loadRange is the lowest and highest load1 over rows and how many
// distinct points started above busyLoad.
func loadRange(rows []Row) (lo, hi float64, busy int) {
	lo = math.Inf(1)
	seen := map[string]bool{}
	for _, r := range rows {
		l, ok := r["load1"].(float64)
		if !ok {
			continue
		}
		lo, hi = min(lo, l), max(hi, l)
		k := fmt.Sprint(r.Str("section"), r.Str("command"), r.Str("strategy"), r.Num("producers"), r.Num("payload_bytes"), r.Str("system"), r.Num("readers"))
		if l > busyLoad && !seen[k] {
			seen[k] = true
			busy++
		}
	}
	if math.IsInf(lo, 1) {
		lo = 0
	}
	return lo, hi, busy
}

// loadCell is the load column of a point: its highest load1, marked
// "busy" above busyLoad.
func loadCell(g *Group, k Key) string {
	l := g.Stat(k, "load1")
	if l.N == 0 {
		return "n/a"
	}
	if l.Max > busyLoad {
		return fmt.Sprintf("**%s busy**", num(l.Max))
	}
	return num(l.Max)
}

// commands lists the distinct "command" fields of rows as Markdown code
// lines: what reproduces a table.
func commands(rows []Row) string {
	var out []string
	seen := map[string]bool{}
	for _, r := range rows {
		if c := r.Str("command"); c != "" && !seen[c] {
			seen[c] = true
			out = append(out, "    "+c)
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "Reproduce (the harness sets AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION for versitygw):\n\n" + strings.Join(out, "\n") + "\n\n"
}

// saveRun writes f as rows.json under dir.
func saveRun(f *RunFile, dir string) error {
	return f.Save(filepath.Join(dir, RowsFile))
}

// loads are the load1 values of rows.
func loads(rows []Row) []float64 {
	var out []float64
	for _, r := range rows {
		if l, ok := r["load1"].(float64); ok {
			out = append(out, l)
		}
	}
	return out
}
