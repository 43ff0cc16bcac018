// Package linkerd is the mesh driver of Linkerd: an HTTPRoute in the Gateway API's mesh form,
// whose parent is the apex Service.
package linkerd

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Driver is the linkerd mesh_provider.
type Driver struct{}

// Describe declares matching only: Linkerd's proxies match headers and query parameters but
// do not mirror, and Flagger offers session affinity with Istio and Gateway API only.
func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "linkerd",
		Capabilities: router.Capabilities{Weighted: true, Match: true},
		Queries:      Queries,
		// The gatewayapi Role covers HTTPRoutes; its Gateway rule is optional here.
		RBACExample: "role-gatewayapi.yaml",
		Guide:       "linkerd",
		Summary:     "a Gateway API HTTPRoute whose parent is the apex Service",
		Hosts:       "Unused by `linkerd`.",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// Queries are Flagger's linkerd observer: the inbound side of the destination pods' proxies,
// whose deployment label is the canary Deployment (the primary is <target>-primary). Exported
// for routers whose data plane may be Linkerd's (Gateway API).
var Queries = map[string]string{
	mesh.MetricSuccessRate: `sum(rate(response_total{namespace="{{ namespace }}",{{ target_kind_label }}=~"{{ target }}",classification!="failure",direction="inbound"}[{{ interval }}]))` +
		` / sum(rate(response_total{namespace="{{ namespace }}",{{ target_kind_label }}=~"{{ target }}",direction="inbound"}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `histogram_quantile(0.99, sum(rate(response_latency_ms_bucket{namespace="{{ namespace }}",{{ target_kind_label }}=~"{{ target }}",direction="inbound"}[{{ interval }}])) by (le))`,
}
