// Package report is `make bench`: it runs the project's benchmark
// commands (bench ingest, bench read, bench scale, each with --json) and
// the peers they are compared with, side by side and repeated, and writes
// docs/bench/REPORT.md with tables (median and min-max over the repeats)
// and PNG plots. A bench command that does not exist in this build is
// named in the report as missing rather than failing the whole report.
package report

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
)

// Row is one JSON row of a bench command (or of a peer this package runs),
// kept as decoded so that fields added later pass through.
type Row map[string]any

// Num is the number under key (0 when absent or not a number).
func (r Row) Num(key string) float64 {
	if f, ok := r[key].(float64); ok {
		return f
	}
	return 0
}

// Str is the string under key ("" when absent).
func (r Row) Str(key string) string {
	s, _ := r[key].(string)
	return s
}

// ParseRows decodes JSON lines, skipping lines that are not JSON objects
// (progress a command may print); it reports how many it skipped.
func ParseRows(out []byte) (rows []Row, skipped int) {
	for _, line := range strings.Split(string(out), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		var r Row
		if err := json.Unmarshal([]byte(line), &r); err != nil || r == nil {
			skipped++
			continue
		}
		rows = append(rows, r)
	}
	return rows, skipped
}

// Stat is the median and range of one figure over repeated runs.
type Stat struct {
	Med, Min, Max float64
	N             int
}

// Summarize is the Stat of xs (N 0 when empty).
func Summarize(xs []float64) Stat {
	if len(xs) == 0 {
		return Stat{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return Stat{Med: m, Min: s[0], Max: s[len(s)-1], N: len(s)}
}

// String prints "median (min-max)" with a precision that suits the size.
func (s Stat) String() string {
	if s.N == 0 {
		return "n/a"
	}
	if s.N == 1 || s.Min == s.Max {
		return num(s.Med)
	}
	return fmt.Sprintf("%s (%s-%s)", num(s.Med), num(s.Min), num(s.Max))
}

func num(x float64) string {
	a := math.Abs(x)
	switch {
	case x == math.Trunc(x) && a < 1e15:
		return fmt.Sprintf("%.0f", x)
	case a >= 100:
		return fmt.Sprintf("%.0f", x)
	case a >= 10:
		return fmt.Sprintf("%.1f", x)
	case a >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}

// Key names a group of rows: the values of the fields that identify a
// configuration (strategy, producers, payload ...), in order.
type Key string

// KeyOf builds the key of r from fields.
func KeyOf(r Row, fields ...string) Key {
	parts := make([]string, len(fields))
	for i, f := range fields {
		switch v := r[f].(type) {
		case string:
			parts[i] = v
		case float64:
			parts[i] = fmt.Sprint(v)
		case bool:
			parts[i] = fmt.Sprint(v)
		default:
			parts[i] = ""
		}
	}
	return Key(strings.Join(parts, "|"))
}

// Group collects, per key of fields, the values of metric over the rows,
// in the order keys first appear.
type Group struct {
	Keys   []Key
	Rows   map[Key]Row // the first row of each key, for its identifying fields
	Values map[Key]map[string][]float64
}

// GroupRows groups rows by fields, keeping every numeric field's values.
func GroupRows(rows []Row, fields ...string) *Group {
	g := &Group{Rows: map[Key]Row{}, Values: map[Key]map[string][]float64{}}
	for _, r := range rows {
		k := KeyOf(r, fields...)
		if _, ok := g.Rows[k]; !ok {
			g.Keys = append(g.Keys, k)
			g.Rows[k] = r
			g.Values[k] = map[string][]float64{}
		}
		for f, v := range r {
			if x, ok := v.(float64); ok {
				g.Values[k][f] = append(g.Values[k][f], x)
			}
		}
	}
	return g
}

// Stat is the summary of metric for key k.
func (g *Group) Stat(k Key, metric string) Stat {
	return Summarize(g.Values[k][metric])
}

// Filter returns the keys whose first row satisfies keep.
func (g *Group) Filter(keep func(Row) bool) []Key {
	var ks []Key
	for _, k := range g.Keys {
		if keep(g.Rows[k]) {
			ks = append(ks, k)
		}
	}
	return ks
}

// Table is a Markdown table.
type Table struct {
	Header []string
	Rows   [][]string
}

// Markdown renders t.
func (t Table) Markdown() string {
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			b.WriteString(" " + strings.ReplaceAll(c, "|", "\\|") + " |")
		}
		b.WriteString("\n")
	}
	line(t.Header)
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range t.Rows {
		line(r)
	}
	return b.String()
}

// Ratio prints a/b as "0.42x" ("n/a" when either is missing).
func Ratio(a, b float64) string {
	if a == 0 || b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// Bytes prints a byte count in binary units (64KiB, 1MiB, 16MiB).
func Bytes(n float64) string {
	switch {
	case n >= 1<<30 && math.Mod(n, 1<<30) == 0:
		return fmt.Sprintf("%.0fGiB", n/(1<<30))
	case n >= 1<<20 && math.Mod(n, 1<<20) == 0:
		return fmt.Sprintf("%.0fMiB", n/(1<<20))
	case n >= 1<<10 && math.Mod(n, 1<<10) == 0:
		return fmt.Sprintf("%.0fKiB", n/(1<<10))
	case n >= 1<<20:
		return fmt.Sprintf("%.1fMiB", n/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1fKiB", n/(1<<10))
	}
	return fmt.Sprintf("%.0fB", n)
}

// percentile is the nearest-rank p-th percentile of xs (0 when empty), as
// the bench commands compute theirs.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}
