package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// breakdownPlot stacks each release's waits into one bar, the releases sorted by their
// verdict (total minus "after"), so the chart shows which waits grow with a release's place
// in the queue.
func breakdownPlot(title string, bs []releaseBreakdown) (*plot.Plot, error) {
	sorted := slices.Clone(bs)
	slices.SortStableFunc(sorted, func(a, b releaseBreakdown) int {
		return int((a.total - a.by[waitAfter]) - (b.total - b.by[waitAfter]))
	})
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "releases, by the time of their verdict"
	p.Y.Label.Text = "seconds since the apply started"
	p.Legend.Top, p.Legend.Left = true, true
	p.Y.Min = 0
	width := vg.Length(max(1, 480/max(1, len(sorted)))) * vg.Millimeter / 3
	var below *plotter.BarChart
	for i, c := range waitCategories {
		values := make(plotter.Values, len(sorted))
		for j, b := range sorted {
			values[j] = max(0, b.by[c].Seconds())
		}
		bars, err := plotter.NewBarChart(values, width)
		if err != nil {
			return nil, err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		if below != nil {
			bars.StackOn(below)
		}
		p.Add(bars)
		p.Legend.Add(string(c), bars)
		below = bars
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

// writeBreakdownCharts draws the latest run of each many-release scenario; it returns the
// paths by scenario label.
func (b *bench) writeBreakdownCharts() (map[string]string, error) {
	paths := map[string]string{}
	for label, runs := range b.res.breakdowns {
		if len(runs) == 0 || len(runs[len(runs)-1]) == 0 {
			continue
		}
		last := runs[len(runs)-1]
		p, err := breakdownPlot(fmt.Sprintf("Where each release's time went: %s, %d releases in one apply", label, len(last)), last)
		if err != nil {
			return paths, err
		}
		path := filepath.Join(filepath.Dir(b.work), fmt.Sprintf("breakdown-%s.svg", label))
		if err := writePlotSVG(p, path, 24*vg.Centimeter, 12*vg.Centimeter); err != nil {
			return paths, err
		}
		paths[label] = path
	}
	return paths, nil
}

// writePlotSVG renders p to an SVG file at path.
func writePlotSVG(p *plot.Plot, path string, w, h vg.Length) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := renderSVG(p, f, w, h); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func renderSVG(p *plot.Plot, out io.Writer, w, h vg.Length) error {
	canvas := vgsvg.New(w, h)
	p.Draw(draw.New(canvas))
	_, err := canvas.WriteTo(out)
	return err
}
