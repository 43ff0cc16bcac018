// Package mesh says what a mesh driver is: one mesh_provider described in one place (its
// router, what that router can do, its built-in metric queries, its RBAC example and guide),
// so that the provider and the engine ask a driver instead of naming a mesh. The drivers live
// in the packages below this one; internal/mesh/registry lists them.
package mesh

import "github.com/canary-release/terraform-provider-canary/internal/router"

// Driver is one mesh_provider.
type Driver interface {
	// Describe tells what the driver is and can do; it never changes.
	Describe() Description
	// NewRouter builds the router of one release.
	NewRouter(c router.Clients, s router.Spec) router.Router
}

// Description is what a driver declares about itself.
type Description struct {
	// Name is the mesh_provider value.
	Name string
	// Capabilities are declared here once: the plan checks read them, and the router refuses
	// what they leave out.
	Capabilities router.Capabilities
	// Queries are the built-in metric templates (request-success-rate, request-duration),
	// Flagger's observer queries for this mesh, by metric name.
	Queries map[string]string
	// RBACExample is the file under examples/rbac that holds the driver's Role.
	RBACExample string
	// Guide is the name of the driver's guide under docs/guides (without .md).
	Guide string
	// Summary says what the driver writes, in the mesh_provider description ("SMI
	// TrafficSplit v1alpha2").
	Summary string
	// Hosts says what the driver makes of service.hosts, in that attribute's description (a
	// sentence); empty says nothing.
	Hosts string
}

// The built-in metrics every driver offers.
const (
	MetricSuccessRate = "request-success-rate"
	MetricDuration    = "request-duration"
)

// AppQueries are Flagger's HttpObserver: the application's own histogram, in seconds, of the
// canary pods (<target>-<replicaset hash>-<suffix>), scaled to ms, under the pod labels the
// installation's Prometheus writes (Flagger's by default; metrics.PodLabels). They suit any router whose
// data plane measures nothing itself, so they belong to no one mesh.
var AppQueries = map[string]string{
	MetricSuccessRate: `sum(rate(http_request_duration_seconds_count{ {{ namespace_label }}="{{ namespace }}",{{ pod_label }}=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)",status!~"5.*"}[{{ interval }}]))` +
		` / sum(rate(http_request_duration_seconds_count{ {{ namespace_label }}="{{ namespace }}",{{ pod_label }}=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"}[{{ interval }}])) * 100`,
	MetricDuration: `histogram_quantile(0.99, sum(rate(http_request_duration_seconds_bucket{ {{ namespace_label }}="{{ namespace }}",{{ pod_label }}=~"{{ target }}-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"}[{{ interval }}])) by (le)) * 1000`,
}
