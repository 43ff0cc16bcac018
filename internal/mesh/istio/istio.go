// Package istio is the mesh driver of Istio: a VirtualService and two DestinationRules.
package istio

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Driver is the istio mesh_provider.
type Driver struct{}

func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "istio",
		Capabilities: router.Capabilities{Weighted: true, Match: true, Mirror: true, SessionAffinity: true},
		Queries:      Queries,
		RBACExample:  "role-istio.yaml",
		Guide:        "istio",
		Summary:      "a VirtualService `<apex>` and DestinationRules `<apex>-primary` and `<apex>-canary`",
		Hosts:        "With `istio` they are the VirtualService's hosts, the apex added unless listed or covered by `*`.",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// Queries are Flagger's istio observer: Istio's standard metrics as the destination's sidecar
// reports them, so only requests that reached a canary pod (the target Deployment's workload)
// count. Exported for routers whose data plane may be Istio's (Gateway API).
var Queries = map[string]string{
	mesh.MetricSuccessRate: `sum(rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload=~"{{ target }}",response_code!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(istio_requests_total{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload=~"{{ target }}"}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `histogram_quantile(0.99, sum(rate(istio_request_duration_milliseconds_bucket{reporter="destination",destination_workload_namespace="{{ namespace }}",destination_workload=~"{{ target }}"}[{{ interval }}])) by (le))`,
}
