package rollout

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/metrics/judge"
)

// sidesQuerier answers the OSM built-in request-duration per side: canary for the canary's
// workload, primary for podinfo-primary's, n samples each on a range query.
type sidesQuerier struct {
	canary, primary float64
	n               int
	queries         []string
}

func (s *sidesQuerier) value(q string) float64 {
	s.queries = append(s.queries, q)
	if strings.Contains(q, `destination_name="podinfo-primary"`) {
		return s.primary
	}
	return s.canary
}

func (s *sidesQuerier) Query(_ context.Context, q string) (float64, error) { return s.value(q), nil }

func (s *sidesQuerier) QueryRange(_ context.Context, q string, _, _ time.Duration) ([]float64, error) {
	v := s.value(q)
	out := make([]float64, s.n)
	for i := range out {
		out[i] = v * (1 + 0.01*float64(i%3)) // a little noise, some ties
	}
	return out, nil
}

// instantOnly hides QueryRange: a backend that cannot sample.
type instantOnly struct{ q *sidesQuerier }

func (o instantOnly) Query(ctx context.Context, q string) (float64, error) { return o.q.Query(ctx, q) }

func judgedRelease(q MetricQuerier, metrics ...Metric) analyzer {
	return analyzer{rel: testRelease(Analysis{Metrics: metrics}), querier: q}
}

func latencyJudge(method string) Metric {
	limit := 500.0
	return Metric{Name: "request-duration", Interval: "30s", Max: &limit,
		Judge: &MetricJudge{Config: judge.Config{Method: method, Direction: judge.DirectionIncrease, MaxRatio: 1.2, Confidence: 0.95}}}
}

// A canary twice as slow as the primary fails its judge, though threshold_range passes it.
func TestJudgeFailsASlowCanaryWithinItsRange(t *testing.T) {
	for method, want := range map[string]string{
		judge.MethodRatio:       "metric request-duration failed its judge ratio: canary 40 / primary 20 = 2, beyond max_ratio 1.2 (direction increase)",
		judge.MethodMannWhitney: "metric request-duration failed its judge mann-whitney: canary median 40.4 / primary median 20.2 = 2 over 10+10 samples",
	} {
		q := &sidesQuerier{canary: 40, primary: 20, n: 10}
		v := judgedRelease(q, latencyJudge(method)).interval(context.Background(), "", map[string]int{})
		if v.failure == nil || !strings.Contains(v.failure.Message, want) {
			t.Fatalf("%s: verdict %+v, want a failure with %q", method, v, want)
		}
		if len(q.queries) != 2 || !strings.Contains(q.queries[0], `destination_name="podinfo"`) || !strings.Contains(q.queries[1], `destination_name="podinfo-primary"`) {
			t.Errorf("%s: queries %q, want the canary's then the primary's", method, q.queries)
		}
		// The samples do not overlap: {{ interval }} is the sample step, 30s / 10.
		if wantRange := map[string]string{judge.MethodRatio: "[30s]", judge.MethodMannWhitney: "[3s]"}[method]; !strings.Contains(q.queries[0], wantRange) {
			t.Errorf("%s: query %s, want the range %s", method, q.queries[0], wantRange)
		}
	}
}

func TestJudgePassesAnEqualCanary(t *testing.T) {
	for _, method := range judge.Methods {
		v := judgedRelease(&sidesQuerier{canary: 20, primary: 20, n: 10}, latencyJudge(method)).interval(context.Background(), "", map[string]int{})
		if v.failure != nil || v.halted != "" || len(v.passed) != 1 || !strings.Contains(v.passed[0], "request-duration passed its judge "+method) {
			t.Errorf("%s: verdict %+v, want a pass", method, v)
		}
	}
}

// Too few samples is inconclusive: the step is held and it counts as a query error.
func TestJudgeWithTooFewSamplesIsInconclusive(t *testing.T) {
	errs := map[string]int{}
	a := judgedRelease(&sidesQuerier{canary: 40, primary: 20, n: judge.MinSamples - 1}, latencyJudge(judge.MethodMannWhitney))
	v := a.interval(context.Background(), "", errs)
	if v.failure != nil || !strings.Contains(v.halted, "metric request-duration: inconclusive judge (counted as a query error) 1 of 3 allowed in a row") ||
		!strings.Contains(v.halted, "at least 5 of each needed") {
		t.Fatalf("verdict %+v", v)
	}
	a.interval(context.Background(), "", errs)
	if v := a.interval(context.Background(), "", errs); v.unavailable == nil {
		t.Errorf("third inconclusive interval: %+v, want metrics unavailable", v)
	}
}

func TestMannWhitneyNeedsABackendThatSamples(t *testing.T) {
	v := judgedRelease(instantOnly{&sidesQuerier{canary: 40, primary: 20}}, latencyJudge(judge.MethodMannWhitney)).interval(context.Background(), "", map[string]int{})
	if !strings.Contains(v.halted, `its backend cannot return samples, so judge.method "mann-whitney" cannot run; use "ratio"`) {
		t.Errorf("verdict %+v", v)
	}
}

// A dry_run metric that would fail is reported and the analysis goes on.
func TestDryRunMetricNeverFails(t *testing.T) {
	dry := latencyJudge(judge.MethodRatio)
	dry.DryRun = true
	var lines []string
	a := judgedRelease(&sidesQuerier{canary: 40, primary: 20, n: 10}, dry)
	a.report = func(p Progress) { lines = append(lines, p.Message) }
	v := a.interval(context.Background(), "", map[string]int{})
	if v.failure != nil || v.halted != "" || v.unavailable != nil || len(v.dryRun) != 1 ||
		!strings.Contains(v.dryRun[0], "dry_run metric request-duration would fail the check: metric request-duration failed its judge ratio") {
		t.Fatalf("verdict %+v", v)
	}
	if !strings.Contains(strings.Join(lines, "\n"), "dry_run metric request-duration would fail") {
		t.Errorf("step lines %q lack the dry run", lines)
	}
}
