// Package gatewayapi is the mesh driver of the Gateway API: an HTTPRoute attached to the
// user's Gateways.
package gatewayapi

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/istio"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/linkerd"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Driver is the gatewayapi mesh_provider.
type Driver struct{}

func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "gatewayapi",
		Capabilities: router.Capabilities{Weighted: true, Match: true, Mirror: true, SessionAffinity: true},
		// Flagger's own choice; gateway_api.metrics picks another source (QueriesFrom).
		Queries:     mesh.AppQueries,
		RBACExample: "role-gatewayapi.yaml",
		Guide:       "gatewayapi",
		Summary:     "a Gateway API HTTPRoute attached to `service.gateway_refs`",
		Hosts:       "With `gatewayapi` they become the HTTPRoute's `spec.hostnames`, as written.",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// Metric sources (the gateway_api.metrics attribute). The Gateway API is only the routing
// object: what exports request metrics is the implementation behind it.
const (
	MetricsGeneric = "generic"
	MetricsEnvoy   = "envoy"
	MetricsIstio   = "istio"
	MetricsLinkerd = "linkerd"
)

// MetricsSources lists the gateway_api.metrics values; the first is the default.
var MetricsSources = []string{MetricsGeneric, MetricsEnvoy, MetricsIstio, MetricsLinkerd}

// QueriesFrom are the built-in queries of a release whose metrics come from source; an empty
// or unknown source gives the generic ones.
func QueriesFrom(source string) map[string]string {
	switch source {
	case MetricsEnvoy:
		return envoyQueries
	case MetricsIstio:
		return istio.Queries
	case MetricsLinkerd:
		return linkerd.Queries
	}
	return mesh.AppQueries
}

// envoyQueries read Envoy Gateway, which names the cluster of an HTTPRoute rule
// httproute/<namespace>/<route>/rule/<n>; the route is <apex> and its one rule holds both
// backends, so, as with APISIX, the canary's answers are read together with the primary's.
var envoyQueries = map[string]string{
	mesh.MetricSuccessRate: `sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"httproute/{{ namespace }}/{{ service }}/rule/[0-9]+",envoy_response_code!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"httproute/{{ namespace }}/{{ service }}/rule/[0-9]+"}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `histogram_quantile(0.99, sum(rate(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=~"httproute/{{ namespace }}/{{ service }}/rule/[0-9]+"}[{{ interval }}])) by (le))`,
}
