package provider

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cloudBackendCase is a metric template judged by one vendor backend, pointed at the
// simulator, whose query reads the canary's error rate in percent.
type cloudBackendCase struct {
	// backend is the template's backend attribute, given the simulator's URL.
	backend func(t *testing.T, simulator string) string
	query   string
}

var cloudBackendCases = map[string]cloudBackendCase{
	"cloudwatch": {
		backend: func(_ *testing.T, sim string) string {
			return fmt.Sprintf(`cloudwatch = { region = "eu-west-1", endpoint = %q, access_key_id = "AKIDCANARYTEST", secret_access_key = "cw-s3cret-do-not-log" }`, sim)
		},
		query: `[
  {"Id": "rate", "Expression": "100 * errors / requests"},
  {"Id": "errors", "ReturnData": false, "MetricStat": {"Period": 2, "Stat": "Sum", "Metric": {"Namespace": "MeshSim", "MetricName": "Errors",
    "Dimensions": [{"Name": "Namespace", "Value": "{{ namespace }}"}, {"Name": "Workload", "Value": "{{ target }}"}]}}},
  {"Id": "requests", "ReturnData": false, "MetricStat": {"Period": 2, "Stat": "Sum", "Metric": {"Namespace": "MeshSim", "MetricName": "Requests",
    "Dimensions": [{"Name": "Namespace", "Value": "{{ namespace }}"}, {"Name": "Workload", "Value": "{{ target }}"}]}}}
]`,
	},
	"stackdriver": {
		backend: func(t *testing.T, sim string) string {
			return fmt.Sprintf(`stackdriver = { project = "canary-test", endpoint = %q, service_account_key = %q }`, sim, testServiceAccountKeyJSON(t, sim))
		},
		query: `{ fetch k8s_container
  | metric 'istio.io/service/server/request_count'
  | filter metric.destination_workload_namespace == '{{ namespace }}' && metric.destination_workload_name == '{{ target }}' && metric.response_code >= 500
  | group_by [], [errors: sum(value.request_count)]
; fetch k8s_container
  | metric 'istio.io/service/server/request_count'
  | filter metric.destination_workload_namespace == '{{ namespace }}' && metric.destination_workload_name == '{{ target }}'
  | group_by [], [requests: sum(value.request_count)] }
| ratio
| within {{ interval }}`,
	},
	"influxdb": {
		backend: func(_ *testing.T, sim string) string {
			return fmt.Sprintf(`influxdb = { address = %q, org = "canary", token = "influx-s3cret-do-not-log" }`, sim)
		},
		// The errors in the window: a Flux count() over no error gives no table, which reads 0.
		query: `from(bucket: "meshsim")
  |> range(start: -{{ interval }})
  |> filter(fn: (r) => r._measurement == "requests" and r.namespace == "{{ namespace }}" and r.workload == "{{ target }}" and r.code =~ /^5/)
  |> count()`,
	},
	"splunk": {
		backend: func(_ *testing.T, sim string) string {
			return fmt.Sprintf(`splunk = { address = %q, token = "sf-s3cret-do-not-log" }`, sim)
		},
		query: `A = data('http.errors', filter=filter('namespace', '{{ namespace }}') and filter('workload', '{{ target }}')).sum(over='{{ interval }}')
B = data('http.requests', filter=filter('namespace', '{{ namespace }}') and filter('workload', '{{ target }}')).sum(over='{{ interval }}')
(A / B * 100).publish()`,
	},
}

// testServiceAccountKeyJSON is a service account's JSON key, with a fresh RSA key, whose
// token_uri is the simulator's token endpoint.
func testServiceAccountKeyJSON(t *testing.T, sim string) string {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(map[string]string{
		"type": "service_account", "project_id": "canary-test", "private_key_id": "k1",
		"private_key":  string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})),
		"client_email": "canary@canary-test.iam.gserviceaccount.com", "token_uri": strings.TrimSuffix(sim, "/") + "/oauth2/token",
	})
	return string(b)
}

func TestAccMetricBackend_cloudwatch(t *testing.T)  { testCloudBackend(t, "cloudwatch") }
func TestAccMetricBackend_stackdriver(t *testing.T) { testCloudBackend(t, "stackdriver") }
func TestAccMetricBackend_influxdb(t *testing.T)    { testCloudBackend(t, "influxdb") }
func TestAccMetricBackend_splunk(t *testing.T)      { testCloudBackend(t, "splunk") }

// testCloudBackend: the provider's own Prometheus is unreachable, and the only metric reads a
// template judged by one vendor backend, which the simulator answers from the same traffic
// Prometheus sees. A canary without errors promotes; one that fails half its requests rolls
// back, naming the metric and its value; the state and the cluster never hold a credential.
func testCloudBackend(t *testing.T, backend string) {
	tc := cloudBackendCases[backend]
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	w := c.workdir(t)
	provider := fmt.Sprintf(`terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}

provider "canary" {
  kubernetes = { config_path = %q }
  prometheus = { address = "http://127.0.0.1:1" }
  metric_templates = {
    "error-rate" = {
      query = <<-EOT
        %s
      EOT
      %s
    }
  }
}
`, c.env.Kubeconfig, strings.ReplaceAll(tc.query, "\n", "\n        "), tc.backend(t, c.env.SimulatorURL))
	limit := 5.0 // percent
	switch backend {
	case "influxdb":
		limit = 0 // a count of errors
	case "stackdriver":
		limit = 0.05 // MQL's ratio is a fraction
	}
	analysis := fmt.Sprintf(`
    interval    = "2s"
    step_weight = 50
    max_weight  = 100
    metrics = [
      {
        name            = "error-rate"
        interval        = "3s"
        template_ref    = "error-rate"
        threshold_range = { max = %v }
      },
    ]`, limit)
	apply := func(image, errorRate string, wantErr bool) string {
		t.Helper()
		config := provider + releaseConfig(ns, manifestWorkload(image, errorRate), analysis, "")
		if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := w.run("apply", "-auto-approve")
		if (err != nil) != wantErr {
			t.Fatalf("apply of %s: error = %v, want error %v\n%s", image, err, wantErr, tail(out, 4000))
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

	out := apply("podinfo:6.0.2", "0.5", true)
	if want := wrappedPattern(`metric error-rate returned [0-9.]+, outside threshold_range \[max ` + fmt.Sprint(limit) + `\]`); !want.MatchString(out) {
		t.Errorf("the failed apply does not name the metric, its value and its range:\n%s", tail(out, 4000))
	}
	for _, secret := range []string{"s3cret-do-not-log", "PRIVATE KEY"} {
		if strings.Contains(out, secret) {
			t.Errorf("the apply's output holds a credential (%s)", secret)
		}
	}
	c.judge(t, ns, "podinfo:6.0.1")
	c.noSecretInNamespace(t, ns, "s3cret-do-not-log", "PRIVATE KEY")
}

// noSecretInNamespace fails when a ConfigMap, Secret or Event of the namespace holds one of
// the phrases (a backend credential must stay in the Terraform configuration).
func (c *testCluster) noSecretInNamespace(t *testing.T, ns string, phrases ...string) {
	t.Helper()
	var texts []string
	cms, err := c.kube.CoreV1().ConfigMaps(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms.Items {
		for k, v := range cm.Data {
			texts = append(texts, "ConfigMap "+cm.Name+" "+k+": "+v)
		}
		for k, v := range cm.Annotations {
			texts = append(texts, "ConfigMap "+cm.Name+" annotation "+k+": "+v)
		}
	}
	events, err := c.kube.CoreV1().Events(ns).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		texts = append(texts, "Event "+e.Name+": "+e.Message)
	}
	for _, text := range texts {
		for _, p := range phrases {
			if strings.Contains(text, p) {
				t.Errorf("%.80s... holds a credential (%s)", text, p)
			}
		}
	}
}
