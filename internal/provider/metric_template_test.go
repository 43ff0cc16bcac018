package provider

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/metrics/backend"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// templateSuccessRate is the built-in OSM success rate as a metric template: the workload kind
// and the response codes that count as failures are variables.
const templateSuccessRate = `sum(rate(osm_request_total{destination_namespace="{{ namespace }}",destination_kind="{{ variables.kind }}",destination_name="{{ target }}",response_code!~"{{ variables.failure }}"}[{{ interval }}]))
  / sum(rate(osm_request_total{destination_namespace="{{ namespace }}",destination_kind="{{ variables.kind }}",destination_name="{{ target }}"}[{{ interval }}])) * 100`

func stringMap(kv ...string) types.Map {
	elems := map[string]attr.Value{}
	for i := 0; i+1 < len(kv); i += 2 {
		elems[kv[i]] = types.StringValue(kv[i+1])
	}
	return types.MapValueMust(types.StringType, elems)
}

// fakeQuerier stands for a template's own Prometheus.
type fakeQuerier struct{ rollout.MetricQuerier }

func TestApplyTemplate(t *testing.T) {
	own := &fakeQuerier{}
	c := &clients{templates: map[string]metricTemplate{
		"success-rate": {query: templateSuccessRate, querier: own, variables: []string{"failure", "kind"}},
		"plain":        {query: "vector(1)"},
	}}
	metric := func(query, ref string, vars types.Map) MetricModel {
		m := MetricModel{Name: types.StringValue("m"), Query: types.StringNull(), TemplateRef: types.StringNull(), TemplateVariables: vars}
		if query != "" {
			m.Query = types.StringValue(query)
		}
		if ref != "" {
			m.TemplateRef = types.StringValue(ref)
		}
		return m
	}
	noVars := types.MapNull(types.StringType)
	decode := func(mm MetricModel, lookup lookupTemplate) (rollout.Metric, error) {
		m := rollout.Metric{Name: mm.Name.ValueString(), Query: mm.Query.ValueString()}
		err := applyTemplate(2, mm, &m, lookup)
		return m, err
	}

	got, err := decode(metric("", "success-rate", stringMap("kind", "Deployment", "failure", "5.*")), c.template)
	if err != nil {
		t.Fatal(err)
	}
	if got.Query != templateSuccessRate || got.Querier != own || got.Variables["kind"] != "Deployment" || got.Variables["failure"] != "5.*" {
		t.Errorf("template metric decoded as %+v", got)
	}
	rendered, err := metrics.Render(got.Query, metrics.Vars{Namespace: "test", Target: "podinfo", Interval: "1m", Variables: got.Variables})
	if err != nil || !strings.Contains(rendered, `destination_kind="Deployment",destination_name="podinfo",response_code!~"5.*"}[1m]`) {
		t.Errorf("rendered %q, %v", rendered, err)
	}
	if got, err := decode(metric("", "plain", noVars), c.template); err != nil || got.Query != "vector(1)" || got.Querier != nil {
		t.Errorf("a template without its own Prometheus decoded as %+v, %v; want the engine's Prometheus (nil querier)", got, err)
	}
	if got, err := decode(metric("", "undefined", noVars), nil); err != nil || got.Query != "" {
		t.Errorf("without a lookup the template is left unresolved: got %+v, %v", got, err)
	}
	if got, err := decode(metric("vector(2)", "", noVars), c.template); err != nil || got.Query != "vector(2)" || got.Querier != nil {
		t.Errorf("a plain query decoded as %+v, %v", got, err)
	}

	for _, tc := range []struct {
		name string
		m    MetricModel
		want string
	}{
		{"undefined template", metric("", "error-rate", noVars),
			`analysis.metrics[2].template_ref: metric template "error-rate" is not defined: the provider's metric_templates are "plain", "success-rate"`},
		{"missing variable", metric("", "success-rate", stringMap("kind", "Deployment")),
			`analysis.metrics[2].template_variables: metric template "success-rate" reads {{ variables.failure }}; set failure in template_variables.`},
		{"missing variables", metric("", "success-rate", noVars),
			`reads {{ variables.failure }}, {{ variables.kind }}; set failure, kind in template_variables.`},
		{"query and template_ref", metric("vector(1)", "plain", noVars), "analysis.metrics[2]: set only one of query and template_ref"},
		{"variables without template", metric("vector(1)", "", stringMap("kind", "Deployment")),
			"analysis.metrics[2].template_variables: only a metric with template_ref has variables"},
	} {
		if _, err := decode(tc.m, c.template); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want %q", tc.name, err, tc.want)
		}
	}
	if _, err := (&clients{}).template("x"); err == nil || !strings.Contains(err.Error(), "the provider defines no metric_templates") {
		t.Errorf("a provider without templates: %v", err)
	}
}

// templateObject is a metric template's object as the provider decodes it: query plus the
// backends of set, the other backends null.
func templateObject(query string, set map[string]map[string]attr.Value) types.Object {
	attrs := metricTemplateAttributes()
	types_ := map[string]attr.Type{}
	values := map[string]attr.Value{}
	for name, a := range attrs {
		types_[name] = a.GetType()
		if name == "query" {
			values[name] = types.StringValue(query)
			continue
		}
		ot := a.GetType().(types.ObjectType)
		given, ok := set[name]
		if !ok {
			values[name] = types.ObjectNull(ot.AttrTypes)
			continue
		}
		fields := map[string]attr.Value{}
		for field, ft := range ot.AttrTypes {
			if v, ok := given[field]; ok {
				fields[field] = v
				continue
			}
			v, err := ft.ValueFromTerraform(context.Background(), tftypes.NewValue(ft.TerraformType(context.Background()), nil))
			if err != nil {
				panic(err)
			}
			fields[field] = v
		}
		values[name] = types.ObjectValueMust(ot.AttrTypes, fields)
	}
	return types.ObjectValueMust(types_, values)
}

func TestBuildMetricTemplates(t *testing.T) {
	ctx := context.Background()
	models := map[string]types.Object{
		"default-prometheus": templateObject(`vector({{ variables.x }})`, nil),
		"own-prometheus": templateObject("vector(1)", map[string]map[string]attr.Value{"prometheus": {
			"username": types.StringValue("u"), "password": types.StringValue("pr0m-pass"), "headers": stringMap("X-Scope-OrgID", "tenant-secret"),
		}}),
	}
	templates, secrets, diags := buildMetricTemplates(ctx, models, backend.Env{PrometheusAddress: "http://prometheus.example:9090"})
	if diags.HasError() {
		t.Fatal(diags)
	}
	if d := templates["default-prometheus"]; d.querier != nil || len(d.variables) != 1 || d.variables[0] != "x" {
		t.Errorf("default-prometheus = %+v, want no querier of its own and the variable x", d)
	}
	if templates["own-prometheus"].querier == nil {
		t.Error("own-prometheus has no client of its own")
	}
	if strings.Join(secrets, ",") != "pr0m-pass,tenant-secret" {
		t.Errorf("secrets to mask = %v", secrets)
	}

	prom := func(kv ...string) map[string]map[string]attr.Value {
		fields := map[string]attr.Value{}
		for i := 0; i+1 < len(kv); i += 2 {
			fields[kv[i]] = types.StringValue(kv[i+1])
		}
		return map[string]map[string]attr.Value{"prometheus": fields}
	}
	for _, tc := range []struct {
		name      string
		model     types.Object
		dflt      string
		wantPath  path.Path
		wantError string
	}{
		{"no address anywhere", templateObject("vector(1)", prom()), "",
			path.Root("metric_templates").AtMapKey("t").AtName("prometheus").AtName("address"), "neither the provider's prometheus.address nor CANARY_PROMETHEUS_ADDRESS"},
		{"bad timeout", templateObject("vector(1)", prom("timeout", "soon")), "http://p:9090",
			path.Root("metric_templates").AtMapKey("t").AtName("prometheus").AtName("timeout"), `metric_templates["t"].prometheus.timeout must be a positive Go duration`},
		{"bad address", templateObject("vector(1)", prom("address", "prometheus:9090")), "",
			path.Root("metric_templates").AtMapKey("t").AtName("prometheus"), "must be an http or https URL"},
		{"query that does not parse", templateObject("{{ variables.x ", nil), "",
			path.Root("metric_templates").AtMapKey("t").AtName("query"), "parsing query template"},
	} {
		_, _, diags := buildMetricTemplates(ctx, map[string]types.Object{"t": tc.model}, backend.Env{PrometheusAddress: tc.dflt})
		if len(diags.Errors()) != 1 {
			t.Errorf("%s: diagnostics %v, want one error", tc.name, diags)
			continue
		}
		d := diags.Errors()[0]
		wp, ok := d.(interface{ Path() path.Path })
		if !ok || !wp.Path().Equal(tc.wantPath) || !strings.Contains(d.Detail(), tc.wantError) {
			t.Errorf("%s: error %q on %v, want %q on %s", tc.name, d.Detail(), d, tc.wantError, tc.wantPath)
		}
	}
}

// metricTemplateProvider is a provider block with metric templates; the provider's own
// Prometheus is unreachable.
func metricTemplateProvider(kubeconfig, templateProm string) string {
	prom := ""
	if templateProm != "" {
		prom = fmt.Sprintf("\n      prometheus = { address = %q }", templateProm)
	}
	return fmt.Sprintf(`terraform {
  required_providers {
    canary = { source = "canary-release/canary" }
  }
}

provider "canary" {
  kubernetes = { config_path = %q }
  prometheus = { address = "http://127.0.0.1:1" }
  metric_templates = {
    "success-rate" = {
      query      = <<-EOT
        %s
      EOT%s
    }
    "latency" = {
      query = "histogram_quantile(0.99, sum(rate(osm_request_duration_ms_bucket{destination_name=\"{{ target }}\"}[{{ interval }}])) by (le))"
    }
  }
}
`, kubeconfig, strings.ReplaceAll(templateSuccessRate, "\n", "\n        "), prom)
}

// TestMetricTemplateConfigurations plans configurations with the real CLI and no cluster:
// what ValidateConfig sees without the provider's configuration, and what the plan checks
// against the provider's metric_templates.
func TestMetricTemplateConfigurations(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	metric := func(attrs string) string {
		return "[{ name = \"success\", interval = \"10s\", threshold_range = { min = 99 }, " + attrs + " }]"
	}
	config := func(provider, metrics string) string {
		return provider + fmt.Sprintf(`
resource "canary_release" "test" {
%s  analysis = {
%s  }
}
`, renderAttrs(invalidConfigBase, nil, "  "), renderAttrs(invalidConfigAnalysis, map[string]string{"metrics": metrics, "webhooks": ""}, "    "))
	}
	withTemplates := metricTemplateProvider(kubeconfig, "http://prometheus.monitoring:9090")
	noTemplates := withTemplates[:strings.Index(withTemplates, "  metric_templates")] + "}\n"
	// withWeb adds a template "summary" that reads query from a web backend.
	withWeb := func(query, web string) string {
		return strings.Replace(withTemplates, "  metric_templates = {\n",
			fmt.Sprintf("  metric_templates = {\n    \"summary\" = {\n      query = %q\n      web   = { %s }\n    }\n", query, web), 1)
	}
	const webGET = `url = "http://sim:8080/api/summary", json_path = "{$.data.x}", headers = { Authorization = "Bearer s3cr3t" }`
	laterValues := `
resource "terraform_data" "later" {
  input = { ref = "undefined", vars = { kind = "Deployment" } }
}
`
	for _, tc := range []struct {
		name, provider, metrics string
		// want are the phrases of the expected error; none expects a plan.
		want []string
	}{
		{"valid", withTemplates, metric(`template_ref = "success-rate", template_variables = { kind = "Deployment", failure = "5.*" }`), nil},
		// Known only at apply, where applyTemplate checks them.
		{"template_variables unknown at plan", withTemplates + laterValues, metric(`template_ref = "success-rate", template_variables = terraform_data.later.output.vars`), nil},
		{"template_ref unknown at plan", withTemplates + laterValues, metric(`template_ref = terraform_data.later.output.ref`), nil},
		{"undefined template", withTemplates, metric(`template_ref = "error-rate"`),
			[]string{"Unknown metric template", `analysis.metrics[0].template_ref: metric template "error-rate" is not defined: the provider's metric_templates are "latency", "success-rate".`}},
		{"no templates at all", noTemplates, metric(`template_ref = "latency"`),
			[]string{`analysis.metrics[0].template_ref: metric template "latency" is not defined: the provider defines no metric_templates.`}},
		{"missing template variable", withTemplates, metric(`template_ref = "success-rate", template_variables = { kind = "Deployment" }`),
			[]string{"Missing template variables", `analysis.metrics[0].template_variables: metric template "success-rate" reads {{ variables.failure }}; set failure in template_variables.`}},
		{"no template variables", withTemplates, metric(`template_ref = "success-rate"`),
			[]string{`reads {{ variables.failure }}, {{ variables.kind }}; set failure, kind in template_variables.`}},
		{"query and template_ref", withTemplates, metric(`template_ref = "latency", query = "vector(1)"`),
			[]string{"Conflicting query and template_ref", `analysis.metrics[0]: set only one of query and template_ref: template_ref takes the query of the provider's metric template "latency".`}},
		{"template_variables without template_ref", withTemplates, metric(`query = "vector(1)", template_variables = { kind = "Deployment" }`),
			[]string{"analysis.metrics[0].template_variables: only a metric template reads variables; set template_ref"}},
		{"empty template_ref", withTemplates, metric(`template_ref = ""`),
			[]string{"Attribute analysis.metrics[0].template_ref string length must be at least 1"}},
		{"variables in a plain query", withTemplates, metric(`query = "vector({{ variables.x }})"`),
			[]string{"analysis.metrics[0].query must be a PromQL query", `no entry for key "x"`, "Only a metric template has variables: move the query to the provider's metric_templates"}},
		{"template query that does not parse", strings.Replace(withTemplates, `[{{ interval }}])) by (le))`, `[{{ interval }])) by (le))`, 1), metric(`template_ref = "latency"`),
			[]string{`metric_templates["latency"].query must be a PromQL query, as a Go template that uses only the variables`, "`{{ variables.<key> }}`", "parsing query template"}},
		{"template query with an unknown function", strings.Replace(withTemplates, `{{ target }}`, `{{ cluster }}`, 1), metric(`template_ref = "latency"`),
			[]string{`function "cluster" not defined`}},
		{"template prometheus timeout", strings.Replace(withTemplates, `prometheus = { address = "http://prometheus.monitoring:9090" }`,
			`prometheus = { address = "http://prometheus.monitoring:9090", timeout = "-1s" }`, 1), metric(`template_ref = "latency"`),
			[]string{`metric_templates["success-rate"].prometheus.timeout must be a positive Go duration such as "30s", got -1s.`}},
		{"two backends", strings.Replace(withTemplates, `prometheus = { address = "http://prometheus.monitoring:9090" }`,
			`prometheus = { address = "http://prometheus.monitoring:9090" }
      datadog    = { api_key = "k", application_key = "a" }`, 1), metric(`template_ref = "latency"`),
			[]string{"Several metric backends", `metric_templates["success-rate"] sets datadog and prometheus: a metric template reads exactly one backend`}},
		{"backend plan check", strings.Replace(withTemplates, `prometheus = { address = "http://prometheus.monitoring:9090" }`,
			`web = { url = "http://sim:8080/summary", json_path = "{$.data.x", method = "PUT" }`, 1), metric(`template_ref = "latency"`),
			[]string{"Invalid web configuration", `metric_templates["success-rate"].web: web method must be GET or POST, got "PUT".`}},
		{"web path and query", withWeb("/api/v1/{{ namespace }}?workload={{ target }}&window={{ interval }}", webGET), metric(`template_ref = "summary"`), nil},
		{"web POST body naming a URL", withWeb(`{"from":"http://other.example/x"}`, webGET+`, method = "POST"`), metric(`template_ref = "summary"`), nil},
		{"web query naming another host", withWeb("http://other.example/x?ns={{ namespace }}", webGET), metric(`template_ref = "latency"`),
			[]string{"Invalid query for its backend", `metric_templates["summary"].query must be a path and query on the backend's url, such as /api/v1/x?y=z or ?y=z;`,
				`it is an absolute URL (scheme "http"), which would send the request and its headers elsewhere.`}},
		{"web scheme-relative query once rendered", withWeb("//{{ variables.host }}/x", webGET+`, method = "GET"`), metric(`template_ref = "latency"`),
			[]string{`metric_templates["summary"].query must be a path and query on the backend's url`, "it starts with //, which names another host.",
				`(Rendered with each variable as its own name: "//host/x".)`}},
		{"web query with a backslash", withWeb(`/\other.example/x`, webGET), metric(`template_ref = "latency"`),
			[]string{`metric_templates["summary"].query must be a path and query on the backend's url`, "its path has a backslash"}},
		{"bearer token through the service proxy", strings.Replace(withTemplates, `prometheus = { address = "http://prometheus.monitoring:9090" }`,
			`prometheus = { address = "http://prometheus.monitoring:9090", bearer_token = "t0ken" }`, 1), metric(`template_ref = "latency"`),
			[]string{"Invalid Prometheus configuration", `metric_templates["success-rate"].prometheus: prometheus address http://prometheus.monitoring:9090 names a cluster Service`,
				"so a bearer token or basic auth cannot reach Prometheus"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			step := resource.TestStep{Config: config(tc.provider, tc.metrics), PlanOnly: true, ExpectNonEmptyPlan: tc.want == nil}
			if tc.want != nil {
				step.ExpectError = phrasesRegexp(tc.want)
			}
			resource.UnitTest(t, resource.TestCase{ProtoV6ProviderFactories: testAccProtoV6ProviderFactories, Steps: []resource.TestStep{step}})
		})
	}
}

// TestAccRelease_metricTemplate: the provider's own Prometheus is unreachable, and a metric
// template points at the stack's. A metric that uses the template with its variables promotes;
// with a variable that counts every answer as a failure, the same template measures 0 and the
// release rolls back, naming the metric, its value and its range.
func TestAccRelease_metricTemplate(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	w := c.workdir(t)
	write := func(image, failure string) {
		t.Helper()
		analysis := fmt.Sprintf(`
    interval    = "2s"
    step_weight = 50
    max_weight  = 100
    metrics = [
      {
        name               = "success-rate"
        interval           = "10s"
        template_ref       = "success-rate"
        template_variables = { kind = "Deployment", failure = %q }
        threshold_range    = { min = 99 }
      },
    ]`, failure)
		config := metricTemplateProvider(c.env.Kubeconfig, c.env.PrometheusURL) + releaseConfig(ns, manifestWorkload(image, "0"), analysis, "")
		if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	apply := func(image, failure string, wantErr bool) string {
		t.Helper()
		write(image, failure)
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
	apply("podinfo:6.0.0", "5.*", false)
	apply("podinfo:6.0.1", "5.*", false)
	c.judge(t, ns, "podinfo:6.0.1")

	out := apply("podinfo:6.0.2", "2.*", true)
	if want := wrapped(`metric success-rate returned 0.00, outside threshold_range [min 99]`); !want.MatchString(out) {
		t.Errorf("the failed apply does not name the metric, its value and its range:\n%s", tail(out, 4000))
	}
	c.judge(t, ns, "podinfo:6.0.1")
}
