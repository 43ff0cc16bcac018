package alb

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

// Options are what the alb router needs beyond router.Spec.
type Options struct {
	// IngressRef is the user's Ingress (Flagger's ingressRef), whose IngressGroup and rule the
	// generated Ingress copies.
	IngressRef *router.Ref
}

// Options declares ingress_ref, shaped exactly as the other drivers that read an Ingress
// declare it: one attribute with several owners.
func (Driver) Options() mesh.Options {
	return mesh.Options{Mesh: "AWS ALB", Attributes: map[string]schema.Attribute{
		"ingress_ref": schema.SingleNestedAttribute{
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
		},
	}}
}

// Validate requires ingress_ref: the generated Ingress joins its IngressGroup and copies its rule.
func (Driver) Validate(_ context.Context, v mesh.Values, diags *diag.Diagnostics) {
	if v.Object("ingress_ref").IsNull() {
		diags.AddAttributeError(path.Root("ingress_ref"), "Missing ingress_ref",
			`ingress_ref is required when mesh_provider = "alb": it names the Ingress whose IngressGroup (alb.ingress.kubernetes.io/group.name) `+
				`and rule to the apex Service the generated Ingress copies.`)
	}
}

type ingressRefModel struct {
	APIVersion types.String `tfsdk:"api_version"`
	Kind       types.String `tfsdk:"kind"`
	Name       types.String `tfsdk:"name"`
}

// Decode reads ingress_ref.
func (Driver) Decode(v mesh.Values) (any, error) {
	var ref ingressRefModel
	ok, err := tfschema.Decode(v.Object("ingress_ref"), &ref)
	if err != nil || !ok {
		return Options{}, tfschema.Prefixed("ingress_ref", err)
	}
	return Options{IngressRef: &router.Ref{APIVersion: ref.APIVersion.ValueString(), Kind: ref.Kind.ValueString(), Name: ref.Name.ValueString()}}, nil
}

// Identity is the Ingress's name: the generated Ingress is named after it.
func (Driver) Identity(v mesh.Values) ([]mesh.Identity, error) {
	var ref ingressRefModel
	if _, err := tfschema.Decode(v.Object("ingress_ref"), &ref); err != nil {
		return nil, err
	}
	return []mesh.Identity{{
		Path: path.Root("ingress_ref").AtName("name"), Value: ref.Name.ValueString(),
		Summary: "ingress_ref cannot change in place",
		Detail: func(was, now string) string {
			return fmt.Sprintf("The Ingress generated beside %q would keep its rules in the IngressGroup after the switch to %q.", was, now)
		},
	}}, nil
}
