package report

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// Series is one line of a figure: a median per x with its min-max range.
type Series struct {
	Name string
	X    []float64
	Y    []Stat
}

// Figure is one PNG.
type Figure struct {
	Title, XLabel, YLabel string
	LogY                  bool // for figures whose series differ by orders of magnitude
	Series                []Series
}

// Save draws f to path as a PNG (6x4 in): each series a line through its
// medians, with error bars from min to max.
func (f Figure) Save(path string) error {
	p := plot.New()
	p.Title.Text = f.Title
	p.X.Label.Text = f.XLabel
	p.Y.Label.Text = f.YLabel
	p.Add(plotter.NewGrid())
	if f.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	p.Legend.Top = true
	for i, s := range f.Series {
		pts := make(plotter.XYs, 0, len(s.X))
		errs := make(plotter.YErrors, 0, len(s.X))
		for j, x := range s.X {
			y := s.Y[j]
			if y.N == 0 || (f.LogY && y.Med <= 0) {
				continue
			}
			lo, hi := y.Med-y.Min, y.Max-y.Med
			if f.LogY && y.Min <= 0 {
				lo = 0
			}
			pts = append(pts, plotter.XY{X: x, Y: y.Med})
			errs = append(errs, struct{ Low, High float64 }{lo, hi})
		}
		if len(pts) == 0 {
			continue
		}
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return fmt.Errorf("plot %s, series %s: %w", f.Title, s.Name, err)
		}
		c := plotutil.Color(i)
		line.Color, points.Color = c, c
		points.Shape = plotutil.Shape(i)
		line.Dashes = plotutil.Dashes(i / 7)
		bars, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{pts, errs})
		if err != nil {
			return fmt.Errorf("plot %s, series %s: %w", f.Title, s.Name, err)
		}
		bars.Color = withAlpha(c, 160)
		p.Add(line, points, bars)
		p.Legend.Add(s.Name, line, points)
	}
	if err := p.Save(6*vg.Inch, 4*vg.Inch, path); err != nil {
		return fmt.Errorf("saving %s: %w", path, err)
	}
	return nil
}

func withAlpha(c color.Color, a uint8) color.Color {
	r, g, b, _ := c.RGBA()
	return color.NRGBA{R: uint8(r >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: a}
}
