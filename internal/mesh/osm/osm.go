// Package osm is the mesh driver of Open Service Mesh: an SMI TrafficSplit, weights only.
package osm

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Driver is the osm mesh_provider.
type Driver struct{}

func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "osm",
		Capabilities: router.Capabilities{Weighted: true},
		Queries:      queries,
		RBACExample:  "role-osm.yaml",
		Guide:        "osm",
		Summary:      "SMI TrafficSplit v1alpha2",
		Hosts:        "With `osm`, `hosts[0]` becomes the TrafficSplit's root service instead of the apex.",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// queries are Flagger's osm observer.
var queries = map[string]string{
	mesh.MetricSuccessRate: `sum(rate(osm_request_total{destination_namespace="{{ namespace }}",destination_kind="{{ target_kind }}",destination_name="{{ target }}",response_code!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(osm_request_total{destination_namespace="{{ namespace }}",destination_kind="{{ target_kind }}",destination_name="{{ target }}"}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `histogram_quantile(0.99, sum(rate(osm_request_duration_ms_bucket{destination_namespace="{{ namespace }}",destination_kind="{{ target_kind }}",destination_name="{{ target }}"}[{{ interval }}])) by (le))`,
}
