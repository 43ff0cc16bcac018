// Package nginx is the mesh driver of ingress-nginx, which its maintainers retired in March
// 2026 (legacy: new releases should use traefik or gatewayapi). It writes a canary Ingress
// <ingress>-canary beside the user's Ingress (ingress_ref), a copy of it that leads to the canary
// Service, and carries the split and the A/B header or cookie in its
// nginx.ingress.kubernetes.io/canary annotations, as Flagger's nginx router does.
package nginx

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// IngressResource is the object the nginx router reads (the user's) and writes (the canary one).
var IngressResource = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}

// Driver is the nginx mesh_provider.
type Driver struct{}

// Describe declares weights and matching (one header and one cookie, see matchAnnotations).
// ingress-nginx has no request mirroring on canaries, and Flagger's router keeps no sessions.
func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "nginx",
		Capabilities: router.Capabilities{Weighted: true, Match: true},
		Queries:      queries,
		RBACExample:  "role-nginx.yaml",
		Guide:        "nginx",
		Summary:      "a canary Ingress `<ingress>-canary` beside `ingress_ref`; legacy, ingress-nginx was retired in March 2026",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// queries are Flagger's nginx observer: the controller's request counter and response time of
// the user's Ingress (which a canary Ingress's requests are counted under), narrowed to the
// requests the canary upstream took (canary is its name, empty for the others). The duration
// is the mean, in ms.
var queries = map[string]string{
	mesh.MetricSuccessRate: `sum(rate(nginx_ingress_controller_requests{namespace="{{ namespace }}",ingress="{{ ingress }}",canary!="",status!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(nginx_ingress_controller_requests{namespace="{{ namespace }}",ingress="{{ ingress }}",canary!=""}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `sum(rate(nginx_ingress_controller_response_duration_seconds_sum{namespace="{{ namespace }}",ingress="{{ ingress }}",canary!=""}[{{ interval }}]))` +
		` / sum(rate(nginx_ingress_controller_response_duration_seconds_count{namespace="{{ namespace }}",ingress="{{ ingress }}",canary!=""}[{{ interval }}])) * 1000`,
}

// Queries are the built-in queries with {{ ingress }} as Flagger renders it: ingress_ref's
// name (the engine renders that variable as the target's name).
func (o Options) Queries() map[string]string {
	name := o.ingressName()
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return queries
	}
	out := make(map[string]string, len(queries))
	for metric, q := range queries {
		out[metric] = strings.ReplaceAll(q, "{{ ingress }}", name)
	}
	return out
}

// MeasuredAtGateway: the ingress controller reports the requests it proxies, never the test
// traffic a blue/green analysis sends straight to the canary Service.
func (Driver) MeasuredAtGateway(mesh.Values) bool { return true }

// Unless: every built-in metric of nginx is the controller's.
func (Driver) Unless() string { return "" }
