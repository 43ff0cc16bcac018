package provider

import (
	"context"
	"fmt"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/gatewayapi"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// GatewayRefModel is one service.gateway_refs entry: an HTTPRoute parentRef.
type GatewayRefModel struct {
	Name        types.String `tfsdk:"name"`
	Namespace   types.String `tfsdk:"namespace"`
	SectionName types.String `tfsdk:"section_name"`
	Kind        types.String `tfsdk:"kind"`
	Group       types.String `tfsdk:"group"`
}

// GatewayAPIModel is the gateway_api block.
type GatewayAPIModel struct {
	Metrics types.String `tfsdk:"metrics"`
}

func gatewayRefsAttribute() schema.ListNestedAttribute {
	return schema.ListNestedAttribute{
		Optional: true,
		MarkdownDescription: "The Gateways the generated HTTPRoute `<apex>` attaches to: its `spec.parentRefs`, written as configured " +
			"(Flagger's `gatewayRefs`). Required when `mesh_provider = \"gatewayapi\"`, unused otherwise.",
		Validators: []validator.List{listvalidator.SizeAtLeast(1)},
		NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
			"name": schema.StringAttribute{Required: true, MarkdownDescription: "Name of the Gateway.",
				Validators: []validator.String{stringvalidator.LengthBetween(1, 253)}},
			"namespace": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Namespace of the Gateway. Default: the release's namespace. The Gateway's listener must allow routes from it (`allowedRoutes`).",
				Validators:          []validator.String{dnsLabelValidator{}}},
			"section_name": schema.StringAttribute{Optional: true,
				MarkdownDescription: "Name of the Gateway listener to attach to. Default: every listener.",
				Validators:          []validator.String{stringvalidator.LengthBetween(1, 253)}},
			"kind": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(router.GatewayKind),
				MarkdownDescription: "Kind of the parent. Default `Gateway`.",
				Validators:          []validator.String{stringvalidator.LengthBetween(1, 63)}},
			"group": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(router.GatewayGroup),
				MarkdownDescription: "API group of the parent. Default `gateway.networking.k8s.io`.",
				Validators:          []validator.String{stringvalidator.LengthAtMost(253)}},
		}},
	}
}

func gatewayAPIAttribute() schema.SingleNestedAttribute {
	return schema.SingleNestedAttribute{
		Optional:            true,
		MarkdownDescription: "Gateway API settings (`mesh_provider = \"gatewayapi\"` only).",
		Attributes: map[string]schema.Attribute{
			"metrics": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(gatewayapi.MetricsGeneric),
				MarkdownDescription: "Which metrics the built-in `request-success-rate` and `request-duration` read, as the Gateway API itself exports none: " +
					"`generic` (default; Flagger's: the application's `http_request_duration_seconds` histogram of the canary pods), " +
					"`envoy` (Envoy Gateway: `envoy_cluster_upstream_rq` of the cluster `httproute/<namespace>/<apex>/rule/0`, which holds both backends), " +
					"`istio` (Istio: `istio_requests_total` reported by the canary pods' sidecars) or " +
					"`linkerd` (Linkerd-meshed pods: `response_total` of the canary Deployment's inbound proxies).",
				Validators: []validator.String{stringvalidator.OneOf(gatewayapi.MetricsSources...)}},
		},
	}
}

// gatewayRefs decodes service.gateway_refs into parentRefs.
func (m ReleaseModel) gatewayRefs() []router.ParentRef {
	var s ServiceModel
	if ok, _ := decode(m.Service, &s); !ok {
		return nil
	}
	var refs []GatewayRefModel
	if err := decodeElements(s.GatewayRefs, &refs); err != nil {
		return nil
	}
	out := make([]router.ParentRef, 0, len(refs))
	for _, r := range refs {
		p := router.ParentRef{Name: r.Name.ValueString(), Namespace: r.Namespace.ValueString(), SectionName: r.SectionName.ValueString(),
			Kind: r.Kind.ValueString(), Group: r.Group.ValueString()}
		// Null only before the schema defaults apply (a recorded spec of an older release).
		if r.Kind.IsNull() {
			p.Kind = router.GatewayKind
		}
		if r.Group.IsNull() {
			p.Group = router.GatewayGroup
		}
		out = append(out, p)
	}
	return out
}

// applyGatewayBuiltin resolves a built-in metric of a gatewayapi release to the query of the
// chosen gateway_api.metrics source, the way applyTemplate resolves a template_ref; the
// engine's own lookup by mesh_provider gives the generic queries.
func (m ReleaseModel) applyGatewayBuiltin(metric *rollout.Metric) {
	if m.MeshProvider.ValueString() != "gatewayapi" || metric.Query != "" {
		return
	}
	var g GatewayAPIModel
	if ok, _ := decode(m.GatewayAPI, &g); !ok {
		return
	}
	if q, ok := gatewayapi.QueriesFrom(g.Metrics.ValueString())[metric.Name]; ok {
		metric.Query = q
	}
}

// validateHTTPRouteConfig checks the attributes of the gatewayapi router at plan time.
func validateHTTPRouteConfig(ctx context.Context, m ReleaseModel, provider string, known bool, resp *resource.ValidateConfigResponse) {
	if !known {
		return
	}
	if provider != "gatewayapi" && isSet(m.GatewayAPI) {
		resp.Diagnostics.AddAttributeError(path.Root("gateway_api"), "gateway_api needs the Gateway API",
			fmt.Sprintf(`gateway_api is only used with mesh_provider = "gatewayapi", not %q.`, provider))
	}
	var s ServiceModel
	if !asKnown(ctx, m.Service, &s) || s.GatewayRefs.IsUnknown() {
		return
	}
	refs := path.Root("service").AtName("gateway_refs")
	switch {
	case provider == "gatewayapi" && s.GatewayRefs.IsNull():
		resp.Diagnostics.AddAttributeError(refs, "Missing service.gateway_refs",
			`service.gateway_refs is required when mesh_provider = "gatewayapi": it names the Gateways (name, and optionally namespace, section_name, kind, group) the HTTPRoute attaches to.`)
	case provider != "gatewayapi" && !s.GatewayRefs.IsNull():
		resp.Diagnostics.AddAttributeError(refs, "service.gateway_refs needs the Gateway API",
			fmt.Sprintf(`service.gateway_refs is only used with mesh_provider = "gatewayapi", not %q.`, provider))
	}
}
