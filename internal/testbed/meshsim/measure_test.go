package meshsim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/metrics/judge"
)

// judgeSetting is how a measured analysis reads the two sides.
type judgeSetting struct {
	name                  string
	canaryRPS, primaryRPS float64
	interval              time.Duration // the metric's interval: a ratio's window, mann-whitney's span
	samples               int           // mann-whitney's samples per side, each over interval/samples
	cfg                   judge.Config
}

// failShare runs analyses seeded analyses of a canary slowdown times the primary's p99 and
// returns the share that failed.
func failShare(d builtinDuration, s judgeSetting, primary, slowdown float64, analyses int) float64 {
	failed := 0
	for seed := range uint64(analyses) {
		cp, pp := lognormalPod(seed, "canary", slowdown*primary), lognormalPod(seed, "primary", primary)
		var v judge.Verdict
		if s.samples == 0 {
			v = judge.Ratio(s.cfg, d.read(cp, int(s.canaryRPS*s.interval.Seconds())), d.read(pp, int(s.primaryRPS*s.interval.Seconds())))
		} else {
			step := s.interval.Seconds() / float64(s.samples)
			var c, p []float64
			for range s.samples {
				c = append(c, d.read(cp, int(s.canaryRPS*step)))
				p = append(p, d.read(pp, int(s.primaryRPS*step)))
			}
			v = judge.MannWhitney(s.cfg, finite(c), finite(p))
		}
		if v.Outcome == judge.Fail {
			failed++
		}
	}
	return float64(failed) / float64(analyses)
}

func finite(x []float64) []float64 {
	var out []float64
	for _, v := range x {
		if v == v { // not NaN: a step without requests, which a range query leaves out
			out = append(out, v)
		}
	}
	return out
}

// TestMeasureJudgeOnTheSimulatorsLatency measures the judge's false positives (an equal
// canary) and power (a canary 30 % slower) on the simulator's latency model, read through the
// built-in request-duration queries: Envoy's p99 (OSM, Istio, Gloo, Contour, Knative) and a
// mean (ingress-nginx, Skipper). The traffic is the docs' measure's: 10 % of 50 req/s on the
// canary, over a 1m metric interval. The figures are quoted in the docs
// (templates/resources/release.md.tmpl, templates/guides/migrating-from-flagger.md.tmpl).
//
//	go test ./internal/testbed/meshsim -run TestMeasureJudgeOnTheSimulatorsLatency -v
func TestMeasureJudgeOnTheSimulatorsLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement")
	}
	const analyses = 1000
	ratio := func(maxRatio float64) judge.Config {
		return judge.Config{Method: judge.MethodRatio, Direction: judge.DirectionIncrease, MaxRatio: maxRatio}
	}
	mw := func(maxRatio float64) judge.Config {
		return judge.Config{Method: judge.MethodMannWhitney, Direction: judge.DirectionIncrease, MaxRatio: maxRatio, Confidence: 0.95}
	}
	settings := []judgeSetting{
		{"ratio, max_ratio 1.2, one 1m window", 5, 45, time.Minute, 0, ratio(1.2)},
		{"mann-whitney, 10 samples, max_ratio 1.1", 5, 45, time.Minute, 10, mw(1.1)},
		{"mann-whitney, 10 samples, max_ratio 1.2", 5, 45, time.Minute, 10, mw(1.2)},
	}
	envoy := builtinDuration{metric: MetricEnvoyRequestTime, buckets: EnvoyBuckets}
	mean := builtinDuration{metric: MetricNginxDuration, mean: true}
	var out strings.Builder
	fmt.Fprintf(&out, "%-42s %-9s %7s  %s\n", "judge", "reads", "primary", "false positives / power on +30 %")
	for _, s := range settings {
		for _, d := range []struct {
			name string
			d    builtinDuration
		}{{"Envoy p99", envoy}, {"mean", mean}} {
			for _, primary := range []float64{20, 100, 180} {
				fp, power := failShare(d.d, s, primary, 1, analyses), failShare(d.d, s, primary, 1.3, analyses)
				fmt.Fprintf(&out, "%-42s %-9s %5gms  %5.1f %% / %5.1f %%\n", s.name, d.name, primary, 100*fp, 100*power)
			}
		}
	}
	// The judge acceptance test's analysis on the local stack: 10 % of the simulator's default
	// 20 req/s on the canary, a 15 s metric interval, max_ratio 1.5, a canary twice as slow.
	stack := []judgeSetting{
		{"stack: ratio, max_ratio 1.5, one 15s window", 2, 18, 15 * time.Second, 0, ratio(1.5)},
		{"stack: mann-whitney, 5 samples, max_ratio 1.5", 2, 18, 15 * time.Second, 5, mw(1.5)},
	}
	fmt.Fprintf(&out, "%-42s %-9s %7s  %s\n", "judge (one check)", "reads", "primary", "false positives / power on 2x")
	for _, s := range stack {
		for _, primary := range []float64{50, 100} {
			fp, power := failShare(envoy, s, primary, 1, analyses), failShare(envoy, s, primary, 2, analyses)
			fmt.Fprintf(&out, "%-42s %-9s %5gms  %5.1f %% / %5.1f %%\n", s.name, "Envoy p99", primary, 100*fp, 100*power)
		}
	}
	t.Logf("%d seeded analyses per figure:\n%s", analyses, out.String())
}
