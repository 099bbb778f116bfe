package report

import (
	"errors"
	"fmt"
)

// sectionTitles are the titles the sections render under.
var sectionTitles = map[string]string{
	"ingest":  "Ingestion vs producers",
	"dac":     "DAC over time",
	"latency": "Consumer latency at the head",
	"read":    "Read path",
	"storage": "Storage over a checkpointed run",
	"scale":   "Scale",
	"cost":    "Scale and cost: a million steps in S3 requests",
}

// Check reports what a rendered report lacks: a section of sections that
// is missing or has no table rows, a figure without series or a series
// without points, a summary line without Lakestream's figure. Run prints
// it; the tests hold the rendering to it.
func (r *Report) Check(sections []string) error {
	var errs []error
	have := map[string]*Section{}
	for _, s := range r.Sections {
		have[s.Title] = s
	}
	for _, sec := range sections {
		s := have[sectionTitles[sec]]
		switch {
		case s == nil:
			errs = append(errs, fmt.Errorf("section %s is missing", sec))
			continue
		case !hasTableRow(s.Body.String()):
			errs = append(errs, fmt.Errorf("section %s has no table rows", sec))
		}
		for _, f := range s.Figures {
			if len(f.Series) == 0 {
				errs = append(errs, fmt.Errorf("section %s: figure %s has no series", sec, f.File))
			}
			for _, ser := range f.Series {
				if len(ser.X) == 0 {
					errs = append(errs, fmt.Errorf("section %s: figure %s: series %q is empty", sec, f.File, ser.Name))
				}
			}
		}
	}
	for _, h := range r.Summary {
		if h.MissingComment != "" || h.Lakestream.N == 0 {
			errs = append(errs, fmt.Errorf("summary %q has no figure: %s", h.Figure, h.MissingComment))
		}
	}
	return errors.Join(errs...)
}

// hasTableRow reports whether body holds a Markdown table with a row
// below its header.
func hasTableRow(body string) bool {
	rows := 0
	for _, l := range splitLines(body) {
		if len(l) > 0 && l[0] == '|' {
			rows++
		} else {
			if rows >= 3 { // header, separator, a row
				return true
			}
			rows = 0
		}
	}
	return rows >= 3
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range len(s) {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
