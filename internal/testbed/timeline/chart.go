package timeline

import (
	"fmt"
	"image/color"
	"io"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Colours of the series and markers; the legend names them.
var (
	weightColor = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	metricColor = color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff}
	markColors  = map[Kind]color.Color{
		KindCheck:       color.RGBA{R: 0x99, G: 0x99, B: 0x99, A: 0xff},
		KindFailedCheck: color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
		KindPromotion:   color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		KindRollback:    color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	}
	// markOrder is the legend's order of the markers.
	markOrder = []Kind{KindCheck, KindFailedCheck, KindPromotion, KindRollback}
)

// WriteSVG draws one panel per run, stacked: the canary weight and the metric (both in
// percent) over the seconds since the run started, with a vertical line at every marker.
func WriteSVG(w io.Writer, rec Recording) error {
	if len(rec.Runs) == 0 {
		return fmt.Errorf("timeline: nothing recorded")
	}
	const width, panelHeight = 20 * vg.Centimeter, 8 * vg.Centimeter
	canvas := vgsvg.New(width, panelHeight*vg.Length(len(rec.Runs)))
	plots := make([][]*plot.Plot, len(rec.Runs))
	for i, run := range rec.Runs {
		p, err := panel(run, rec.Metric)
		if err != nil {
			return fmt.Errorf("timeline: run %q: %w", run.Title, err)
		}
		plots[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(rec.Runs), Cols: 1, PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadX: vg.Millimeter * 2, PadY: vg.Millimeter * 4}
	canvases := plot.Align(plots, tiles, draw.New(canvas))
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	_, err := canvas.WriteTo(w)
	return err
}

func panel(run Run, metric string) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = run.Title
	p.X.Label.Text = "seconds since the apply started"
	p.Y.Label.Text = "percent"
	// Headroom above 100 % holds the legend, clear of the lines.
	p.Y.Min, p.Y.Max = 0, 190
	p.Y.Tick.Marker = plot.ConstantTicks([]plot.Tick{{Value: 0, Label: "0"}, {Value: 25}, {Value: 50, Label: "50"}, {Value: 75}, {Value: 100, Label: "100"}})
	p.X.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.Padding = vg.Millimeter
	p.Add(plotter.NewGrid())
	if err := addLine(p, run.Weight, weightColor, "canary weight (%)", true); err != nil {
		return nil, err
	}
	if err := addLine(p, run.Metric, metricColor, metric, false); err != nil {
		return nil, err
	}
	seen := map[Kind]bool{}
	for _, m := range run.Markers {
		line, err := plotter.NewLine(plotter.XYs{{X: m.At, Y: 0}, {X: m.At, Y: 100}})
		if err != nil {
			return nil, err
		}
		line.Color = markColors[m.Kind]
		line.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
		p.Add(line)
		seen[m.Kind] = true
	}
	for _, k := range markOrder {
		if seen[k] {
			legend, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: 0, Y: 0}})
			if err != nil {
				return nil, err
			}
			legend.Color = markColors[k]
			legend.Dashes = []vg.Length{vg.Points(3), vg.Points(2)}
			p.Legend.Add(string(k), legend)
		}
	}
	return p, nil
}

// addLine adds a series; stepped series (the weight) hold their value until the next point.
func addLine(p *plot.Plot, pts []Point, c color.Color, name string, stepped bool) error {
	if len(pts) < 2 {
		return nil // a single value draws nothing (a run that never moved traffic)
	}
	xys := make(plotter.XYs, len(pts))
	for i, pt := range pts {
		xys[i] = plotter.XY{X: pt.At, Y: pt.Value}
	}
	line, err := plotter.NewLine(xys)
	if err != nil {
		return err
	}
	line.Color = c
	line.Width = vg.Points(1.5)
	if stepped {
		line.StepStyle = plotter.PostStep
	}
	p.Add(line)
	p.Legend.Add(name, line)
	return nil
}
