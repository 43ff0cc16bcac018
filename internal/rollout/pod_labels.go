package rollout

import (
	"context"
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// podLabelsFor is the labelling under which a built-in check reads the application's series.
// A configured one is used as it is. Otherwise the run takes Flagger's labels while its series
// answer, and the labels of the common charts (kube-prometheus-stack,
// prometheus-community/prometheus) when only those answer, so that a Prometheus installed with
// its defaults works without a setting. What it finds holds for the rest of the run and is told
// once in the progress.
func (a analyzer) podLabelsFor(ctx context.Context, m Metric, query string, vars metrics.Vars) metrics.PodLabels {
	switch {
	case !a.podLabels.IsZero():
		return a.podLabels
	case a.foundPodLabels != nil && !a.foundPodLabels.IsZero():
		return *a.foundPodLabels
	}
	querier := a.querierFor(m)
	if querier == nil || !metrics.ReadsPodLabels(query, vars) {
		return metrics.FlaggerPodLabels
	}
	for _, labels := range []metrics.PodLabels{metrics.FlaggerPodLabels, metrics.ChartPodLabels} {
		vars.PodLabels = labels
		rendered, err := metrics.Render(query, vars)
		if err != nil {
			break
		}
		// No values, or an error the check itself will meet and report.
		if _, err := querier.Query(ctx, rendered); err != nil {
			continue
		}
		if a.foundPodLabels != nil {
			*a.foundPodLabels = labels
		}
		if labels != metrics.FlaggerPodLabels {
			a.progress(Progress{Kind: ProgressNote, Message: fmt.Sprintf(
				"the built-in checks read the application's series by the labels %s (no series carry %s); set prometheus.namespace_label and pod_label in the provider to choose",
				labels, metrics.FlaggerPodLabels)})
		}
		return labels
	}
	return metrics.FlaggerPodLabels
}

// labelsHint tells, after a built-in check found no values, which labels it looked for, since a
// Prometheus that labels pods otherwise is the usual cause.
func labelsHint(query string, vars metrics.Vars) string {
	if !metrics.ReadsPodLabels(query, vars) {
		return ""
	}
	labels := vars.PodLabels
	if labels.IsZero() {
		labels = metrics.FlaggerPodLabels
	}
	return fmt.Sprintf(" (its series are read by the labels %s; if your Prometheus labels pods otherwise, set prometheus.namespace_label and pod_label in the provider)", labels)
}
