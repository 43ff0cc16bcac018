package rollout

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// MetricQuerier runs one PromQL query that must return a single number.
type MetricQuerier interface {
	Query(ctx context.Context, query string) (float64, error)
}

// CheckFailure is one failed analysis check, worded for the apply's error.
type CheckFailure struct {
	Check   string
	Value   float64
	Range   string
	Message string
}

func (f *CheckFailure) Error() string { return f.Message }

// analyzer runs the webhooks and metrics of one analysis interval.
type analyzer struct {
	rel     Release
	querier MetricQuerier
	http    *http.Client
	// insecureHTTP calls the webhooks with disable_tls; nil builds one when needed.
	insecureHTTP *http.Client
	// report receives each query and each check's outcome, for the progress output; nil
	// discards them. It is called on the run's path only.
	report func(Progress)
	// podLabels is the configured labelling of the application's series; unset, the first
	// built-in check that finds series stores their labelling in foundPodLabels for the run.
	podLabels      metrics.PodLabels
	foundPodLabels *metrics.PodLabels
}

func (a analyzer) progress(p Progress) {
	if a.report != nil {
		a.report(p)
	}
}

// defaultMaxQueryErrors is analysis.max_query_errors when unset.
const defaultMaxQueryErrors = 3

// verdict is one analysis interval's outcome: passed (all zero), a failed check, an
// inconclusive interval (a query error), or metrics that stayed unavailable too long.
type verdict struct {
	failure     *CheckFailure
	halted      string
	unavailable error
	// passed are the metrics that passed, each with its value and range, for the status's
	// last check.
	passed []string
	// dryRun says what each dry_run metric would have failed; it changes nothing.
	dryRun []string
}

// interval runs the rollout webhooks and then the metrics of one analysis interval.
// queryErrors counts each metric's consecutive query errors across intervals.
func (a analyzer) interval(ctx context.Context, checksum string, queryErrors map[string]int) verdict {
	if f := a.runHooks(ctx, HookRollout, PhaseProgressing, checksum); f != nil {
		return verdict{failure: f}
	}
	limit := a.rel.Analysis.MaxQueryErrors
	if limit <= 0 {
		limit = defaultMaxQueryErrors
	}
	// Like Flagger, the first failing metric decides the interval. A dry_run metric is
	// reported and never decides.
	var passed, dryRun []string
	for _, m := range a.rel.Analysis.Metrics {
		f, ok, qerr := a.runMetric(ctx, m)
		if qerr != nil && ctx.Err() != nil {
			return verdict{halted: qerr.Error()}
		}
		if m.DryRun {
			if text := dryRunText(m, f, qerr); text != "" {
				a.progress(Progress{Kind: ProgressNote, Metric: m.Name, Message: text})
				dryRun = append(dryRun, text)
			} else {
				passed = append(passed, ok+" (dry_run)")
			}
			continue
		}
		if qerr != nil {
			queryErrors[m.Name]++
			n := queryErrors[m.Name]
			what := "query error"
			if errors.Is(qerr, errInconclusive) {
				what = "inconclusive judge (counted as a query error)"
			}
			if n >= limit {
				return verdict{dryRun: dryRun, unavailable: fmt.Errorf("metrics unavailable: metric %s had %d consecutive query errors (analysis.max_query_errors = %d), last: %v", m.Name, n, limit, qerr)}
			}
			return verdict{dryRun: dryRun, passed: passed, halted: fmt.Sprintf("metric %s: %s %d of %d allowed in a row, the step is held: %v", m.Name, what, n, limit, qerr)}
		}
		queryErrors[m.Name] = 0
		if f != nil {
			return verdict{dryRun: dryRun, failure: f, passed: passed}
		}
		passed = append(passed, ok)
	}
	return verdict{dryRun: dryRun, passed: passed}
}

// dryRunText says what a dry_run metric would have done to the analysis, or "" for a pass.
func dryRunText(m Metric, f *CheckFailure, qerr error) string {
	switch {
	case f != nil:
		return fmt.Sprintf("dry_run metric %s would fail the check: %s", m.Name, f.Message)
	case qerr != nil:
		return fmt.Sprintf("dry_run metric %s would count a query error: %v", m.Name, qerr)
	}
	return ""
}

// querierFor is the Prometheus of one metric: its template's own, or the engine's.
func (a analyzer) querierFor(m Metric) MetricQuerier {
	if m.Querier != nil {
		return m.Querier
	}
	return a.querier
}

// probe checks, before the first shift, that every Prometheus the metrics use answers, so an
// unreachable one fails the run before any traffic moves.
func (a analyzer) probe(ctx context.Context) error {
	probed := map[MetricQuerier]bool{}
	for _, m := range a.rel.Analysis.Metrics {
		querier := a.querierFor(m)
		if querier == nil {
			return fmt.Errorf("metrics unavailable: metric %s has no Prometheus: set prometheus.address in the provider or CANARY_PROMETHEUS_ADDRESS", m.Name)
		}
		if canKey := reflect.TypeOf(querier).Comparable(); canKey && probed[querier] {
			continue
		} else if canKey {
			probed[querier] = true
		}
		p, ok := querier.(interface{ Ping(context.Context) error })
		if !ok {
			continue
		}
		if err := p.Ping(ctx); err != nil {
			return fmt.Errorf("metrics unavailable before the first traffic shift: metric %s: %w", m.Name, err)
		}
	}
	return nil
}

// runMetric evaluates one metric: a failed check, a query error (which says nothing about
// the canary), or neither, with the passed check's text.
func (a analyzer) runMetric(ctx context.Context, m Metric) (*CheckFailure, string, error) {
	f, value, passedText, err := a.evaluate(ctx, m)
	// A failed check is told by the run, with the count of failed checks (judge); a query
	// error by the interval's verdict; a judged metric's pass by evaluateJudged.
	if f == nil && err == nil && m.Judge == nil {
		a.progress(Progress{Kind: ProgressCheck, Metric: m.Name, Range: rangeText(m), Value: &value,
			Message: fmt.Sprintf("metric %s = %.2f, within threshold_range %s", m.Name, value, rangeText(m))})
		passedText = fmt.Sprintf("%s %.2f within %s", m.Name, value, rangeText(m))
	}
	return f, passedText, err
}

// evaluate is runMetric without the progress line of a plain metric.
func (a analyzer) evaluate(ctx context.Context, m Metric) (*CheckFailure, float64, string, error) {
	fail := func(format string, args ...any) *CheckFailure {
		return &CheckFailure{Check: m.Name, Range: rangeText(m), Message: fmt.Sprintf(format, args...)}
	}
	query := m.Query
	if query == "" {
		builtin, ok := registry.Builtin(a.rel.Provider, m.Name)
		if !ok {
			return fail("metric %s has no query and is not a built-in %s metric", m.Name, a.rel.Provider), math.NaN(), "", nil
		}
		query = builtin
	}
	interval := m.Interval
	if interval == "" {
		interval = "1m"
	}
	vars := metrics.Vars{
		Name: a.rel.Name, Namespace: a.rel.Namespace, Target: a.rel.Target, Service: a.rel.Apex(),
		Ingress: a.rel.Target, Route: a.routeName(), Interval: interval, Variables: m.Variables,
		TargetKind: a.rel.WorkloadKind(),
	}
	// Built-in queries (resolved by the provider or here) and templates that read the pod
	// labels get the labelling the series carry.
	vars.PodLabels = a.podLabelsFor(ctx, m, query, vars)
	if m.Judge != nil {
		f, passed, err := a.evaluateJudged(ctx, m, query, vars)
		return f, math.NaN(), passed, err
	}
	rendered, err := metrics.Render(query, vars)
	if err != nil {
		return nil, 0, "", fmt.Errorf("rendering its query: %w", err)
	}
	querier := a.querierFor(m)
	if querier == nil {
		return nil, 0, "", errors.New("no Prometheus address is configured (set prometheus.address in the provider or CANARY_PROMETHEUS_ADDRESS)")
	}
	value, err := querier.Query(ctx, rendered)
	sent := Progress{Kind: ProgressQuery, Metric: m.Name, Query: rendered, Message: fmt.Sprintf("query of metric %s returned %g", m.Name, value)}
	if err != nil {
		sent.Message = fmt.Sprintf("query of metric %s failed: %v", m.Name, err)
	} else if !math.IsNaN(value) && !math.IsInf(value, 0) {
		sent.Value = &value
	}
	a.progress(sent)
	switch {
	case errors.Is(err, metrics.ErrNoValues), err == nil && math.IsNaN(value):
		return fail("no values found for %s metric %s: is the canary receiving traffic?%s", a.rel.Provider, m.Name, labelsHint(query, vars)), math.NaN(), "", nil
	case errors.Is(err, metrics.ErrNotFinite), err == nil && math.IsInf(value, 0):
		return fail("metric %s returned an infinite value, outside threshold_range %s", m.Name, rangeText(m)), math.Inf(1), "", nil
	case err != nil:
		return nil, 0, "", err
	}
	if (m.Min != nil && value < *m.Min) || (m.Max != nil && value > *m.Max) {
		f := fail("metric %s returned %.2f, outside threshold_range %s", m.Name, value, rangeText(m))
		f.Value = value
		return f, value, "", nil
	}
	return nil, value, "", nil
}

func (a analyzer) routeName() string {
	if a.rel.RouteName != "" {
		return a.rel.RouteName
	}
	return a.rel.Target
}

func rangeText(m Metric) string {
	var parts []string
	if m.Min != nil {
		parts = append(parts, fmt.Sprintf("min %g", *m.Min))
	}
	if m.Max != nil {
		parts = append(parts, fmt.Sprintf("max %g", *m.Max))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}
