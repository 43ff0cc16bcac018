// Package apisix is the mesh driver of Apache APISIX: a canary ApisixRoute beside the user's.
package apisix

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Driver is the apisix mesh_provider.
type Driver struct{}

func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "apisix",
		Capabilities: router.Capabilities{Weighted: true, Match: true},
		Queries:      queries,
		RBACExample:  "role-apisix.yaml",
		Guide:        "apisix",
		Summary:      "ApisixRoute v2",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// queries are Flagger's apisix observer. APISIX labels routes <namespace>_<ApisixRoute>_<rule>
// (prometheus plugin, prefer_name); the generated route is <route_ref>-<apex>-canary.
var queries = map[string]string{
	mesh.MetricSuccessRate: `sum(rate(apisix_http_status{route=~"{{ namespace }}_{{ route }}-{{ service }}-canary_.+",code!~"5.."}[{{ interval }}]))` +
		` / sum(rate(apisix_http_status{route=~"{{ namespace }}_{{ route }}-{{ service }}-canary_.+"}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `histogram_quantile(0.99, sum(rate(apisix_http_latency_bucket{type=~"request",route=~"{{ namespace }}_{{ route }}-{{ service }}-canary_.+"}[{{ interval }}])) by (le))`,
}
