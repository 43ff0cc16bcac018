package main

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// median of the samples; NaN when there are none. The samples are not reordered.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
}

// spread returns the smallest and largest sample (NaN, NaN when there are none).
func spread(xs []float64) (lo, hi float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	return slices.Min(xs), slices.Max(xs)
}

// rawRatio is the apply's wall time over the analysis time it asked for (steps × interval).
func rawRatio(wall time.Duration, steps int, interval time.Duration) float64 {
	analysis := time.Duration(steps) * interval
	if analysis <= 0 {
		return math.NaN()
	}
	return wall.Seconds() / analysis.Seconds()
}

// overheadRatio is rawRatio without the time the cluster took to make the canary and the
// promoted primary Ready: what is left is the provider's and Terraform's own cost.
func overheadRatio(wall, canaryWait, primaryWait time.Duration, steps int, interval time.Duration) float64 {
	return rawRatio(wall-canaryWait-primaryWait, steps, interval)
}

// perUnit divides a counter delta by releases × steps; NaN when either is zero.
func perUnit(delta float64, releases, steps int) float64 {
	if releases <= 0 || steps <= 0 {
		return math.NaN()
	}
	return delta / float64(releases*steps)
}

// figure is one named result with its samples.
type figure struct {
	key     string
	samples []float64
}

// keyValueLine renders the final machine-readable line: key=value pairs in the given order,
// each value the median of its samples with two decimals, "nan" when it has none.
func keyValueLine(figs []figure) string {
	parts := make([]string, 0, len(figs))
	for _, f := range figs {
		parts = append(parts, f.key+"="+formatNumber(median(f.samples)))
	}
	return strings.Join(parts, " ")
}

func formatNumber(v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "nan"
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}

func withUnit(v float64, unit string) string {
	if math.IsNaN(v) {
		return "-"
	}
	return formatNumber(v) + unit
}

// goal is an upper bound a figure should stay under; zero means none.
type goal struct {
	max  float64
	text string
}

// verdict says whether the median meets the goal.
func (g goal) verdict(v float64) string {
	switch {
	case g.text == "":
		return ""
	case math.IsNaN(v) || math.IsNaN(g.max):
		return "not measured"
	case v <= g.max:
		return "met"
	}
	return "MISSED"
}

// row is one line of the printed table.
type row struct {
	fig     figure
	unit    string
	flagger string
	goal    goal
	note    string
}

// table renders the rows as aligned text: figure, median, min–max, runs, Flagger, goal.
func table(rows []row) string {
	header := []string{"figure", "median", "min..max", "n", "flagger v1.44", "goal", "verdict", "note"}
	lines := [][]string{header}
	for _, r := range rows {
		m := median(r.fig.samples)
		lo, hi := spread(r.fig.samples)
		lines = append(lines, []string{
			r.fig.key, withUnit(m, r.unit), formatNumber(lo) + ".." + formatNumber(hi),
			strconv.Itoa(len(r.fig.samples)), r.flagger, r.goal.text, r.goal.verdict(m), r.note,
		})
	}
	widths := make([]int, len(header))
	for _, l := range lines {
		for i, c := range l {
			widths[i] = max(widths[i], len(c))
		}
	}
	var b strings.Builder
	for n, l := range lines {
		var line strings.Builder
		for i, c := range l {
			fmt.Fprintf(&line, "%-*s  ", widths[i], c)
		}
		b.WriteString(strings.TrimRight(line.String(), " ") + "\n")
		if n == 0 {
			total := -2
			for _, w := range widths {
				total += w + 2
			}
			b.WriteString(strings.Repeat("-", total) + "\n")
		}
	}
	return b.String()
}
