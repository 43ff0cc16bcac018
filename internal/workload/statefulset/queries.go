package statefulset

import (
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
	successRate = `sum(rate(http_request_duration_seconds_count{ {{ namespace_label }}="{{ namespace }}",controller_revision_hash="REV",status!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(http_request_duration_seconds_count{ {{ namespace_label }}="{{ namespace }}",controller_revision_hash="REV"}[{{ interval }}])) * 100`
	duration = `histogram_quantile(0.99, sum(rate(http_request_duration_seconds_bucket{ {{ namespace_label }}="{{ namespace }}",controller_revision_hash="REV"}[{{ interval }}])) by (le)) * 1000`
)

// BuiltInQueries are the built-in queries of a StatefulSet release, for the updated revision
// and the current one.
func BuiltInQueries(updated, current string) map[string]string {
	rate := func(rev string) string { return strings.ReplaceAll(successRate, "REV", rev) }
	return map[string]string{
		mesh.MetricSuccessRate: rate(updated),
		mesh.MetricDuration:    strings.ReplaceAll(duration, "REV", updated),
		// No traffic on the current pods (all updated) compares with nothing: 0 drop.
		MetricSuccessRateDrop: "(" + rate(current) + " - " + rate(updated) + ") or vector(0)",
	}
}
