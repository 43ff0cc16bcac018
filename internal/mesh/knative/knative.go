// Package knative is the mesh driver of Knative Serving: the `traffic` of the user's Knative
// Service (serving.knative.dev/v1), split between a pinned primary revision and a pinned
// canary revision. It is the one driver that owns its target kind (mesh.TargetOwner) and the
// one router that edits the user's object: its `spec.traffic` and two annotations, nothing else.
package knative

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// The Knative resources the driver reads and writes.
var (
	ServiceResource  = k8sschema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "services"}
	RevisionResource = k8sschema.GroupVersionResource{Group: "serving.knative.dev", Version: "v1", Resource: "revisions"}
)

// The annotations the release keeps on the user's Knative Service: the revisions its split
// names. Flagger keeps the first as flagger.app/primary-revision and sends the canary's share
// to latestRevision; pinning the canary by name too keeps a revision nobody analysed (a
// template applied during the analysis) from taking that share the moment it is Ready.
const (
	AnnotationPrimaryRevision = "canary-release.dev/primary-revision"
	AnnotationCanaryRevision  = "canary-release.dev/canary-revision"
)

// Driver is the knative mesh_provider.
type Driver struct{}

// Describe declares a weighted split only, as Flagger's Knative router has.
func (Driver) Describe() mesh.Description {
	return mesh.Description{
		Name:         "knative",
		Capabilities: router.Capabilities{Weighted: true},
		Queries:      queries,
		RBACExample:  "role-knative.yaml",
		Guide:        "knative",
		Summary:      "the `traffic` of the user's Knative Service, between revisions",
	}
}

func (d Driver) NewRouter(c router.Clients, s router.Spec) router.Router {
	return newRouter(c, s, d.Describe().Capabilities)
}

// TargetKind: the target is a Knative Service.
func (Driver) TargetKind() mesh.TargetKind {
	return mesh.TargetKind{APIVersion: "serving.knative.dev/v1", Kind: "Service", Resource: ServiceResource}
}

// NewTarget is the release's Knative Service and its revisions.
func (Driver) NewTarget(c router.Clients, s router.Spec) mesh.Target { return newTarget(c, s) }

// queries are Flagger's Knative observer: the Envoy cluster stats of Kourier, Knative's
// ingress, whose cluster for a revision is "<namespace>/<revision>". {{ route }} is the canary
// revision, as Flagger renders it for Knative (the latest created revision).
var queries = map[string]string{
	mesh.MetricSuccessRate: `sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"{{ namespace }}/{{ route }}",envoy_response_code!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=~"{{ namespace }}/{{ route }}"}[{{ interval }}])) * 100`,
	mesh.MetricDuration: `histogram_quantile(0.99, sum(rate(envoy_cluster_upstream_rq_time_bucket{envoy_cluster_name=~"{{ namespace }}/{{ route }}"}[{{ interval }}])) by (le))`,
}

// MeasuredAtGateway: Kourier's Envoy measures the revisions' requests at the ingress.
func (Driver) MeasuredAtGateway(mesh.Values) bool { return true }

// Unless: every built-in metric of Knative is the ingress's.
func (Driver) Unless() string { return "" }

// Options: the driver adds no attribute; it is Configurable for its plan-time check.
func (Driver) Options() mesh.Options {
	return mesh.Options{Mesh: "Knative", Attributes: map[string]schema.Attribute{}}
}

// Validate: the driver adds no attribute; the provider checks that target_ref names a Knative
// Service (TargetKind).
func (Driver) Validate(context.Context, mesh.Values, *diag.Diagnostics) {}

// Decode: no options.
func (Driver) Decode(mesh.Values) (any, error) { return nil, nil }
