package provider

import (
	"context"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/canary-release/terraform-provider-canary/internal/controlpolicy"
)

// osmPlan is a planned canary_release through OSM in namespace shop.
func osmPlan(t *testing.T) tfsdk.Plan {
	t.Helper()
	ctx := context.Background()
	var s fwresource.SchemaResponse
	(&ReleaseResource{}).Schema(ctx, fwresource.SchemaRequest{}, &s)
	typ := s.Schema.Type().TerraformType(ctx).(tftypes.Object)
	attrs := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		attrs[name] = tftypes.NewValue(at, nil)
	}
	plan := tfsdk.Plan{Schema: s.Schema, Raw: tftypes.NewValue(typ, attrs)}
	for at, v := range map[*path.Path]any{
		ptr(path.Root("name")): "podinfo", ptr(path.Root("namespace")): "shop", ptr(path.Root("mesh_provider")): "osm",
		ptr(path.Root("target_ref").AtName("name")): "podinfo", ptr(path.Root("service").AtName("port")): int64(9898),
		ptr(path.Root("analysis").AtName("interval")): "3s",
	} {
		if d := plan.SetAttribute(ctx, *at, v); d.HasError() {
			t.Fatalf("setting %s: %v", at, d)
		}
	}
	return plan
}

func ptr[T any](v T) *T { return &v }

func controlWarnings(d diag.Diagnostics) []string {
	var out []string
	for _, w := range d.Warnings() {
		if w.Summary() == controlpolicy.SummaryOpen || w.Summary() == controlpolicy.SummaryUnknown {
			out = append(out, w.Summary()+": "+w.Detail())
		}
	}
	return out
}

// A plan that creates a release in a cluster without the policy says once that its controls
// are open to every ConfigMap writer, naming the policy file; a plan without changes is quiet.
func TestPlanWarnsOnceWithoutControlPolicy(t *testing.T) {
	plan := osmPlan(t)
	res := &ReleaseResource{c: &clients{kube: fake.NewClientset()}}
	modifyPlan := func(state tfsdk.State) fwresource.ModifyPlanResponse {
		resp := fwresource.ModifyPlanResponse{Plan: plan}
		res.ModifyPlan(context.Background(), fwresource.ModifyPlanRequest{Plan: plan, State: state}, &resp)
		return resp
	}
	created := modifyPlan(tfsdk.State{Schema: plan.Schema, Raw: tftypes.NewValue(plan.Raw.Type(), nil)})
	warnings := controlWarnings(created.Diagnostics)
	if len(warnings) != 1 {
		t.Fatalf("the create plan gives %d control-policy warnings, want 1: %v", len(warnings), created.Diagnostics)
	}
	for _, text := range []string{controlpolicy.SummaryOpen, "ConfigMap podinfo-canary-release", "namespace shop", "kubectl apply -f examples/rbac/policy-controls.yaml"} {
		if !strings.Contains(warnings[0], text) {
			t.Errorf("the warning %q does not say %q", warnings[0], text)
		}
	}
	unchanged := modifyPlan(tfsdk.State(plan))
	if w := controlWarnings(unchanged.Diagnostics); len(w) != 0 {
		t.Errorf("a plan without changes warns %v", w)
	}
}
