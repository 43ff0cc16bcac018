package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// TestModelKeepsTheDriversAttributes reads a state holding a driver's top-level and service
// attributes into a ReleaseModel and writes it back: nothing may be lost, since the state is
// what the next plan compares with.
func TestModelKeepsTheDriversAttributes(t *testing.T) {
	ctx := context.Background()
	var sr resource.SchemaResponse
	NewReleaseResource().Schema(ctx, resource.SchemaRequest{}, &sr)
	state := tfsdk.State{Schema: sr.Schema, Raw: tftypes.NewValue(sr.Schema.Type().TerraformType(ctx), nil)}
	set := func(at path.Path, v any) {
		if d := state.SetAttribute(ctx, at, v); d.HasError() {
			t.Fatal(d)
		}
	}
	set(path.Root("name"), types.StringValue("podinfo"))
	set(path.Root("mesh_provider"), types.StringValue("apisix"))
	set(path.Root("route_ref").AtName("name"), types.StringValue("web"))
	set(path.Root("service").AtName("port"), types.Int64Value(9898))
	set(path.Root("service").AtName("timeout"), types.StringValue("30s"))

	var m ReleaseModel
	if d := getModel(ctx, state, &m); d.HasError() {
		t.Fatal(d)
	}
	if o, ok := m.MeshOptions["route_ref"].(types.Object); !ok || o.IsNull() {
		t.Fatalf("route_ref was not read into MeshOptions: %v", m.MeshOptions)
	}
	if s, _, err := m.service(); err != nil || s.Port.ValueInt64() != 9898 {
		t.Fatalf("service: %+v, %v", s, err)
	}
	out := tfsdk.State{Schema: sr.Schema, Raw: tftypes.NewValue(sr.Schema.Type().TerraformType(ctx), nil)}
	if d := setModel(ctx, &out, &m); d.HasError() {
		t.Fatal(d)
	}
	if !out.Raw.Equal(state.Raw) {
		t.Fatalf("the state changed on the way through the model:\n%s\nbecame\n%s", state.Raw, out.Raw)
	}
}
