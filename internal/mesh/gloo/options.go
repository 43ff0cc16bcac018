package gloo

import (
	"context"
	"fmt"
	"strconv"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/tfschema"
)

// The gloo.mode values.
const (
	ModeRouteTable    = "route_table"
	ModeUpstreamGroup = "upstream_group"
)

// Options are what the gloo router needs beyond router.Spec.
type Options struct {
	// Mode is ModeRouteTable (the default, also for "") or ModeUpstreamGroup.
	Mode string
	// UpstreamRef is a Gloo Upstream whose settings the generated Upstreams copy.
	UpstreamRef *router.Ref
}

// Options declares upstream_ref and the gloo block.
func (Driver) Options() mesh.Options {
	return mesh.Options{Mesh: "Gloo", Attributes: map[string]schema.Attribute{
		"upstream_ref": schema.SingleNestedAttribute{
			Optional: true,
			MarkdownDescription: "A Gloo Upstream whose connection, load-balancer, circuit-breaker, SSL and http2 settings the " +
				"generated Upstreams copy (Flagger's `upstreamRef`). Later changes to its `loadBalancerConfig` are followed. Gloo only.",
			Attributes: map[string]schema.Attribute{
				"api_version": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("gloo.solo.io/v1"),
					MarkdownDescription: "API version of the Upstream. Only `gloo.solo.io/v1`.",
					Validators:          []validator.String{stringvalidator.OneOf("gloo.solo.io/v1")}},
				"kind": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("Upstream"),
					MarkdownDescription: "Kind of the object. Only `Upstream`.",
					Validators:          []validator.String{stringvalidator.OneOf("Upstream")}},
				"name":      schema.StringAttribute{Required: true, MarkdownDescription: "Name of the referenced object."},
				"namespace": schema.StringAttribute{Optional: true, MarkdownDescription: "Namespace of the Upstream. Default: the release's namespace."},
			},
		},
		"gloo": schema.SingleNestedAttribute{
			Optional:            true,
			MarkdownDescription: "Gloo settings.",
			Attributes: map[string]schema.Attribute{
				"mode": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(ModeRouteTable),
					MarkdownDescription: "`route_table` (default, today's Flagger: a RouteTable `<apex>` that the VirtualService delegates to; " +
						"the only mode that can do A/B later) or `upstream_group` (an UpstreamGroup `<apex>` that any route can point at " +
						"with `routeAction.upstreamGroup`; the VirtualService is never touched).",
					Validators: []validator.String{stringvalidator.OneOf(ModeRouteTable, ModeUpstreamGroup)}},
			},
		},
	}}
}

// Validate has nothing to add: Narrow tells A/B testing's plan check about the mode.
func (Driver) Validate(context.Context, mesh.Values, *diag.Diagnostics) {}

type upstreamRefModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Kind       types.String `tfsdk:"kind"`
	Name       types.String `tfsdk:"name"`
	Namespace  types.String `tfsdk:"namespace"`
}

type glooModel struct {
	Mode types.String `tfsdk:"mode"`
}

// mode is gloo.mode; ModeRouteTable when unset or not known yet.
func mode(v mesh.Values) string {
	var g glooModel
	if ok, _ := tfschema.Decode(v.Object("gloo"), &g); ok && g.Mode.ValueString() != "" {
		return g.Mode.ValueString()
	}
	return ModeRouteTable
}

// Decode reads upstream_ref and gloo.mode.
func (Driver) Decode(v mesh.Values) (any, error) {
	out := Options{Mode: mode(v)}
	var up upstreamRefModel
	if ok, err := tfschema.Decode(v.Object("upstream_ref"), &up); err != nil {
		return out, tfschema.Prefixed("upstream_ref", err)
	} else if ok {
		out.UpstreamRef = &router.Ref{APIVersion: up.APIVersion.ValueString(), Kind: up.Kind.ValueString(),
			Name: up.Name.ValueString(), Namespace: up.Namespace.ValueString()}
	}
	return out, nil
}

// Narrow: an UpstreamGroup is only a weighted list of destinations, so it cannot match
// requests (A/B testing).
func (Driver) Narrow(caps router.Capabilities, v mesh.Values) (router.Capabilities, string) {
	if m := mode(v); m != ModeRouteTable {
		caps.Match = false
		return caps, "in " + m + " mode"
	}
	return caps, ""
}

// Condition names the mode A/B testing needs.
func (Driver) Condition(has func(router.Capabilities) bool) string {
	if has(router.Capabilities{Match: true}) {
		return `gloo with gloo.mode = "route_table"`
	}
	return ""
}

// Identity is service.port: the generated Upstreams embed it in their names.
func (Driver) Identity(v mesh.Values) ([]mesh.Identity, error) {
	port, ok := v.ServiceValue("port").(types.Int64)
	if !ok || port.IsUnknown() {
		return nil, tfschema.ErrUnknown
	}
	value := ""
	if !port.IsNull() {
		value = strconv.FormatInt(port.ValueInt64(), 10)
	}
	return []mesh.Identity{{
		Path: mesh.ServicePath("port"), Value: value,
		Summary: "service.port cannot change in place with Gloo",
		Detail: func(was, now string) string {
			return fmt.Sprintf("The generated Gloo Upstreams embed the port in their names (%s → %s), so the old ones would be left behind.", orZero(was), orZero(now))
		},
	}}, nil
}

func orZero(port string) string {
	if port == "" {
		return "0"
	}
	return port
}

// MeasuredAtGateway: Gloo's Envoy reports the generated Upstreams' requests, not the pods'.
func (Driver) MeasuredAtGateway(mesh.Values) bool { return true }

// Unless: every built-in metric of Gloo is the gateway's.
func (Driver) Unless() string { return "" }
