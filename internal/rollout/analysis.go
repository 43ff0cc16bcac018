package rollout

import (
	"context"
	"errors"
	"fmt"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"math"
	"net/http"
	"reflect"
	"strings"

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
	// logf receives each check's outcome, for the progress output; nil discards it.
	logf func(format string, args ...any)
}

func (a analyzer) log(format string, args ...any) {
	if a.logf != nil {
		a.logf("%s/%s: "+format, append([]any{a.rel.Namespace, a.rel.Name}, args...)...)
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
	// Like Flagger, the first failing metric decides the interval.
	for _, m := range a.rel.Analysis.Metrics {
		f, qerr := a.runMetric(ctx, m)
		if qerr != nil {
			if ctx.Err() != nil {
				return verdict{halted: qerr.Error()}
			}
			queryErrors[m.Name]++
			n := queryErrors[m.Name]
			if n >= limit {
				return verdict{unavailable: fmt.Errorf("metrics unavailable: metric %s had %d consecutive query errors (analysis.max_query_errors = %d), last: %v", m.Name, n, limit, qerr)}
			}
			return verdict{halted: fmt.Sprintf("metric %s: query error %d of %d allowed in a row, the step is held: %v", m.Name, n, limit, qerr)}
		}
		queryErrors[m.Name] = 0
		if f != nil {
			return verdict{failure: f}
		}
	}
	return verdict{}
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
// the canary), or neither.
func (a analyzer) runMetric(ctx context.Context, m Metric) (*CheckFailure, error) {
	fail := func(format string, args ...any) *CheckFailure {
		return &CheckFailure{Check: m.Name, Range: rangeText(m), Message: fmt.Sprintf(format, args...)}
	}
	query := m.Query
	if query == "" {
		builtin, ok := registry.Builtin(a.rel.Provider, m.Name)
		if !ok {
			return fail("metric %s has no query and is not a built-in %s metric", m.Name, a.rel.Provider), nil
		}
		query = builtin
	}
	interval := m.Interval
	if interval == "" {
		interval = "1m"
	}
	rendered, err := metrics.Render(query, metrics.Vars{
		Name: a.rel.Name, Namespace: a.rel.Namespace, Target: a.rel.Target, Service: a.rel.Apex(),
		Ingress: a.rel.Target, Route: a.routeName(), Interval: interval, Variables: m.Variables,
	})
	if err != nil {
		return nil, fmt.Errorf("rendering its query: %w", err)
	}
	querier := a.querierFor(m)
	if querier == nil {
		return nil, errors.New("no Prometheus address is configured (set prometheus.address in the provider or CANARY_PROMETHEUS_ADDRESS)")
	}
	value, err := querier.Query(ctx, rendered)
	switch {
	case errors.Is(err, metrics.ErrNoValues), err == nil && math.IsNaN(value):
		return fail("no values found for %s metric %s: is the canary receiving traffic?", a.rel.Provider, m.Name), nil
	case errors.Is(err, metrics.ErrNotFinite), err == nil && math.IsInf(value, 0):
		return fail("metric %s returned an infinite value, outside threshold_range %s", m.Name, rangeText(m)), nil
	case err != nil:
		return nil, err
	}
	if (m.Min != nil && value < *m.Min) || (m.Max != nil && value > *m.Max) {
		f := fail("metric %s returned %.2f, outside threshold_range %s", m.Name, value, rangeText(m))
		f.Value = value
		return f, nil
	}
	a.log("metric %s = %.2f, within threshold_range %s", m.Name, value, rangeText(m))
	return nil, nil
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
