package provider

import (
	"context"
	"testing"

	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

var identityType = tftypes.Object{AttributeTypes: map[string]tftypes.Type{"namespace": tftypes.String, "name": tftypes.String}}

func identityValue(t *testing.T, namespace, name string) *tfprotov6.ResourceIdentityData {
	t.Helper()
	v, err := tfprotov6.NewDynamicValue(identityType, tftypes.NewValue(identityType, map[string]tftypes.Value{
		"namespace": tftypes.NewValue(tftypes.String, namespace), "name": tftypes.NewValue(tftypes.String, name),
	}))
	if err != nil {
		t.Fatal(err)
	}
	return &tfprotov6.ResourceIdentityData{IdentityData: &v}
}

// TestReleaseIdentityAtTheProtocol speaks the plugin protocol as Terraform 1.12 does for an
// `import` block with `identity = { namespace, name }`: the identity schema asks for both, an
// import by identity alone finds the release that the ID namespace/name would, and a read
// returns the identity of the release its state holds.
func TestReleaseIdentityAtTheProtocol(t *testing.T) {
	ctx := context.Background()
	server, err := testAccProtoV6ProviderFactories["canary"]()
	if err != nil {
		t.Fatal(err)
	}
	schemas, err := server.GetResourceIdentitySchemas(ctx, &tfprotov6.GetResourceIdentitySchemasRequest{})
	if err != nil || len(schemas.Diagnostics) > 0 {
		t.Fatalf("GetResourceIdentitySchemas: %v %v", err, schemas.Diagnostics)
	}
	s := schemas.IdentitySchemas["canary_release"]
	if s == nil {
		t.Fatal("canary_release has no identity schema")
	}
	required := map[string]bool{}
	for _, a := range s.IdentityAttributes {
		required[a.Name] = a.RequiredForImport
	}
	if len(required) != 2 || !required["namespace"] || !required["name"] {
		t.Errorf("identity attributes = %v, want namespace and name, both required for import", required)
	}

	imported, err := server.ImportResourceState(ctx, &tfprotov6.ImportResourceStateRequest{
		TypeName: "canary_release", Identity: identityValue(t, "shop", "checkout"),
	})
	if err != nil || len(imported.Diagnostics) > 0 || len(imported.ImportedResources) != 1 {
		t.Fatalf("ImportResourceState by identity: %v %v", err, imported.Diagnostics)
	}
	providerSchema, err := server.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stateType := providerSchema.ResourceSchemas["canary_release"].ValueType()
	state, err := imported.ImportedResources[0].State.Unmarshal(stateType)
	if err != nil {
		t.Fatal(err)
	}
	var attrs map[string]tftypes.Value
	if err := state.As(&attrs); err != nil {
		t.Fatal(err)
	}
	for attr, want := range map[string]string{"id": "shop/checkout", "namespace": "shop", "name": "checkout"} {
		var got string
		if err := attrs[attr].As(&got); err != nil || got != want {
			t.Errorf("imported %s = %q (%v), want %q", attr, got, err, want)
		}
	}

	bad, err := server.ImportResourceState(ctx, &tfprotov6.ImportResourceStateRequest{
		TypeName: "canary_release", Identity: identityValue(t, "shop", ""),
	})
	if err != nil || len(bad.Diagnostics) == 0 || bad.Diagnostics[0].Summary != "Invalid import identity" {
		t.Errorf("an identity without name: %v %+v, want the error Invalid import identity", err, bad.Diagnostics)
	}

	read, err := server.ReadResource(ctx, &tfprotov6.ReadResourceRequest{TypeName: "canary_release", CurrentState: imported.ImportedResources[0].State})
	if err != nil || len(read.Diagnostics) > 0 {
		t.Fatalf("ReadResource: %v %v", err, read.Diagnostics)
	}
	if read.NewIdentity == nil {
		t.Fatal("ReadResource returned no identity")
	}
	got, err := read.NewIdentity.IdentityData.Unmarshal(identityType)
	if err != nil {
		t.Fatal(err)
	}
	var id map[string]tftypes.Value
	if err := got.As(&id); err != nil {
		t.Fatal(err)
	}
	var ns, name string
	_ = id["namespace"].As(&ns)
	_ = id["name"].As(&name)
	if ns != "shop" || name != "checkout" {
		t.Errorf("the read's identity = %s/%s, want shop/checkout", ns, name)
	}
}
