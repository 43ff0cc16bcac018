package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/judge"
)

// MetricJudge is a metric's judge: the canary against the primary rather than (or as well as)
// a fixed range. Samples is the number of samples per side a mann-whitney judge reads over the
// metric's interval; the sample step, which {{ interval }} renders as, is interval/Samples.
type MetricJudge struct {
	judge.Config
	Samples int
}

// DefaultJudgeSamples is MetricJudge.Samples when unset.
const DefaultJudgeSamples = 10

// errInconclusive marks a judge that had too few samples: neither a pass nor a failed check.
// It counts against max_query_errors as a query error does.
var errInconclusive = errors.New("inconclusive")

type inconclusiveError struct{ text string }

func (e *inconclusiveError) Error() string { return e.text }
func (e *inconclusiveError) Unwrap() error { return errInconclusive }

// sampleStep is the step of a judged metric's samples: its interval over the sample count,
// at least one second (PromQL's finest range used here).
func sampleStep(m Metric) (window, step time.Duration, err error) {
	interval := m.Interval
	if interval == "" {
		interval = "1m"
	}
	window, err = time.ParseDuration(interval)
	if err != nil {
		return 0, 0, fmt.Errorf("metric %s: interval %q: %w", m.Name, interval, err)
	}
	n := m.Judge.Samples
	if n <= 0 {
		n = DefaultJudgeSamples
	}
	step = (window / time.Duration(n)).Truncate(time.Second)
	return window, max(step, time.Second), nil
}

// promDuration writes d the way PromQL reads a range ("3s", "1m30s").
func promDuration(d time.Duration) string {
	s := d.String()
	// time.Duration writes "1m0s"; PromQL accepts it, but "1m" reads better in a query line.
	if len(s) > 2 && s[len(s)-2:] == "0s" && s != "0s" {
		s = s[:len(s)-2]
	}
	return s
}

// evaluateJudged reads a judged metric for both sides and judges them. It returns a failed
// check, or the text of a passed one, or an error: a query error, or an inconclusive judge.
func (a analyzer) evaluateJudged(ctx context.Context, m Metric, query string, vars metrics.Vars) (*CheckFailure, string, error) {
	cfg := m.Judge.WithDefaults()
	querier := a.querierFor(m)
	if querier == nil {
		return nil, "", errors.New("no Prometheus address is configured (set prometheus.address in the provider or CANARY_PROMETHEUS_ADDRESS)")
	}
	var verdict judge.Verdict
	var canaryValue float64
	switch cfg.Method {
	case judge.MethodMannWhitney:
		sampler, ok := querier.(metrics.SampleQuerier)
		if !ok {
			return nil, "", fmt.Errorf("metric %s: its backend cannot return samples, so judge.method %q cannot run; use %q", m.Name, judge.MethodMannWhitney, judge.MethodRatio)
		}
		window, step, err := sampleStep(m)
		if err != nil {
			return nil, "", err
		}
		vars.Interval = promDuration(step)
		var sides [2][]float64
		for i, side := range []string{metrics.SideCanary, metrics.SidePrimary} {
			rendered, err := metrics.Render(query, vars.ForSide(side))
			if err != nil {
				return nil, "", fmt.Errorf("rendering its query for the %s: %w", side, err)
			}
			samples, err := sampler.QueryRange(ctx, rendered, window, step)
			a.progress(Progress{Kind: ProgressQuery, Metric: m.Name, Query: rendered,
				Message: samplesText(m.Name, side, samples, err)})
			if errors.Is(err, metrics.ErrNoValues) {
				samples, err = nil, nil // no sample: inconclusive below, as too few
			}
			if err != nil {
				return nil, "", err
			}
			sides[i] = samples
		}
		verdict = judge.MannWhitney(cfg, sides[0], sides[1])
		canaryValue = verdict.Canary
	default:
		var values [2]float64
		for i, side := range []string{metrics.SideCanary, metrics.SidePrimary} {
			rendered, err := metrics.Render(query, vars.ForSide(side))
			if err != nil {
				return nil, "", fmt.Errorf("rendering its query for the %s: %w", side, err)
			}
			v, err := querier.Query(ctx, rendered)
			sent := Progress{Kind: ProgressQuery, Metric: m.Name, Query: rendered, Message: fmt.Sprintf("query of metric %s for the %s returned %g", m.Name, side, v)}
			if err != nil {
				sent.Message = fmt.Sprintf("query of metric %s for the %s failed: %v", m.Name, side, err)
			}
			a.progress(sent)
			switch {
			case errors.Is(err, metrics.ErrNoValues):
				return &CheckFailure{Check: m.Name, Range: rangeText(m), Message: fmt.Sprintf(
					"no values found for %s metric %s on the %s: is it receiving traffic?", a.rel.Provider, m.Name, side)}, "", nil
			case errors.Is(err, metrics.ErrNotFinite):
				return &CheckFailure{Check: m.Name, Range: rangeText(m), Message: fmt.Sprintf(
					"metric %s returned an infinite value on the %s", m.Name, side)}, "", nil
			case err != nil:
				return nil, "", err
			}
			values[i] = v
		}
		verdict = judge.Ratio(cfg, values[0], values[1])
		canaryValue = values[0]
	}
	switch verdict.Outcome {
	case judge.Inconclusive:
		return nil, "", &inconclusiveError{text: fmt.Sprintf("metric %s: %s", m.Name, verdict.Text)}
	case judge.Fail:
		f := &CheckFailure{Check: m.Name, Range: rangeText(m), Message: fmt.Sprintf("metric %s failed its %s", m.Name, verdict.Text)}
		if !math.IsNaN(canaryValue) && !math.IsInf(canaryValue, 0) {
			f.Value = canaryValue
		}
		return f, "", nil
	}
	// A threshold_range beside the judge bounds the canary's value (the median of its samples).
	if (m.Min != nil && canaryValue < *m.Min) || (m.Max != nil && canaryValue > *m.Max) {
		return &CheckFailure{Check: m.Name, Range: rangeText(m), Value: canaryValue,
			Message: fmt.Sprintf("metric %s returned %.2f on the canary, outside threshold_range %s (%s)", m.Name, canaryValue, rangeText(m), verdict.Text)}, "", nil
	}
	a.progress(Progress{Kind: ProgressCheck, Metric: m.Name, Range: rangeText(m), Value: finiteOrNil(canaryValue),
		Message: fmt.Sprintf("metric %s passed its %s", m.Name, verdict.Text)})
	return nil, fmt.Sprintf("%s passed its %s", m.Name, verdict.Text), nil
}

func finiteOrNil(v float64) *float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return nil
	}
	return &v
}

func samplesText(metric, side string, samples []float64, err error) string {
	if err != nil {
		return fmt.Sprintf("range query of metric %s for the %s failed: %v", metric, side, err)
	}
	return fmt.Sprintf("range query of metric %s for the %s returned %d samples %v", metric, side, len(samples), samples)
}

// reportDryRun tells, as a warning Event and alert, what the dry_run metrics would have failed
// (the step line is the analyzer's). It changes no verdict.
func (r *run) reportDryRun(ctx context.Context, texts []string) {
	for _, text := range texts {
		r.event(ctx, warningEvent, "DryRun", text)
		r.alert(ctx, "warn", text)
	}
}
