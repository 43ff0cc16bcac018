// Package gloo is the mesh driver of Gloo Edge: a RouteTable or an UpstreamGroup over
// generated Upstreams.
package gloo

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Driver is the gloo mesh_provider.
type Driver struct{}

// Describe declares A/B matching, which the route_table mode has; the router refuses it in
// the upstream_group mode.
func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "gloo",
		Capabilities: router.Capabilities{Weighted: true, Match: true},
		Queries:      queries,
		RBACExample:  "role-gloo.yaml",
		Guide:        "gloo",
		Summary:      "RouteTable or UpstreamGroup",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// queries are Flagger's gloo observer. Envoy names Gloo clusters <upstream>_<upstream namespace>.
var queries = map[string]string{
	mesh.MetricSuccessRate: `sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"{{ namespace }}-{{ service }}-{{ side }}upstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+",envoy_response_code!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"{{ namespace }}-{{ service }}-{{ side }}upstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+"}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `histogram_quantile(0.99, sum(rate(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=~"{{ namespace }}-{{ service }}-{{ side }}upstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+"}[{{ interval }}])) by (le))`,
}
