package gatewayapi

import (
	"context"

	"github.com/hashicorp/terraform-plugin-framework-validators/listvalidator"
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

// Options are what the gatewayapi router and its metrics need beyond router.Spec.
type Options struct {
	// GatewayRefs are the Gateways the generated HTTPRoute attaches to (its parentRefs).
	GatewayRefs []router.ParentRef
	// Metrics is the gateway_api.metrics source of the built-in queries; "" is generic.
	Metrics string
}

// Queries are the built-in queries of the chosen metrics source.
func (o Options) Queries() map[string]string { return QueriesFrom(o.Metrics) }

// Options declares service.gateway_refs and the gateway_api block.
func (Driver) Options() mesh.Options {
	return mesh.Options{Mesh: "the Gateway API",
		Attributes: map[string]schema.Attribute{
			"gateway_api": schema.SingleNestedAttribute{
				Optional:            true,
				MarkdownDescription: "Gateway API settings (`mesh_provider = \"gatewayapi\"` only).",
				Attributes: map[string]schema.Attribute{
					"metrics": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString(MetricsGeneric),
						MarkdownDescription: "Which metrics the built-in `request-success-rate` and `request-duration` read, as the Gateway API itself exports none: " +
							"`generic` (default; Flagger's: the application's `http_request_duration_seconds` histogram of the canary pods), " +
							"`envoy` (Envoy Gateway: `envoy_cluster_upstream_rq` of the cluster `httproute/<namespace>/<apex>/rule/0`, which holds both backends), " +
							"`istio` (Istio: `istio_requests_total` reported by the canary pods' sidecars) or " +
							"`linkerd` (Linkerd-meshed pods: `response_total` of the canary Deployment's inbound proxies).",
						Validators: []validator.String{stringvalidator.OneOf(MetricsSources...)}},
				},
			},
		},
		Service: map[string]schema.Attribute{
			"gateway_refs": schema.ListNestedAttribute{
				Optional: true,
				MarkdownDescription: "The Gateways the generated HTTPRoute `<apex>` attaches to: its `spec.parentRefs`, written as configured " +
					"(Flagger's `gatewayRefs`). Required when `mesh_provider = \"gatewayapi\"`, unused otherwise.",
				Validators: []validator.List{listvalidator.SizeAtLeast(1)},
				NestedObject: schema.NestedAttributeObject{Attributes: map[string]schema.Attribute{
					"name": schema.StringAttribute{Required: true, MarkdownDescription: "Name of the Gateway.",
						Validators: []validator.String{stringvalidator.LengthBetween(1, 253)}},
					"namespace": schema.StringAttribute{Optional: true,
						MarkdownDescription: "Namespace of the Gateway. Default: the release's namespace. The Gateway's listener must allow routes from it (`allowedRoutes`).",
						Validators:          []validator.String{tfschema.DNSLabel{}}},
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
			},
		},
	}
}

// Validate requires service.gateway_refs: the HTTPRoute needs a parent.
func (Driver) Validate(_ context.Context, v mesh.Values, diags *diag.Diagnostics) {
	refs, ok := v.ServiceValue("gateway_refs").(types.List)
	if ok && refs.IsNull() {
		diags.AddAttributeError(mesh.ServicePath("gateway_refs"), "Missing service.gateway_refs",
			`service.gateway_refs is required when mesh_provider = "gatewayapi": it names the Gateways (name, and optionally namespace, section_name, kind, group) the HTTPRoute attaches to.`)
	}
}

// gatewayRefModel is one service.gateway_refs entry: an HTTPRoute parentRef.
type gatewayRefModel struct {
	Name        types.String `tfsdk:"name"`
	Namespace   types.String `tfsdk:"namespace"`
	SectionName types.String `tfsdk:"section_name"`
	Kind        types.String `tfsdk:"kind"`
	Group       types.String `tfsdk:"group"`
}

type gatewayAPIModel struct {
	Metrics types.String `tfsdk:"metrics"`
}

// metrics is gateway_api.metrics; "" when unset or not known yet.
func metrics(v mesh.Values) string {
	var g gatewayAPIModel
	if ok, _ := tfschema.Decode(v.Object("gateway_api"), &g); ok {
		return g.Metrics.ValueString()
	}
	return ""
}

// Decode reads service.gateway_refs and gateway_api.
func (Driver) Decode(v mesh.Values) (any, error) {
	out := Options{Metrics: metrics(v)}
	list, _ := v.ServiceValue("gateway_refs").(types.List)
	var refs []gatewayRefModel
	if err := tfschema.DecodeElements(list, &refs); err != nil {
		return out, tfschema.Prefixed("service.gateway_refs", err)
	}
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
		out.GatewayRefs = append(out.GatewayRefs, p)
	}
	return out, nil
}

// MeasuredAtGateway: with Envoy Gateway's metrics, the gateway's cluster is measured.
func (Driver) MeasuredAtGateway(v mesh.Values) bool { return metrics(v) == MetricsEnvoy }

// Unless names the metrics sources the canary's pods report.
func (Driver) Unless() string { return "gateway_api.metrics other than envoy" }
