package metrics

// Built-in queries of the two HTTPRoute routers. They are kept apart from Flagger's per-mesh
// table (queries.go) because a gatewayapi release picks among several: the Gateway API is
// only the routing object, and what exports request metrics is the implementation behind it.

// Gateway API metric sources (the gateway_api.metrics attribute).
const (
	GatewayMetricsGeneric = "generic"
	GatewayMetricsEnvoy   = "envoy"
	GatewayMetricsIstio   = "istio"
	GatewayMetricsLinkerd = "linkerd"
)

// GatewayMetrics lists the gateway_api.metrics values; the first is the default.
var GatewayMetrics = []string{GatewayMetricsGeneric, GatewayMetricsEnvoy, GatewayMetricsIstio, GatewayMetricsLinkerd}

// GatewayBuiltinProvider is the Builtin provider key of a gatewayapi release whose metrics come
// from source: "gatewayapi" for generic (Flagger's own choice), else "gatewayapi:<source>".
func GatewayBuiltinProvider(source string) string {
	if source == "" || source == GatewayMetricsGeneric {
		return "gatewayapi"
	}
	return "gatewayapi:" + source
}

// linkerdQueries are Flagger's linkerd observer: the inbound side of the destination pods'
// proxies, whose deployment label is the canary Deployment (the primary is <target>-primary).
var linkerdQueries = map[string]string{
	"request-success-rate": `sum(rate(response_total{namespace="{{ namespace }}",deployment=~"{{ target }}",classification!="failure",direction="inbound"}[{{ interval }}]))` +
		` / sum(rate(response_total{namespace="{{ namespace }}",deployment=~"{{ target }}",direction="inbound"}[{{ interval }}])) * 100`,
	"request-duration": `histogram_quantile(0.99, sum(rate(response_latency_ms_bucket{namespace="{{ namespace }}",deployment=~"{{ target }}",direction="inbound"}[{{ interval }}])) by (le))`,
}

// genericQueries are Flagger's HttpObserver (gatewayapi, kubernetes): the application's own
// histogram, in seconds, of the canary pods (<target>-<replicaset hash>-<suffix>), scaled to ms.
var genericQueries = map[string]string{
	"request-success-rate": `sum(rate(http_request_duration_seconds_count{kubernetes_namespace="{{ namespace }}",kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)",status!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(http_request_duration_seconds_count{kubernetes_namespace="{{ namespace }}",kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"}[{{ interval }}])) * 100`,
	"request-duration": `histogram_quantile(0.99, sum(rate(http_request_duration_seconds_bucket{kubernetes_namespace="{{ namespace }}",kubernetes_pod_name=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"}[{{ interval }}])) by (le)) * 1000`,
}

var httpRouteBuiltins = map[string]map[string]string{
	"gatewayapi": genericQueries,
	// No mesh: the pods' own metrics are all there is.
	"kubernetes": genericQueries,
	// Envoy Gateway names the cluster of an HTTPRoute rule httproute/<namespace>/<route>/rule/<n>;
	// the route is <apex> and its one rule holds both backends, so, as with APISIX, the canary's
	// answers are read together with the primary's.
	"gatewayapi:envoy": {
		"request-success-rate": `sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"httproute/{{ namespace }}/{{ service }}/rule/[0-9]+",envoy_response_code!~"5.*"}[{{ interval }}]))` +
			` / sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"httproute/{{ namespace }}/{{ service }}/rule/[0-9]+"}[{{ interval }}])) * 100`,
		"request-duration": `histogram_quantile(0.99, sum(rate(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=~"httproute/{{ namespace }}/{{ service }}/rule/[0-9]+"}[{{ interval }}])) by (le))`,
	},
	// Flagger's istio observer: the canary pods' sidecars, as the destination reports them.
	"gatewayapi:istio": {
		"request-success-rate": `sum(rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload=~"{{ target }}",response_code!~"5.*"}[{{ interval }}]))` +
			` / sum(rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload=~"{{ target }}"}[{{ interval }}])) * 100`,
		"request-duration": `histogram_quantile(0.99, sum(rate(istio_request_duration_milliseconds_bucket{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload=~"{{ target }}"}[{{ interval }}])) by (le))`,
	},
	"gatewayapi:linkerd": linkerdQueries,
	"linkerd":            linkerdQueries,
}

func init() {
	for provider, queries := range httpRouteBuiltins {
		builtins[provider] = queries
	}
}
