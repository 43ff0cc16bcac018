package main

import (
	"encoding/json"
	"fmt"
	"image/color"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// waitColors tell the categories apart (in waitCategories' order); "other" is grey.
var waitColors = []color.Color{
	color.RGBA{0x8c, 0x56, 0x4b, 0xff}, // plan
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, // terraform
	color.RGBA{0x7f, 0x00, 0x00, 0xff}, // lock
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, // provider
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, // controller
	color.RGBA{0xff, 0x7f, 0x0e, 0xff}, // pods
	color.RGBA{0xff, 0xbb, 0x78, 0xff}, // notice
	color.RGBA{0x17, 0xbe, 0xcf, 0xff}, // router
	color.RGBA{0xbc, 0xbd, 0x22, 0xff}, // metric
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, // drain
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, // analysis
	color.RGBA{0xc7, 0xc7, 0xc7, 0xff}, // after
	color.RGBA{0x40, 0x40, 0x40, 0xff}, // other
}

// breakdownChart is the stacked chart of one apply and its legend, drawn beside it.
type breakdownChart struct {
	plot   *plot.Plot
	legend plot.Legend
}

// breakdownPlot stacks each release's waits into one bar, the releases sorted by their
// verdict (total minus "after"), so the chart shows which waits grow with a release's place
// in the queue.
func breakdownPlot(title string, bs []releaseBreakdown) (breakdownChart, error) {
	sorted := slices.Clone(bs)
	slices.SortStableFunc(sorted, func(a, b releaseBreakdown) int {
		return int((a.total - a.by[waitAfter]) - (b.total - b.by[waitAfter]))
	})
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "releases, by the time of their verdict"
	p.Y.Label.Text = "seconds since the apply started"
	p.Y.Min = 0
	legend := plot.NewLegend()
	legend.Top = true
	// The bars fill about two thirds of the plot's width, at most 1 cm each.
	width := min(vg.Centimeter, 140*vg.Millimeter/vg.Length(max(1, len(sorted))))
	var below *plotter.BarChart
	for i, c := range waitCategories {
		values := make(plotter.Values, len(sorted))
		for j, b := range sorted {
			values[j] = max(0, b.by[c].Seconds())
		}
		bars, err := plotter.NewBarChart(values, width)
		if err != nil {
			return breakdownChart{}, err
		}
		bars.Color = waitColors[i%len(waitColors)]
		bars.LineStyle.Width = 0
		if below != nil {
			bars.StackOn(below)
		}
		p.Add(bars)
		below = bars
	}
	// The legend lists the categories top down as they stack bottom up.
	for i := len(waitCategories) - 1; i >= 0; i-- {
		legend.Add(string(waitCategories[i]), legendSwatch{waitColors[i%len(waitColors)]})
	}
	p.Add(plotter.NewGrid())
	return breakdownChart{plot: p, legend: legend}, nil
}

// legendSwatch is a category's colour in the legend.
type legendSwatch struct{ c color.Color }

func (s legendSwatch) Thumbnail(c *draw.Canvas) {
	c.FillPolygon(s.c, []vg.Point{{X: c.Min.X, Y: c.Min.Y}, {X: c.Min.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Max.Y}, {X: c.Max.X, Y: c.Min.Y}})
}

// writeBreakdownCharts draws the latest run of each many-release scenario, and writes every
// release of every run beside it as JSON (breakdown-<label>.json) for a closer look; it
// returns the charts' paths by scenario label.
func (b *bench) writeBreakdownCharts() (map[string]string, error) {
	paths := map[string]string{}
	for label, runs := range b.res.breakdowns {
		if len(runs) == 0 || len(runs[len(runs)-1]) == 0 {
			continue
		}
		last := runs[len(runs)-1]
		chart, err := breakdownPlot(fmt.Sprintf("Where each release's time went: %s, %d releases in one apply", label, len(last)), last)
		if err != nil {
			return paths, err
		}
		path := filepath.Join(filepath.Dir(b.work), fmt.Sprintf("breakdown-%s.svg", label))
		if err := chart.writeSVG(path, 24*vg.Centimeter, 12*vg.Centimeter); err != nil {
			return paths, err
		}
		paths[label] = path
		if err := writeBreakdownJSON(strings.TrimSuffix(path, ".svg")+".json", runs); err != nil {
			return paths, err
		}
	}
	return paths, nil
}

// breakdownRecord is one release of one run in breakdown-<label>.json.
type breakdownRecord struct {
	Run       int                `json:"run"`
	Namespace string             `json:"namespace"`
	TotalS    float64            `json:"total_s"`
	Seconds   map[string]float64 `json:"seconds"`
	Missing   []string           `json:"missing,omitempty"`
}

func writeBreakdownJSON(path string, runs [][]releaseBreakdown) error {
	var out []breakdownRecord
	for i, run := range runs {
		for _, b := range run {
			r := breakdownRecord{Run: i + 1, Namespace: b.namespace, TotalS: b.total.Seconds(), Seconds: map[string]float64{}, Missing: b.missing}
			for _, c := range waitCategories {
				r.Seconds[string(c)] = b.by[c].Seconds()
			}
			out = append(out, r)
		}
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, data, 0o644)
}

// writeSVG renders the chart to an SVG file at path.
func (ch breakdownChart) writeSVG(path string, w, h vg.Length) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := ch.render(f, w, h); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// legendWidth is the room the legend takes at the chart's right.
const legendWidth = 3 * vg.Centimeter

// render draws the plot, and its legend to the right of it.
func (ch breakdownChart) render(out io.Writer, w, h vg.Length) error {
	canvas := vgsvg.New(w, h)
	ch.draw(draw.New(canvas))
	_, err := canvas.WriteTo(out)
	return err
}

func (ch breakdownChart) draw(dc draw.Canvas) {
	ch.plot.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	ch.legend.Draw(draw.Crop(dc, dc.Max.X-legendWidth+3*vg.Millimeter, 0, 0, -vg.Centimeter))
}
