package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"path/filepath"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/timeline"
)

// chartRun is one side of the side-by-side chart: the canary weight over time, from the image
// change, and when the release ended (Succeeded, or the apply's exit).
type chartRun struct {
	weights []timeline.Point
	end     time.Duration
}

// sideBySide holds one run of each side: the one nearest the side's median.
type sideBySide struct {
	ours, flagger chartRun
}

// nearestMedian picks the run whose end is nearest the median end; none from no runs.
func nearestMedian(runs []chartRun) chartRun {
	var best chartRun
	ends := make([]float64, len(runs))
	for i, r := range runs {
		ends[i] = r.end.Seconds()
	}
	m := median(ends)
	for i, r := range runs {
		if i == 0 || math.Abs(r.end.Seconds()-m) < math.Abs(best.end.Seconds()-m) {
			best = r
		}
	}
	return best
}

// splitWeights are the canary weights of the TrafficSplit named split, in seconds since start.
func splitWeights(obs []observation, split string, start time.Time) []timeline.Point {
	var pts []timeline.Point
	for _, o := range obs {
		if o.kind != "TrafficSplit" || o.name != split || o.canaryWeight < 0 {
			continue
		}
		at := max(0, o.at.Sub(start).Seconds())
		if n := len(pts); n > 0 && pts[n-1].Value == float64(o.canaryWeight) {
			continue
		}
		pts = append(pts, timeline.Point{At: at, Value: float64(o.canaryWeight)})
	}
	return pts
}

// Colours of the two sides.
var (
	flaggerColor = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	oursColor    = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
)

// plot draws both sides on one time axis: each side's canary weight as a stepped line, held
// until its end, and a dashed vertical line where it ended.
func (s sideBySide) plot() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = "The same release, N=5 steps of 10 s, same stack, same run (the runs nearest the medians)"
	p.X.Label.Text = "seconds since the image change"
	p.Y.Label.Text = "canary weight (%)"
	p.X.Min, p.Y.Min, p.Y.Max = 0, 0, 100
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.YOffs = -2 * vg.Millimeter
	p.Add(plotter.NewGrid())
	for _, side := range []struct {
		name string
		run  chartRun
		c    color.Color
	}{
		{fmt.Sprintf("Flagger %s: Succeeded after %.1f s", flaggerVersion, s.flagger.end.Seconds()), s.flagger, flaggerColor},
		{fmt.Sprintf("canary_release: terraform apply done after %.1f s", s.ours.end.Seconds()), s.ours, oursColor},
	} {
		xys := make(plotter.XYs, 0, len(side.run.weights)+1)
		for _, pt := range side.run.weights {
			xys = append(xys, plotter.XY{X: pt.At, Y: pt.Value})
		}
		if n := len(xys); n > 0 {
			xys = append(xys, plotter.XY{X: side.run.end.Seconds(), Y: xys[n-1].Y})
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return nil, err
		}
		line.Color, line.Width, line.StepStyle = side.c, vg.Points(1.5), plotter.PostStep
		end, err := plotter.NewLine(plotter.XYs{{X: side.run.end.Seconds(), Y: 0}, {X: side.run.end.Seconds(), Y: 60}})
		if err != nil {
			return nil, err
		}
		end.Color, end.Dashes = side.c, []vg.Length{vg.Points(3), vg.Points(2)}
		p.Add(line, end)
		p.Legend.Add(side.name, line)
	}
	return p, nil
}

// writeChart draws the side-by-side chart when both sides were recorded; it returns the path.
func (b *bench) writeChart() (string, error) {
	s := sideBySide{ours: nearestMedian(b.oursRuns), flagger: nearestMedian(b.flaggerRuns)}
	if len(s.ours.weights) == 0 || len(s.flagger.weights) == 0 {
		return "", nil
	}
	path := b.opts.chart
	if path == "" {
		path = filepath.Join(filepath.Dir(b.work), "side-by-side.svg")
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := s.writeSVG(f); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// writeSVG renders the chart with gonum/plot's SVG backend.
func (s sideBySide) writeSVG(w io.Writer) error {
	p, err := s.plot()
	if err != nil {
		return err
	}
	canvas := vgsvg.New(20*vg.Centimeter, 10*vg.Centimeter)
	p.Draw(draw.New(canvas))
	_, err = canvas.WriteTo(w)
	return err
}
