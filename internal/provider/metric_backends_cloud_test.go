package provider

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// TestCloudBackendConfigurations: each cloud backend's plan-time checks name the attribute
// and what is allowed, and never quote a credential; a valid one yields its querier and its
// credentials to mask.
func TestCloudBackendConfigurations(t *testing.T) {
	s := types.StringValue
	const secret = "s3cret-value"
	for _, tc := range []struct {
		name    string
		backend string
		fields  map[string]attr.Value
		want    string // "" expects a querier
	}{
		{"cloudwatch valid", "cloudwatch", map[string]attr.Value{"region": s("eu-west-1"), "access_key_id": s("AKID"), "secret_access_key": s(secret)}, ""},
		{"cloudwatch default chain", "cloudwatch", map[string]attr.Value{"region": s("eu-west-1")}, ""},
		{"cloudwatch half a key", "cloudwatch", map[string]attr.Value{"region": s("eu-west-1"), "secret_access_key": s(secret)}, `metric_templates["t"].cloudwatch: set both access_key_id and secret_access_key`},
		{"cloudwatch endpoint", "cloudwatch", map[string]attr.Value{"region": s("eu-west-1"), "endpoint": s("cloudwatch.local")}, `must be an http or https URL`},
		{"cloudwatch session token alone", "cloudwatch", map[string]attr.Value{"region": s("eu-west-1"), "session_token": s(secret)}, `metric_templates["t"].cloudwatch.session_token goes with access_key_id`},
		{"stackdriver not a key", "stackdriver", map[string]attr.Value{"project": s("p"), "service_account_key": s(`{"private_key": "` + secret)}, `service_account_key is not a JSON service account key`},
		{"stackdriver not a service account", "stackdriver", map[string]attr.Value{"project": s("p"), "service_account_key": s(`{"type": "authorized_user", "refresh_token": "` + secret + `"}`)}, `"type": "service_account"`},
		{"stackdriver project path", "stackdriver", map[string]attr.Value{"project": s("projects/p"), "service_account_key": s(secret)}, `must be a project ID or number, without projects/`},
		{"influxdb valid", "influxdb", map[string]attr.Value{"address": s("http://influx:8086"), "org": s("o"), "token": s(secret)}, ""},
		{"influxdb empty token", "influxdb", map[string]attr.Value{"address": s("http://influx:8086"), "org": s("o"), "token": s("")}, `metric_templates["t"].influxdb.token is empty`},
		{"influxdb credentials in the address", "influxdb", map[string]attr.Value{"address": s("http://u:" + secret + "@influx:8086"), "org": s("o"), "token": s("tok-123")}, `must not carry credentials`},
		{"splunk valid", "splunk", map[string]attr.Value{"address": s("https://api.us1.signalfx.com"), "token": s(secret)}, ""},
		{"splunk address", "splunk", map[string]attr.Value{"address": s("us1"), "token": s(secret)}, `metric_templates["t"].splunk: address "us1" must be an http or https URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := templateObject("q", map[string]map[string]attr.Value{tc.backend: tc.fields})
			templates, secrets, diags := buildMetricTemplates(context.Background(), map[string]types.Object{"t": obj}, backend.Env{})
			var text string
			for _, d := range diags.Errors() {
				text += d.Summary() + ": " + d.Detail() + "\n"
			}
			if strings.Contains(text, secret) {
				t.Errorf("an error quotes the credential:\n%s", text)
			}
			if tc.want != "" {
				if !strings.Contains(text, tc.want) {
					t.Errorf("errors:\n%s\nwant one containing %q", text, tc.want)
				}
				return
			}
			if diags.HasError() || templates["t"].querier == nil {
				t.Fatalf("no querier: %s", text)
			}
			for _, f := range []string{"secret_access_key", "token"} {
				if v, ok := tc.fields[f]; ok && !slices.Contains(secrets, v.(types.String).ValueString()) {
					t.Errorf("%s is not among the secrets to mask: %q", f, secrets)
				}
			}
		})
	}
}

// TestCloudBackendWindowFollowsInterval: cloudwatch and splunk reach ten intervals of the
// metric back (Flagger's window), bound per metric when its template is applied.
func TestCloudBackendWindowFollowsInterval(t *testing.T) {
	s := types.StringValue
	for kind, fields := range map[string]map[string]attr.Value{
		"cloudwatch": {"region": s("eu-west-1"), "access_key_id": s("a"), "secret_access_key": s("b")},
		"splunk":     {"address": s("https://api.us1.signalfx.com"), "token": s("t")},
	} {
		obj := templateObject("q", map[string]map[string]attr.Value{kind: fields})
		templates, _, diags := buildMetricTemplates(context.Background(), map[string]types.Object{"t": obj}, backend.Env{})
		if diags.HasError() {
			t.Fatalf("%s: %v", kind, diags)
		}
		metric := rollout.Metric{Name: "m", Interval: "3s"}
		mm := MetricModel{TemplateRef: s("t"), TemplateVariables: types.MapNull(types.StringType)}
		if err := applyTemplate(0, mm, &metric, func(string) (metricTemplate, error) { return templates["t"], nil }); err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		w, ok := metric.Querier.(interface{ Window() time.Duration })
		if !ok {
			t.Fatalf("%s: the metric's querier %T has no window", kind, metric.Querier)
		}
		if got := w.Window(); got != 30*time.Second {
			t.Errorf("%s: window %s for a 3s interval, want 30s (ten intervals)", kind, got)
		}
		if _, ok := templates["t"].querier.(metrics.IntervalQuerier); !ok {
			t.Errorf("%s is not a metrics.IntervalQuerier", kind)
		}
	}
}

// A backend whose values are not known yet (a plan where they come from another resource) is
// neither refused nor built: a token unknown at plan time is not an empty token.
func TestBackendWithUnknownValuesWaits(t *testing.T) {
	s := types.StringValue
	for kind, fields := range map[string]map[string]attr.Value{
		"influxdb":  {"address": s("http://influx:8086"), "org": s("o"), "token": types.StringUnknown()},
		"splunk":    {"address": types.StringUnknown(), "token": s("t")},
		"datadog":   {"api_key": types.StringUnknown(), "application_key": s("k")},
		"dynatrace": {"address": s("https://abc.live.dynatrace.com"), "api_token": types.StringUnknown()},
	} {
		obj := templateObject("q", map[string]map[string]attr.Value{kind: fields})
		templates, _, diags := buildMetricTemplates(context.Background(), map[string]types.Object{"t": obj}, backend.Env{})
		if diags.HasError() {
			t.Errorf("%s with an unknown value: %v", kind, diags.Errors())
		}
		if templates["t"].querier != nil {
			t.Errorf("%s with an unknown value built a querier", kind)
		}
	}
}
