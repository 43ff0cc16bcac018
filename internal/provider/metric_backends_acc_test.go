package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// metricBackendCases are the metric backends the simulator answers (meshsim/vendor_*.go):
// each template reads the canary's success rate; the provider's own Prometheus is unreachable,
// so the backend alone judges the canary.
func metricBackendCases(sim string) []struct{ backend, interval, template, secret string } {
	return []struct{ backend, interval, template, secret string }{
		{"datadog", "1s", fmt.Sprintf(`query   = "avg:canary.request.success_rate{namespace:{{ namespace }},workload:{{ target }}}"
      datadog = { address = %q, api_key = "dd-api-s3cret", application_key = "dd-app-s3cret" }`, sim), "dd-app-s3cret"},
		{"dynatrace", "1s", fmt.Sprintf(`query     = "canary.request.success_rate:filter(and(eq(namespace,{{ namespace }}),eq(workload,{{ target }})))"
      dynatrace = { address = %q, api_token = "dt0c01.s3cret" }`, sim), "dt0c01.s3cret"},
		{"graphite", "3s", fmt.Sprintf(`query    = "target=canary.{{ namespace }}.{{ target }}.success_rate&from=-{{ interval }}"
      graphite = { address = %q, username = "graphite", password = "gr4phite-s3cret" }`, sim), "gr4phite-s3cret"},
		{"newrelic", "3s", fmt.Sprintf(`query    = "SELECT percentage(count(*), WHERE error IS false) FROM CanaryRequest WHERE namespace = '{{ namespace }}' AND workload = '{{ target }}'"
      newrelic = { address = "%s/graphql", account_id = 1234567, api_key = "NRAK-s3cret" }`, sim), "NRAK-s3cret"},
		{"web", "3s", fmt.Sprintf(`query = "?namespace={{ namespace }}&workload={{ target }}&window={{ interval }}"
      web   = { url = "%s/web/v1/summary", json_path = "{$.data.success_rate}", headers = { Authorization = "Bearer w3b-s3cret" } }`, sim), "w3b-s3cret"},
	}
}

// TestAccRelease_metricBackends: for each backend, a canary that answers every request
// promotes, and one that fails every request rolls back, the error naming the metric and its
// value; the backend's credential reaches neither the apply's output nor the namespace's
// ConfigMaps.
func TestAccRelease_metricBackends(t *testing.T) {
	c := testAccStack(t)
	for _, tc := range metricBackendCases(c.env.SimulatorURL) {
		t.Run(tc.backend, func(t *testing.T) {
			t.Parallel()
			ns := c.namespace(t)
			w := c.workdir(t)
			apply := func(image, errorRate string, wantErr bool) string {
				t.Helper()
				analysis := fmt.Sprintf(`
    interval    = "2s"
    step_weight = 50
    max_weight  = 100
    metrics = [{
      name            = "success-rate"
      interval        = %q
      template_ref    = "success-rate"
      threshold_range = { min = 99 }
    }]`, tc.interval)
				config := fmt.Sprintf(`terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}

provider "canary" {
  kubernetes = { config_path = %q }
  prometheus = { address = "http://127.0.0.1:1" }
  metric_templates = {
    "success-rate" = {
      %s
    }
  }
}
`, c.env.Kubeconfig, tc.template) + releaseConfig(ns, manifestWorkload(image, errorRate), analysis, "")
				if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
					t.Fatal(err)
				}
				out, err := w.run("apply", "-auto-approve")
				if (err != nil) != wantErr {
					t.Fatalf("apply of %s: error = %v, want error %v\n%s", image, err, wantErr, tail(out, 4000))
				}
				if strings.Contains(out, tc.secret) {
					t.Errorf("the apply's output holds the %s credential", tc.backend)
				}
				return out
			}
			defer func() {
				if out, err := w.run("destroy", "-auto-approve"); err != nil {
					t.Errorf("destroy: %v\n%s", err, out)
				}
			}()
			apply("podinfo:6.0.0", "0", false)
			apply("podinfo:6.0.1", "0", false)
			c.judge(t, ns, "podinfo:6.0.1")

			// The bad revision's window must not reach back to the good one's answers: Datadog's
			// value is the oldest point of ten metric intervals (10 s here).
			time.Sleep(12 * time.Second)
			// Every request fails, not half: the simulator fails every other request of a pod,
			// so Datadog's oldest one-second point could hold only each pod's first (good) answer.
			out := apply("podinfo:6.0.2", "1", true)
			if want := wrappedPattern(`metric success-rate returned [0-9.]+, outside threshold_range \[min 99\]`); !want.MatchString(out) {
				t.Errorf("the failed apply does not name the metric, its value and its range:\n%s", tail(out, 4000))
			} else {
				t.Logf("%s rolled back: %s", tc.backend, strings.Join(strings.Fields(want.FindString(out)), " "))
			}
			c.judge(t, ns, "podinfo:6.0.1")

			cms, err := c.kube.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, cm := range cms.Items {
				for k, v := range cm.Data {
					if strings.Contains(v, tc.secret) {
						t.Errorf("ConfigMap %s key %s holds the %s credential", cm.Name, k, tc.backend)
					}
				}
			}
		})
	}
}
