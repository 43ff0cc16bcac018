// Package metrics renders Flagger-style PromQL templates and runs them against Prometheus.
package metrics

import (
	"bytes"
	"fmt"
	"text/template"
)

// Vars are the values a query template can use, as Flagger's MetricTemplate functions:
// {{ name }}, {{ namespace }}, {{ target }}, {{ service }}, {{ ingress }}, {{ route }},
// {{ interval }} and {{ variables.key }}.
type Vars struct {
	Name, Namespace, Target, Service, Ingress, Route, Interval string
	Variables                                                  map[string]string
}

// builtins are Flagger's built-in queries (pkg/metrics/observers) for the routers this
// provider supports. The label matchers are Flagger's, so dashboards and alerts written for
// Flagger keep matching; request-duration is in milliseconds.
var builtins = map[string]map[string]string{
	"osm": {
		"request-success-rate": `sum(rate(osm_request_total{destination_namespace="{{ namespace }}",destination_kind="Deployment",destination_name="{{ target }}",response_code!~"5.*"}[{{ interval }}]))` +
			` / sum(rate(osm_request_total{destination_namespace="{{ namespace }}",destination_kind="Deployment",destination_name="{{ target }}"}[{{ interval }}])) * 100`,
		"request-duration": `histogram_quantile(0.99, sum(rate(osm_request_duration_ms_bucket{destination_namespace="{{ namespace }}",destination_kind="Deployment",destination_name="{{ target }}"}[{{ interval }}])) by (le))`,
	},
	// APISIX labels routes <namespace>_<ApisixRoute>_<rule> (prometheus plugin, prefer_name);
	// the generated route is <route_ref>-<apex>-canary.
	"apisix": {
		"request-success-rate": `sum(rate(apisix_http_status{route=~"{{ namespace }}_{{ route }}-{{ target }}-canary_.+",code!~"5.."}[{{ interval }}]))` +
			` / sum(rate(apisix_http_status{route=~"{{ namespace }}_{{ route }}-{{ target }}-canary_.+"}[{{ interval }}])) * 100`,
		"request-duration": `histogram_quantile(0.99, sum(rate(apisix_http_latency_bucket{type=~"request",route=~"{{ namespace }}_{{ route }}-{{ target }}-canary_.+"}[{{ interval }}])) by (le))`,
	},
	// Envoy names Gloo clusters <upstream>_<upstream namespace>.
	"gloo": {
		"request-success-rate": `sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"{{ namespace }}-{{ target }}-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+",envoy_response_code!~"5.*"}[{{ interval }}]))` +
			` / sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"{{ namespace }}-{{ target }}-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+"}[{{ interval }}])) * 100`,
		"request-duration": `histogram_quantile(0.99, sum(rate(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=~"{{ namespace }}-{{ target }}-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+"}[{{ interval }}])) by (le))`,
	},
	// Istio's standard metrics as the destination's sidecar reports them: only requests that
	// reached a canary pod (the target Deployment's workload) count.
	"istio": {
		"request-success-rate": `sum(rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload=~"{{ target }}",response_code!~"5.*"}[{{ interval }}]))` +
			` / sum(rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload=~"{{ target }}"}[{{ interval }}])) * 100`,
		"request-duration": `histogram_quantile(0.99, sum(rate(istio_request_duration_milliseconds_bucket{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload=~"{{ target }}"}[{{ interval }}])) by (le))`,
	},
}

// Builtin returns the built-in query template for a mesh provider's metric
// ("request-success-rate" or "request-duration").
func Builtin(provider, metric string) (query string, ok bool) {
	query, ok = builtins[provider][metric]
	return query, ok
}

// Render executes a query template. A missing variable is an error rather than an empty
// string, so a typo cannot silently produce a query that matches nothing.
func Render(query string, v Vars) (string, error) {
	t, err := parseQuery(query, v)
	if err != nil {
		return "", err
	}
	var out bytes.Buffer
	if err := t.Execute(&out, nil); err != nil {
		return "", fmt.Errorf("rendering query template: %w", err)
	}
	return out.String(), nil
}

// parseQuery parses a query template with Flagger's functions bound to v.
func parseQuery(query string, v Vars) (*template.Template, error) {
	str := func(s string) func() string { return func() string { return s } }
	funcs := template.FuncMap{
		"name":      str(v.Name),
		"namespace": str(v.Namespace),
		"target":    str(v.Target),
		"service":   str(v.Service),
		"ingress":   str(v.Ingress),
		"route":     str(v.Route),
		"interval":  str(v.Interval),
		// text/template evaluates `variables.key` as a field chain on the function's
		// result, so {{ variables.key }} indexes this map.
		"variables": func() map[string]string { return v.Variables },
	}
	t, err := template.New("query").Option("missingkey=error").Funcs(funcs).Parse(query)
	if err != nil {
		return nil, fmt.Errorf("parsing query template: %w", err)
	}
	return t, nil
}
