package provider

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	fwresource "github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// otherCluster is the server of the ambient kubeconfig: the cluster an unknown setting must
// never fall back to.
const otherCluster = "https://other-cluster.invalid:6443"

// withOtherClusterKubeconfig points every fallback of the kubernetes settings at otherCluster.
func withOtherClusterKubeconfig(t *testing.T) {
	t.Helper()
	kubeconfig := filepath.Join(t.TempDir(), "config")
	err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: other
  cluster:
    server: `+otherCluster+`
users:
- name: other
  user:
    token: other-cluster-token
contexts:
- name: other
  context: {cluster: other, user: other}
current-context: other
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", kubeconfig)
	t.Setenv("KUBE_CONFIG_PATH", kubeconfig)
	for _, name := range []string{"KUBE_HOST", "KUBE_TOKEN", "KUBE_CTX", "KUBE_CLUSTER_CA_CERT_DATA", "KUBE_CLIENT_CERT_DATA", "KUBE_CLIENT_KEY_DATA", "KUBE_INSECURE"} {
		t.Setenv(name, "")
	}
	t.Setenv("CANARY_PROMETHEUS_ADDRESS", "http://prometheus.other-cluster.invalid:9090")
}

// providerConfig is a provider block whose attributes are null but for set; an object type
// in set gets the object with its own attributes null but for the nested map.
func providerConfig(t *testing.T, set map[string]any) tfsdk.Config {
	t.Helper()
	ctx := context.Background()
	var s provider.SchemaResponse
	(&CanaryProvider{}).Schema(ctx, provider.SchemaRequest{}, &s)
	typ := s.Schema.Type().TerraformType(ctx).(tftypes.Object)
	return tfsdk.Config{Schema: s.Schema, Raw: objectValue(t, typ, set)}
}

// objectValue builds an object of typ from set: a tftypes.Value as is, a map[string]any as a
// nested object; what set leaves out is null.
func objectValue(t *testing.T, typ tftypes.Object, set map[string]any) tftypes.Value {
	t.Helper()
	attrs := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		attrs[name] = tftypes.NewValue(at, nil)
	}
	for name, v := range set {
		at, ok := typ.AttributeTypes[name]
		if !ok {
			t.Fatalf("the provider schema has no attribute %q", name)
		}
		switch v := v.(type) {
		case tftypes.Value:
			attrs[name] = v
		case map[string]any:
			attrs[name] = objectValue(t, at.(tftypes.Object), v)
		default:
			attrs[name] = tftypes.NewValue(at, v)
		}
	}
	return tftypes.NewValue(typ, attrs)
}

func unknownString() tftypes.Value { return tftypes.NewValue(tftypes.String, tftypes.UnknownValue) }

func configure(t *testing.T, config tfsdk.Config, deferralAllowed bool) provider.ConfigureResponse {
	t.Helper()
	req := provider.ConfigureRequest{Config: config}
	req.ClientCapabilities.DeferralAllowed = deferralAllowed
	var resp provider.ConfigureResponse
	New("test")().Configure(context.Background(), req, &resp)
	return resp
}

// TestProviderUnknownSettingsBuildNoClients: a setting known only at apply must not be read as
// "" and filled from the ambient kubeconfig, which names another cluster.
func TestProviderUnknownSettingsBuildNoClients(t *testing.T) {
	withOtherClusterKubeconfig(t)
	ctx := context.Background()
	var s provider.SchemaResponse
	(&CanaryProvider{}).Schema(ctx, provider.SchemaRequest{}, &s)
	providerType := s.Schema.Type().TerraformType(ctx).(tftypes.Object)
	templatesType := providerType.AttributeTypes["metric_templates"].(tftypes.Map)
	templateType := templatesType.ElementType.(tftypes.Object)
	for _, tc := range []struct {
		name string
		set  map[string]any
		want []string
	}{
		{"host", map[string]any{"kubernetes": map[string]any{"host": unknownString(), "token": "t"}}, []string{"kubernetes.host"}},
		{"token", map[string]any{"kubernetes": map[string]any{"token": unknownString()}}, []string{"kubernetes.token"}},
		{"whole kubernetes block", map[string]any{"kubernetes": tftypes.NewValue(providerType.AttributeTypes["kubernetes"], tftypes.UnknownValue)},
			[]string{"kubernetes"}},
		{"exec args", map[string]any{"kubernetes": map[string]any{"host": "https://right.invalid:6443",
			"exec": map[string]any{"api_version": "client.authentication.k8s.io/v1", "command": "aws",
				"args": tftypes.NewValue(tftypes.List{ElementType: tftypes.String}, tftypes.UnknownValue)}}},
			[]string{"kubernetes.exec.args"}},
		{"prometheus address and host", map[string]any{
			"kubernetes": map[string]any{"host": unknownString()},
			"prometheus": map[string]any{"address": unknownString()}},
			[]string{"kubernetes.host", "prometheus.address"}},
		{"metric template's prometheus", map[string]any{"metric_templates": tftypes.NewValue(templatesType, map[string]tftypes.Value{
			"errors": objectValue(t, templateType, map[string]any{"query": "sum(errors)",
				"prometheus": map[string]any{"bearer_token": unknownString()}}),
		})}, []string{`metric_templates["errors"].prometheus.bearer_token`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := configure(t, providerConfig(t, tc.set), false)
			if resp.Diagnostics.HasError() {
				t.Fatalf("Configure failed: %v", resp.Diagnostics)
			}
			c, ok := resp.ResourceData.(*clients)
			if !ok {
				t.Fatalf("ResourceData is %T, want *clients", resp.ResourceData)
			}
			if c.rest != nil || c.kube != nil || c.leases != nil || c.dynamic != nil || c.metrics != nil || c.http != nil {
				host := ""
				if c.rest != nil {
					host = c.rest.Host
				}
				t.Fatalf("clients were built (API server %q) although %v is unknown", host, tc.want)
			}
			if !slices.Equal(c.unknownSettings, tc.want) {
				t.Errorf("unknownSettings = %q, want %q", c.unknownSettings, tc.want)
			}
			if resp.DataSourceData != resp.ResourceData {
				t.Errorf("the data source gets %v, not the resource's deferred clients", resp.DataSourceData)
			}
			if resp.Deferred != nil {
				t.Errorf("Configure deferred (%v) for a Terraform that did not allow it", resp.Deferred)
			}
		})
	}
}

// TestProviderUnknownSettingsDeferWhenAllowed: a Terraform with deferred actions is told to
// plan the resources again once the settings are known.
func TestProviderUnknownSettingsDeferWhenAllowed(t *testing.T) {
	withOtherClusterKubeconfig(t)
	resp := configure(t, providerConfig(t, map[string]any{"kubernetes": map[string]any{"host": unknownString()}}), true)
	if resp.Diagnostics.HasError() {
		t.Fatal(resp.Diagnostics)
	}
	if resp.Deferred == nil || resp.Deferred.Reason != provider.DeferredReasonProviderConfigUnknown {
		t.Errorf("Deferred = %v, want the reason ProviderConfigUnknown", resp.Deferred)
	}
}

// TestConfigureKnownSettingsBuildClients is the control: known settings give working clients
// and no deferral.
func TestConfigureKnownSettingsBuildClients(t *testing.T) {
	withOtherClusterKubeconfig(t)
	resp := configure(t, providerConfig(t, map[string]any{"kubernetes": map[string]any{"host": "https://right.invalid:6443", "token": "t"}}), true)
	if resp.Diagnostics.HasError() {
		t.Fatal(resp.Diagnostics)
	}
	c := resp.ResourceData.(*clients)
	if len(c.unknownSettings) > 0 || c.kube == nil || c.rest.Host != "https://right.invalid:6443" || resp.Deferred != nil {
		t.Errorf("known settings gave unknownSettings %q, kube %v, deferred %v", c.unknownSettings, c.kube, resp.Deferred)
	}
}

// deferredClients is what Configure hands the resource while kubernetes.host is unknown.
func deferredClients(t *testing.T) *clients {
	t.Helper()
	withOtherClusterKubeconfig(t)
	resp := configure(t, providerConfig(t, map[string]any{"kubernetes": map[string]any{"host": unknownString()}}), false)
	if resp.Diagnostics.HasError() {
		t.Fatal(resp.Diagnostics)
	}
	return resp.ResourceData.(*clients)
}

// releaseValue is a release in target_ref mode, with what it leaves out null. The release
// is complete enough that, were the cluster read, ModifyPlan would build the engine.
func releaseValue(t *testing.T) (tfsdk.State, tfsdk.Plan) {
	t.Helper()
	ctx := context.Background()
	var s fwresource.SchemaResponse
	(&ReleaseResource{}).Schema(ctx, fwresource.SchemaRequest{}, &s)
	typ := s.Schema.Type().TerraformType(ctx).(tftypes.Object)
	attrs := map[string]tftypes.Value{}
	for name, at := range typ.AttributeTypes {
		attrs[name] = tftypes.NewValue(at, nil)
	}
	state := tfsdk.State{Schema: s.Schema, Raw: tftypes.NewValue(typ, attrs)}
	for p, v := range map[string]any{
		"id": "test/podinfo", "name": "podinfo", "namespace": "test", "mesh_provider": "osm", "target_ref.name": "podinfo",
		"service.port": int64(9898), "analysis.interval": "1m", "analysis.step_weight": int64(10), "analysis.max_weight": int64(50),
	} {
		parts := strings.Split(p, ".")
		at := path.Root(parts[0])
		for _, part := range parts[1:] {
			at = at.AtName(part)
		}
		if d := state.SetAttribute(ctx, at, v); d.HasError() {
			t.Fatalf("setting %s: %v", p, d)
		}
	}
	return state, tfsdk.Plan(state)
}

// deferredWarning reports the one "Provider configuration not yet known" warning, or fails.
func deferredWarning(t *testing.T, d diag.Diagnostics) {
	t.Helper()
	if d.HasError() {
		t.Fatalf("errors: %v", d)
	}
	var found []string
	for _, w := range d.Warnings() {
		if w.Summary() == "Provider configuration not yet known" {
			found = append(found, w.Detail())
		}
	}
	if len(found) != 1 || !strings.Contains(found[0], "kubernetes.host") || !strings.Contains(found[0], "skipped") {
		t.Fatalf("want one warning naming kubernetes.host and saying reads are skipped, got %v", d)
	}
}

// TestProviderUnknownSettingsSkipPlanReads: plan and refresh warn and read nothing (the
// clients are nil, so any read would panic), and the state stays as it was.
func TestProviderUnknownSettingsSkipPlanReads(t *testing.T) {
	ctx := context.Background()
	r := &ReleaseResource{c: deferredClients(t)}
	state, plan := releaseValue(t)

	modify := fwresource.ModifyPlanResponse{Plan: plan}
	r.ModifyPlan(ctx, fwresource.ModifyPlanRequest{Plan: plan, State: state, Config: tfsdk.Config(plan)}, &modify)
	deferredWarning(t, modify.Diagnostics)
	if !modify.Plan.Raw.Equal(plan.Raw) {
		t.Errorf("ModifyPlan changed the plan without reading the cluster")
	}

	read := fwresource.ReadResponse{State: state}
	r.Read(ctx, fwresource.ReadRequest{State: state}, &read)
	deferredWarning(t, read.Diagnostics)
	if !read.State.Raw.Equal(state.Raw) {
		t.Errorf("Read changed the state without reading the cluster")
	}
}

// TestProviderUnknownSettingsRefuseWhatCannotBeSkipped: an apply, an import and a data
// source read fail with the reason rather than reach another cluster.
func TestProviderUnknownSettingsRefuseWhatCannotBeSkipped(t *testing.T) {
	ctx := context.Background()
	c := deferredClients(t)
	r := &ReleaseResource{c: c}
	state, plan := releaseValue(t)
	refused := func(t *testing.T, d diag.Diagnostics) {
		t.Helper()
		for _, e := range d.Errors() {
			if e.Summary() == "Provider configuration not known" && strings.Contains(e.Detail(), "kubernetes.host") {
				return
			}
		}
		t.Errorf("want the error \"Provider configuration not known\" naming kubernetes.host, got %v", d)
	}

	t.Run("create", func(t *testing.T) {
		resp := fwresource.CreateResponse{State: state}
		r.Create(ctx, fwresource.CreateRequest{Plan: plan, Config: tfsdk.Config(plan)}, &resp)
		refused(t, resp.Diagnostics)
	})
	t.Run("update", func(t *testing.T) {
		resp := fwresource.UpdateResponse{State: state}
		r.Update(ctx, fwresource.UpdateRequest{Plan: plan, State: state, Config: tfsdk.Config(plan)}, &resp)
		refused(t, resp.Diagnostics)
	})
	t.Run("delete", func(t *testing.T) {
		resp := fwresource.DeleteResponse{State: state}
		r.Delete(ctx, fwresource.DeleteRequest{State: state}, &resp)
		refused(t, resp.Diagnostics)
	})
	t.Run("import", func(t *testing.T) {
		imported := tfsdk.State{Schema: state.Schema, Raw: tftypes.NewValue(state.Raw.Type(), nil)}
		var ir fwresource.ImportStateResponse
		ir.State = imported
		r.ImportState(ctx, fwresource.ImportStateRequest{ID: "test/podinfo"}, &ir)
		resp := fwresource.ReadResponse{State: ir.State}
		r.Read(ctx, fwresource.ReadRequest{State: ir.State}, &resp)
		refused(t, resp.Diagnostics)
	})
	t.Run("data source", func(t *testing.T) {
		ds := &ReleaseDataSource{c: c}
		var s datasource.SchemaResponse
		ds.Schema(ctx, datasource.SchemaRequest{}, &s)
		typ := s.Schema.Type().TerraformType(ctx).(tftypes.Object)
		attrs := map[string]tftypes.Value{}
		for name, at := range typ.AttributeTypes {
			attrs[name] = tftypes.NewValue(at, nil)
		}
		attrs["name"] = tftypes.NewValue(tftypes.String, "podinfo")
		config := tfsdk.Config{Schema: s.Schema, Raw: tftypes.NewValue(typ, attrs)}
		resp := datasource.ReadResponse{State: tfsdk.State(config)}
		ds.Read(ctx, datasource.ReadRequest{Config: config}, &resp)
		refused(t, resp.Diagnostics)
	})
}
