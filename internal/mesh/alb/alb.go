// Package alb is the mesh driver of the AWS Load Balancer Controller: a generated Ingress in
// the IngressGroup of the user's Ingress (ingress_ref), whose rule forwards to a weighted
// `forward` action between the primary and canary target groups, with header and query
// string conditions for A/B testing, as Argo Rollouts' ALB traffic routing writes them.
package alb

import (
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// IngressResource is the object the alb router reads (the user's) and writes (the generated one).
var IngressResource = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}

// Driver is the alb mesh_provider.
type Driver struct{}

// Describe declares weights and matching (ALB listener rule conditions on headers and query
// strings). Mirroring: ALB has no mirror action. Session affinity is left out: target group
// stickiness binds a client to whichever target group answered first, primary included, under
// ALB's own cookie, and it outweighs the weights, so a rolled-back canary at weight 0 would keep
// its sticky clients; Flagger's session_affinity (a named cookie that only holds while the
// canary's weight is above 0) cannot be written with it.
//
// No built-in metrics: an ALB reports to CloudWatch (RequestCount, HTTPCode_Target_5XX_Count,
// TargetResponseTime per target group), not to Prometheus, and the provider has no CloudWatch
// metric provider yet; every metric needs a query.
func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "alb",
		Capabilities: router.Capabilities{Weighted: true, Match: true},
		RBACExample:  "role-alb.yaml",
		Guide:        "alb",
		Summary:      "AWS Load Balancer Controller weighted forward action on an Ingress generated in the IngressGroup of `ingress_ref`",
		Hosts:        "Unused by `alb`, whose generated Ingress copies the hosts of the `ingress_ref` rules that send to the apex Service.",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// MeasuredAtGateway: an ALB's metrics (CloudWatch's, per target group) count the load
// balancer's requests, never the test traffic a blue/green analysis sends straight to the
// canary Service.
func (Driver) MeasuredAtGateway(mesh.Values) bool { return true }

// Unless: no option makes the canary's pods report them.
func (Driver) Unless() string { return "" }
