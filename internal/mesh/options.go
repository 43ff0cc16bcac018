package mesh

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Configurable is a driver with options of its own: attributes it adds to canary_release,
// their plan-time checks, and their decoding into the options its router receives in
// router.Spec.Options. The provider builds its schema and checks from the registry, so it
// never names these attributes; an attribute set with another mesh_provider is refused there,
// by the registry's knowledge of who owns it.
type Configurable interface {
	Driver
	// Options declares the attributes; it never changes.
	Options() Options
	// Validate checks, at plan time, a configuration whose mesh_provider is this driver's.
	// Values not known yet are skipped: Decode sees them at apply.
	Validate(ctx context.Context, v Values, diags *diag.Diagnostics)
	// Decode reads the values, all known, into the router's options.
	Decode(v Values) (any, error)
}

// Options are the attributes a driver adds to canary_release. Each keeps a
// MarkdownDescription: the docs are generated from the schema.
type Options struct {
	// Attributes are top-level attributes, by name.
	Attributes map[string]schema.Attribute
	// Service are attributes of the `service` block, by name.
	Service map[string]schema.Attribute
	// Mesh names the mesh in the error an attribute set with another mesh_provider gets
	// ("route_ref needs APISIX").
	Mesh string
}

// Values are a release's configuration as a driver's options are read from it: Attributes
// holds the top-level attributes that drivers own, Service every attribute of the `service`
// block. At plan time a value may be unknown; a missing or null one is not set.
type Values struct {
	Attributes map[string]attr.Value
	Service    map[string]attr.Value
}

// Object is the top-level attribute name as an object; null when not set.
func (v Values) Object(name string) types.Object {
	if o, ok := v.Attributes[name].(types.Object); ok {
		return o
	}
	return types.ObjectNull(nil)
}

// ServiceValue is the service block's attribute name; nil when the block has none.
func (v Values) ServiceValue(name string) attr.Value { return v.Service[name] }

// ServicePath is the path of the service block's attribute name, for diagnostics.
func ServicePath(name string) path.Path { return path.Root("service").AtName(name) }

// Narrowing is a driver some of whose capabilities depend on its options.
type Narrowing interface {
	// Narrow returns what caps become under the values, and names the values that took a
	// capability away for the error ("in upstream_group mode"). Values not known yet keep caps.
	Narrow(caps router.Capabilities, v Values) (router.Capabilities, string)
	// Condition says what the options must be for the capability has asks about, in errors
	// and docs that list the drivers having it (`gloo with gloo.mode = "route_table"`); empty
	// when the options do not matter to it.
	Condition(has func(router.Capabilities) bool) string
}

// GatewayMeasured is a driver whose built-in metrics may be measured at a gateway, which never
// sees the test traffic a blue/green analysis sends straight to the canary Service.
type GatewayMeasured interface {
	// MeasuredAtGateway reports it for the values; values not known yet report the default's.
	MeasuredAtGateway(v Values) bool
	// Unless names the option values whose metrics the canary's pods report
	// ("gateway_api.metrics other than envoy"); empty when none do.
	Unless() string
}

// Identified is a driver whose options name generated objects, so that they cannot change
// in place: the old objects would keep serving.
type Identified interface {
	// Identity lists those values; an error (a value not known yet) skips the check.
	Identity(v Values) ([]Identity, error)
}

// Identity is one value that names generated objects.
type Identity struct {
	// Path is the attribute, for the diagnostic; it also tells identities apart.
	Path  path.Path
	Value string
	// Summary is the diagnostic's summary ("route_ref cannot change in place").
	Summary string
	// Detail says what a change from was to now would leave behind; either may be empty (a
	// release of another mesh_provider has no such value).
	Detail func(was, now string) string
}

// RouteNamer is a router's options that name the user's route, the {{ route }} variable of
// metric queries (Flagger's routeRef); the target's name otherwise.
type RouteNamer interface {
	RouteName() string
}

// QuerySource is a router's options that choose its built-in metric queries; they replace
// the driver's Description.Queries.
type QuerySource interface {
	Queries() map[string]string
}
