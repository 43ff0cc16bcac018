package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// chartPrometheus answers the built-in checks only under the labels of kube-prometheus-stack's
// and prometheus-community/prometheus's default pod scraping, and records every query.
func chartPrometheus(queries *[]string) MetricQuerier {
	return querierFunc(func(_ context.Context, q string) (float64, error) {
		*queries = append(*queries, q)
		if strings.Contains(q, `namespace="test",pod=~"podinfo-`) {
			return 99.5, nil
		}
		return 0, metrics.ErrNoValues
	})
}

func TestBuiltInChecksPromoteOnAChartsDefaultLabels(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.Provider = "gatewayapi"
	var queries []string
	e, cs, _, prior := setup(t, rel, chartPrometheus(&queries), "podinfo:2")
	var notes []string
	e.Progress = func(p Progress) {
		if p.Kind == ProgressNote {
			notes = append(notes, p.Message)
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want Succeeded on series labelled namespace and pod", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2", img)
	}
	if !strings.Contains(strings.Join(notes, "\n"), "by the labels namespace and pod") {
		t.Errorf("no progress note tells the labels found; notes: %q", notes)
	}
	flagger := 0
	for _, q := range queries {
		if strings.Contains(q, "kubernetes_namespace") {
			flagger++
		}
	}
	if flagger != 1 {
		t.Errorf("%d queries asked for Flagger's labels, want 1 (the run remembers what it found): %q", flagger, queries)
	}
}

func TestConfiguredPodLabelsAreReadAsTheyAre(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.Provider = "kubernetes"
	var queries []string
	q := querierFunc(func(_ context.Context, q string) (float64, error) {
		queries = append(queries, q)
		if strings.Contains(q, `exported_namespace="test",exported_pod=~"podinfo-`) {
			return 100, nil
		}
		return 0, metrics.ErrNoValues
	})
	e, _, _, prior := setup(t, rel, q, "podinfo:2")
	e.PodLabels = metrics.PodLabels{Namespace: "exported_namespace", Pod: "exported_pod"}
	if st, err := e.Apply(context.Background(), rel, nil, prior); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want Succeeded", st.Phase, err)
	}
	for _, q := range queries {
		if !strings.Contains(q, "exported_pod") {
			t.Errorf("query %q does not read the configured labels", q)
		}
	}
}

func TestNoValuesNamesTheLabelsItLookedFor(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.Provider = "gatewayapi"
	q := querierFunc(func(context.Context, string) (float64, error) { return 0, metrics.ErrNoValues })
	e, cs, _, prior := setup(t, rel, q, "podinfo:2")
	_, err := e.Apply(context.Background(), rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("Apply error = %v, want a rollback", err)
	}
	for _, want := range []string{"no values found for gatewayapi metric request-success-rate", "kubernetes_namespace and kubernetes_pod_name", "prometheus.namespace_label"} {
		if !strings.Contains(f.Reason, want) {
			t.Errorf("error %q does not say %q", f.Reason, want)
		}
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary image = %s, want podinfo:1 kept", img)
	}
}
