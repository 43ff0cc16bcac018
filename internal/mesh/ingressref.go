package mesh

import (
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework-validators/stringvalidator"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema/stringdefault"
	"github.com/hashicorp/terraform-plugin-framework/schema/validator"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/tfschema"
)

// The user's Ingress, Flagger's ingressRef: every driver that reads it (nginx, skipper, alb)
// declares it from here, so that it is one attribute with several owners, shaped alike.

// IngressRefAttribute is the top-level ingress_ref attribute.
func IngressRefAttribute() schema.Attribute {
	return schema.SingleNestedAttribute{
		Optional: true,
		MarkdownDescription: "The user's Ingress, in the release's namespace (Flagger's `ingressRef`). Required when `mesh_provider` " +
			"is one of the routers that read it. It is never modified.",
		Attributes: map[string]schema.Attribute{
			"api_version": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("networking.k8s.io/v1"),
				MarkdownDescription: "API version of the Ingress. Only `networking.k8s.io/v1`.",
				Validators:          []validator.String{stringvalidator.OneOf("networking.k8s.io/v1")}},
			"kind": schema.StringAttribute{Optional: true, Computed: true, Default: stringdefault.StaticString("Ingress"),
				MarkdownDescription: "Kind of the referenced object. Only `Ingress`.",
				Validators:          []validator.String{stringvalidator.OneOf("Ingress")}},
			"name": schema.StringAttribute{Required: true, MarkdownDescription: "Name of the Ingress."},
		},
	}
}

// RequireIngressRef is the plan error of a release of provider without ingress_ref; use says
// what the router does with the Ingress.
func RequireIngressRef(v Values, provider, use string, diags *diag.Diagnostics) {
	if v.Object("ingress_ref").IsNull() {
		diags.AddAttributeError(path.Root("ingress_ref"), "Missing ingress_ref",
			fmt.Sprintf("ingress_ref is required when mesh_provider = %q: it names the Ingress %s.", provider, use))
	}
}

type ingressRefModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Kind       types.String `tfsdk:"kind"`
	Name       types.String `tfsdk:"name"`
}

// DecodeIngressRef reads ingress_ref; nil when it is unset or not known yet.
func DecodeIngressRef(v Values) (*router.Ref, error) {
	var ref ingressRefModel
	ok, err := tfschema.Decode(v.Object("ingress_ref"), &ref)
	if err != nil || !ok {
		return nil, tfschema.Prefixed("ingress_ref", err)
	}
	return &router.Ref{APIVersion: ref.APIVersion.ValueString(), Kind: ref.Kind.ValueString(), Name: ref.Name.ValueString()}, nil
}

// IngressRefIdentity is ingress_ref.name as an identity: the router names the Ingress it
// generates after it, so it cannot change in place; detail says what a change would leave.
func IngressRefIdentity(v Values, detail func(was, now string) string) ([]Identity, error) {
	var ref ingressRefModel
	if _, err := tfschema.Decode(v.Object("ingress_ref"), &ref); err != nil {
		return nil, err
	}
	return []Identity{{
		Path: path.Root("ingress_ref").AtName("name"), Value: ref.Name.ValueString(),
		Summary: "ingress_ref cannot change in place",
		Detail:  detail,
	}}, nil
}
