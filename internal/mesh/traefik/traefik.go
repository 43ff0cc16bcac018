// Package traefik is the mesh driver of Traefik: a TraefikService <apex> that splits by weight
// between the primary and canary Services (or mirrors to the canary), which the user's own
// IngressRoute sends its traffic to.
package traefik

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Resources the traefik router reads or writes (traefik.io/v1alpha1, the only version Traefik
// v3 serves).
var (
	TraefikServiceResource = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "traefikservices"}
	IngressRouteResource   = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "ingressroutes"}
)

// Driver is the traefik mesh_provider.
type Driver struct{}

// Describe declares weights and mirroring: a TraefikService is either weighted or mirroring,
// and Flagger's traefik router matches no requests (no A/B testing) and keeps no sessions.
func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "traefik",
		Summary:      "a weighted TraefikService `<apex>`, which your IngressRoute names",
		Capabilities: router.Capabilities{Weighted: true, Mirror: true},
		Queries:      queries,
		RBACExample:  "role-traefik.yaml",
		Guide:        "traefik",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// queries are Flagger's traefik observer. Traefik labels a Kubernetes Service that a
// TraefikService names <namespace>-<service>-<port>@kubernetescrd; its histogram counts in
// seconds, so the duration is scaled to ms (Flagger reads the seconds as ms). Traefik creates a
// series at the first request of its code, so a side that failed every request has no
// non-5xx series: "or on() vector(0)" reads that as 0 %, where Flagger's query finds no values
// (and blames missing traffic); a side without any request still has no value.
var queries = map[string]string{
	mesh.MetricSuccessRate: `(sum(rate(traefik_service_request_duration_seconds_bucket{service=~"{{ namespace }}-{{ service }}-{{ side }}-[0-9a-zA-Z-]+@kubernetescrd",code!~"5..",le="+Inf"}[{{ interval }}])) or on() vector(0))` +
		` / sum(rate(traefik_service_request_duration_seconds_bucket{service=~"{{ namespace }}-{{ service }}-{{ side }}-[0-9a-zA-Z-]+@kubernetescrd",le="+Inf"}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `histogram_quantile(0.99, sum(rate(traefik_service_request_duration_seconds_bucket{service=~"{{ namespace }}-{{ service }}-{{ side }}-[0-9a-zA-Z-]+@kubernetescrd"}[{{ interval }}])) by (le)) * 1000`,
}

// MeasuredAtGateway: Traefik reports the TraefikService's requests at the proxy, which never
// sees the test traffic a blue/green analysis sends straight to the canary Service.
func (Driver) MeasuredAtGateway(mesh.Values) bool { return true }

// Unless: every built-in metric of Traefik is the proxy's.
func (Driver) Unless() string { return "" }
