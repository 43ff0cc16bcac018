package apisix

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/tfschema"
)

// Options are what the apisix router needs beyond router.Spec.
type Options struct {
	// RouteRef is the user's ApisixRoute (Flagger's routeRef).
	RouteRef *router.Ref
}

// RouteName is the {{ route }} variable of the built-in queries: the user's route.
func (o Options) RouteName() string {
	if o.RouteRef == nil {
		return ""
	}
	return o.RouteRef.Name
}

// Options declares route_ref.
func (Driver) Options() mesh.Options {
	return mesh.Options{Mesh: "APISIX", Attributes: map[string]schema.Attribute{
		"route_ref": schema.SingleNestedAttribute{
			Optional: true,
			MarkdownDescription: "The user's ApisixRoute, in the release's namespace (Flagger's `routeRef`). Required when " +
				"`mesh_provider = \"apisix\"`. It is never modified: a separate `<route>-<apex>-canary` route with priority 10000 carries the split.",
			Attributes: map[string]schema.Attribute{
				"api_version": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("apisix.apache.org/v2"),
					MarkdownDescription: "API version of the route. Only `apisix.apache.org/v2`.",
					Validators:          []validator.String{stringvalidator.OneOf("apisix.apache.org/v2")}},
				"kind": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("ApisixRoute"),
					MarkdownDescription: "Kind of the route. Only `ApisixRoute`.",
					Validators:          []validator.String{stringvalidator.OneOf("ApisixRoute")}},
				"name": schema.StringAttribute{Required: true, MarkdownDescription: "Name of the referenced object."},
			},
		},
	}}
}

// Validate requires route_ref: the generated route copies the user's rule.
func (Driver) Validate(_ context.Context, v mesh.Values, diags *diag.Diagnostics) {
	if v.Object("route_ref").IsNull() {
		diags.AddAttributeError(path.Root("route_ref"), "Missing route_ref",
			`route_ref is required when mesh_provider = "apisix": it names the ApisixRoute whose rule sends traffic to the apex Service.`)
	}
}

type routeRefModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Kind       types.String `tfsdk:"kind"`
	Name       types.String `tfsdk:"name"`
}

// Decode reads route_ref.
func (Driver) Decode(v mesh.Values) (any, error) {
	var route routeRefModel
	ok, err := tfschema.Decode(v.Object("route_ref"), &route)
	if err != nil || !ok {
		return Options{}, tfschema.Prefixed("route_ref", err)
	}
	return Options{RouteRef: &router.Ref{APIVersion: route.APIVersion.ValueString(), Kind: route.Kind.ValueString(), Name: route.Name.ValueString()}}, nil
}

// Identity is the route's name: the generated route is named after it.
func (Driver) Identity(v mesh.Values) ([]mesh.Identity, error) {
	var route routeRefModel
	if _, err := tfschema.Decode(v.Object("route_ref"), &route); err != nil {
		return nil, err
	}
	return []mesh.Identity{{
		Path: path.Root("route_ref").AtName("name"), Value: route.Name.ValueString(),
		Summary: "route_ref cannot change in place",
		Detail: func(was, now string) string {
			return fmt.Sprintf("The generated route of %q would keep capturing traffic after the switch to %q.", was, now)
		},
	}}, nil
}

// MeasuredAtGateway: APISIX reports the generated route's requests, not the pods'.
func (Driver) MeasuredAtGateway(mesh.Values) bool { return true }

// Unless: every built-in metric of APISIX is the gateway's.
func (Driver) Unless() string { return "" }
