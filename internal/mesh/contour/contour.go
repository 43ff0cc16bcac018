// Package contour is the mesh driver of Contour: an HTTPProxy <apex> with weighted services,
// which the user's root HTTPProxy includes, and header or query conditions for A/B testing.
package contour

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// HTTPProxyResource is the object the contour router writes.
var HTTPProxyResource = schema.GroupVersionResource{Group: "projectcontour.io", Version: "v1", Resource: "httpproxies"}

// Driver is the contour mesh_provider.
type Driver struct{}

// Describe declares weights and matching, as Flagger's contour router has: route conditions
// on headers and query parameters. Contour's mirror services and Flagger's session affinity
// are not offered.
func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "contour",
		Summary:      "an HTTPProxy `<apex>`, which your root HTTPProxy includes",
		Capabilities: router.Capabilities{Weighted: true, Match: true},
		Queries:      queries,
		RBACExample:  "role-contour.yaml",
		Guide:        "contour",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// queries are Flagger's contour observer: Envoy's cluster stats, which Contour names
// <namespace>_<service>_<port> (the cluster's alt_stat_name), so they judge the canary Service
// alone whatever its weight.
var queries = map[string]string{
	mesh.MetricSuccessRate: `sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"{{ namespace }}_{{ service }}-{{ side }}_[0-9a-zA-Z-]+",envoy_response_code!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"{{ namespace }}_{{ service }}-{{ side }}_[0-9a-zA-Z-]+"}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `histogram_quantile(0.99, sum(rate(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=~"{{ namespace }}_{{ service }}-{{ side }}_[0-9a-zA-Z-]+"}[{{ interval }}])) by (le))`,
}

// MeasuredAtGateway: Contour's Envoy reports the upstream clusters' requests at the proxy,
// which never sees the test traffic a blue/green analysis sends straight to the canary Service.
func (Driver) MeasuredAtGateway(mesh.Values) bool { return true }

// Unless: every built-in metric of Contour is the proxy's.
func (Driver) Unless() string { return "" }
