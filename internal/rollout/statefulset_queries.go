package rollout

import (
	"maps"
	"strings"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
)

// The built-in checks of a StatefulSet release select pods by their controller-revision-hash
// (Prometheus's usual pod-label relabelling makes it the controller_revision_hash label): the
// updated pods (updated) against the others (current). Revision names are the StatefulSet
// controller's, so the queries need no variable of their own.

// MetricSuccessRateDrop is a built-in of StatefulSet releases: how many percentage points the
// updated pods' success rate is below the others'.
const MetricSuccessRateDrop = "request-success-rate-drop"

const (
	stsSuccessRate = `sum(rate(http_request_duration_seconds_count{kubernetes_namespace="{{ namespace }}",controller_revision_hash="REV",status!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(http_request_duration_seconds_count{kubernetes_namespace="{{ namespace }}",controller_revision_hash="REV"}[{{ interval }}])) * 100`
	stsDuration = `histogram_quantile(0.99, sum(rate(http_request_duration_seconds_bucket{kubernetes_namespace="{{ namespace }}",controller_revision_hash="REV"}[{{ interval }}])) by (le)) * 1000`
)

// StatefulSetQueries are the built-in queries of a StatefulSet release, for the updated
// revision and the current one.
func StatefulSetQueries(updated, current string) map[string]string {
	rate := func(rev string) string { return strings.ReplaceAll(stsSuccessRate, "REV", rev) }
	return map[string]string{
		mesh.MetricSuccessRate: rate(updated),
		mesh.MetricDuration:    strings.ReplaceAll(stsDuration, "REV", updated),
		// No traffic on the current pods (all updated) compares with nothing: 0 drop.
		MetricSuccessRateDrop: "(" + rate(current) + " - " + rate(updated) + ") or vector(0)",
	}
}

// statefulSetMetrics fills the built-in queries, and gives every metric the variables
// updated_revision and current_revision for queries of its own.
func statefulSetMetrics(metrics []Metric, updated, current string) []Metric {
	builtin := StatefulSetQueries(updated, current)
	out := make([]Metric, len(metrics))
	for i, m := range metrics {
		if m.Query == "" {
			m.Query = builtin[m.Name]
		}
		vars := map[string]string{"updated_revision": updated, "current_revision": current}
		maps.Copy(vars, m.Variables)
		m.Variables = vars
		out[i] = m
	}
	return out
}

// StatefulSetSteps are the step weights a StatefulSet release walks.
func StatefulSetSteps(a Analysis) []int { return (canaryStrategy{a}).Steps() }
