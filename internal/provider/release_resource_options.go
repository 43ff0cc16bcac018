package provider

// The attributes the mesh drivers own (route_ref, service.gateways, ...) are declared, checked
// and decoded by their drivers (mesh.Configurable), through the registry. The provider moves
// their values between Terraform and the drivers without naming them: ReleaseModel keeps them
// apart from its own fields, in MeshOptions and in the service object.

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/attr"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// driverOptions are the drivers' attributes, split by where they sit.
var driverOptions = func() (out struct{ top, service map[string]registry.Option }) {
	out.top, out.service = map[string]registry.Option{}, map[string]registry.Option{}
	for _, o := range registry.Options() {
		if o.InService {
			out.service[o.Name] = o
		} else {
			out.top[o.Name] = o
		}
	}
	return out
}()

// addDriverAttributes adds the drivers' attributes to the schema's top level and service block.
func addDriverAttributes(top map[string]schema.Attribute) {
	for name, o := range driverOptions.top {
		top[name] = o.Schema
	}
	if service, ok := top["service"].(schema.SingleNestedAttribute); ok {
		for name, o := range driverOptions.service {
			service.Attributes[name] = o.Schema
		}
	}
}

// modelSource is a plan, a state or a configuration.
type modelSource interface {
	Get(ctx context.Context, target any) diag.Diagnostics
}

// getModel reads a plan, state or configuration into m: the provider's attributes into its
// fields and the drivers' top-level ones into m.MeshOptions. (The framework reads a struct
// only when its fields are exactly the schema's attributes.)
func getModel(ctx context.Context, from modelSource, m *ReleaseModel) diag.Diagnostics {
	var whole types.Object
	diags := from.Get(ctx, &whole)
	if diags.HasError() {
		return diags
	}
	attrs, attrTypes := whole.Attributes(), whole.AttributeTypes(ctx)
	own, ownTypes, options := map[string]attr.Value{}, map[string]attr.Type{}, map[string]attr.Value{}
	for name, v := range attrs {
		if _, ok := driverOptions.top[name]; ok {
			options[name] = v
			continue
		}
		own[name], ownTypes[name] = v, attrTypes[name]
	}
	core, d := types.ObjectValue(ownTypes, own)
	diags.Append(d...)
	if diags.HasError() {
		return diags
	}
	// As replaces the whole struct, MeshOptions included.
	diags.Append(core.As(ctx, m, basetypes.ObjectAsOptions{})...)
	m.MeshOptions = options
	return diags
}

// setModel writes m to a state: getModel's reverse. A driver attribute m lacks is null.
func setModel(ctx context.Context, to *tfsdk.State, m *ReleaseModel) diag.Diagnostics {
	var diags diag.Diagnostics
	objectType, ok := to.Schema.Type().(attr.TypeWithAttributeTypes)
	if !ok {
		diags.AddError("Writing the state", fmt.Sprintf("the schema's type %T has no attributes", to.Schema.Type()))
		return diags
	}
	attrTypes := objectType.AttributeTypes()
	ownTypes := map[string]attr.Type{}
	for name, t := range attrTypes {
		if _, ok := driverOptions.top[name]; !ok {
			ownTypes[name] = t
		}
	}
	core, d := types.ObjectValueFrom(ctx, ownTypes, m)
	diags.Append(d...)
	if diags.HasError() {
		return diags
	}
	attrs := core.Attributes()
	for name := range driverOptions.top {
		v, ok := m.MeshOptions[name]
		if !ok {
			var err error
			t := attrTypes[name]
			if v, err = t.ValueFromTerraform(ctx, tftypes.NewValue(t.TerraformType(ctx), nil)); err != nil {
				diags.AddError("Writing the state", err.Error())
				return diags
			}
		}
		attrs[name] = v
	}
	whole, d := types.ObjectValue(attrTypes, attrs)
	diags.Append(d...)
	if diags.HasError() {
		return diags
	}
	diags.Append(to.Set(ctx, whole)...)
	return diags
}

// meshValues are the values the drivers read their options from.
func (m ReleaseModel) meshValues() mesh.Values {
	v := mesh.Values{Attributes: m.MeshOptions}
	if !m.Service.IsNull() && !m.Service.IsUnknown() {
		v.Service = m.Service.Attributes()
	}
	return v
}

// service decodes the provider's own attributes of the service block.
func (m ReleaseModel) service() (ServiceModel, bool, error) {
	var s ServiceModel
	if m.Service.IsNull() || m.Service.IsUnknown() {
		ok, err := decode(m.Service, &s)
		return s, ok, err
	}
	attrs, attrTypes := m.Service.Attributes(), m.Service.AttributeTypes(context.Background())
	for name := range driverOptions.service {
		delete(attrs, name)
		delete(attrTypes, name)
	}
	own, d := types.ObjectValue(attrTypes, attrs)
	if err := diagErr(d); err != nil {
		return s, false, err
	}
	ok, err := decode(own, &s)
	return s, ok, err
}

// routerOptions decodes the mesh_provider's options for its router.
func (m ReleaseModel) routerOptions() (any, error) {
	return registry.Decode(m.MeshProvider.ValueString(), m.meshValues())
}

// validateMeshOptions refuses a driver's attribute set with another mesh_provider, where
// nothing would read it, then runs the mesh_provider's own checks.
func validateMeshOptions(ctx context.Context, m ReleaseModel, provider string, resp *resource.ValidateConfigResponse) {
	v := m.meshValues()
	for _, o := range registry.Options() {
		value, at := v.Attributes[o.Name], path.Root(o.Name)
		if o.InService {
			value, at = v.Service[o.Name], mesh.ServicePath(o.Name)
		}
		if value == nil || value.IsNull() || containsString(o.Owners, provider) {
			continue
		}
		resp.Diagnostics.AddAttributeError(at, o.Label()+" needs "+o.Mesh,
			fmt.Sprintf(`%s is only used with mesh_provider %s, not %q.`, o.Label(), ownersText(o.Owners), provider))
	}
	registry.Validate(ctx, provider, v, &resp.Diagnostics)
}

// ownersText is `= "<owner>"`, or `"<a>" or "<b>"` for an attribute several drivers share.
func ownersText(owners []string) string {
	if len(owners) == 1 {
		return fmt.Sprintf("= %q", owners[0])
	}
	return quotedOr(owners)
}

func containsString(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}

// capabilityConditions is what some drivers' options must be for a capability, as a
// parenthesis for the error that lists the drivers having it: ` (<driver> with <option> = "<value>")`.
func capabilityConditions(has func(router.Capabilities) bool) string {
	if c := registry.Conditions(has); len(c) > 0 {
		return " (" + strings.Join(c, "; ") + ")"
	}
	return ""
}
