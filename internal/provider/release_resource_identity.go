package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/identityschema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
)

var _ resource.ResourceWithIdentity = &ReleaseResource{}

// releaseIdentity is a release's resource identity (Terraform 1.12 or later): the namespace
// and name that an `import` block's `identity` gives, as the ID namespace/name does.
type releaseIdentity struct {
	Namespace types.String `tfsdk:"namespace"`
	Name      types.String `tfsdk:"name"`
}

func (r *ReleaseResource) IdentitySchema(_ context.Context, _ resource.IdentitySchemaRequest, resp *resource.IdentitySchemaResponse) {
	resp.IdentitySchema = identityschema.Schema{Attributes: map[string]identityschema.Attribute{
		"namespace": identityschema.StringAttribute{RequiredForImport: true,
			Description: "The release's namespace."},
		"name": identityschema.StringAttribute{RequiredForImport: true,
			Description: "The release's name: its state ConfigMap is <name>-canary-release."},
	}}
}

// setIdentity writes the identity of the release a state holds; nothing when the state holds
// none (removed), or where the CLI has no identities (identity nil).
func setIdentity(ctx context.Context, state tfsdk.State, identity *tfsdk.ResourceIdentity, diags *diag.Diagnostics) {
	if identity == nil || state.Raw.IsNull() {
		return
	}
	var id releaseIdentity
	diags.Append(state.GetAttribute(ctx, path.Root("namespace"), &id.Namespace)...)
	diags.Append(state.GetAttribute(ctx, path.Root("name"), &id.Name)...)
	if id.Namespace.IsNull() || id.Name.IsNull() {
		return
	}
	diags.Append(identity.Set(ctx, id)...)
}

// importTarget is the release an import names: by its ID (namespace/name), or by its identity.
func importTarget(ctx context.Context, req resource.ImportStateRequest, diags *diag.Diagnostics) (namespace, name string, ok bool) {
	if req.ID != "" {
		namespace, name, ok = strings.Cut(req.ID, "/")
		if !ok || namespace == "" || name == "" || strings.Contains(name, "/") {
			diags.AddError("Invalid import ID", fmt.Sprintf("expected namespace/name, got %q", req.ID))
			return "", "", false
		}
		return namespace, name, true
	}
	var id releaseIdentity
	if req.Identity == nil {
		diags.AddError("Invalid import", "give the release's ID (namespace/name) or its identity (namespace and name)")
		return "", "", false
	}
	diags.Append(req.Identity.Get(ctx, &id)...)
	if diags.HasError() {
		return "", "", false
	}
	if id.Namespace.ValueString() == "" || id.Name.ValueString() == "" {
		diags.AddError("Invalid import identity", "identity needs namespace and name, both not empty")
		return "", "", false
	}
	return id.Namespace.ValueString(), id.Name.ValueString(), true
}
