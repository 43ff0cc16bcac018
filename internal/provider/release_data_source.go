package provider

import (
	"context"
	"fmt"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/datasource/schema"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/workload/daemonset"
)

var _ datasource.DataSourceWithConfigure = &ReleaseDataSource{}

// ReleaseDataSource reads a release as it is now: its phase, the router's live weights and
// the images of both sides. Outputs and other stacks use it.
type ReleaseDataSource struct{ c *clients }

func NewReleaseDataSource() datasource.DataSource { return &ReleaseDataSource{} }

// ReleaseDataModel is the data source's model.
type ReleaseDataModel struct {
	ID                 types.String `tfsdk:"id"`
	Name               types.String `tfsdk:"name"`
	Namespace          types.String `tfsdk:"namespace"`
	MeshProvider       types.String `tfsdk:"mesh_provider"`
	Target             types.String `tfsdk:"target"`
	Phase              types.String `tfsdk:"phase"`
	PrimaryWeight      types.Int64  `tfsdk:"primary_weight"`
	CanaryWeight       types.Int64  `tfsdk:"canary_weight"`
	PrimaryImage       types.String `tfsdk:"primary_image"`
	CanaryImage        types.String `tfsdk:"canary_image"`
	CanaryReplicas     types.Int64  `tfsdk:"canary_replicas"`
	FailedChecks       types.Int64  `tfsdk:"failed_checks"`
	LastPromotedSpec   types.String `tfsdk:"last_promoted_spec"`
	LastTransitionTime types.String `tfsdk:"last_transition_time"`
	Message            types.String `tfsdk:"message"`
	LastCheck          types.String `tfsdk:"last_check"`
}

func (d *ReleaseDataSource) Metadata(_ context.Context, req datasource.MetadataRequest, resp *datasource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_release"
}

func (d *ReleaseDataSource) Schema(_ context.Context, _ datasource.SchemaRequest, resp *datasource.SchemaResponse) {
	computed := func(description string) schema.StringAttribute {
		return schema.StringAttribute{Computed: true, MarkdownDescription: description}
	}
	count := func(description string) schema.Int64Attribute {
		return schema.Int64Attribute{Computed: true, MarkdownDescription: description}
	}
	resp.Schema = schema.Schema{
		MarkdownDescription: "A `canary_release` as it is now in the cluster: its phase, the live weights in the router object, " +
			"and the images the primary and the canary run. It reads the release's state ConfigMap, its Deployments and its " +
			"router object, and writes nothing. Use it for outputs, or in another stack that must know what is live.",
		Attributes: map[string]schema.Attribute{
			"id":                   computed("`namespace/name`."),
			"name":                 schema.StringAttribute{Required: true, MarkdownDescription: "Name of the release (the `name` of its `canary_release`)."},
			"namespace":            schema.StringAttribute{Optional: true, Computed: true, MarkdownDescription: "Namespace of the release. Default `default`."},
			"mesh_provider":        computed("The release's `mesh_provider`."),
			"target":               computed("Name of the released Deployment (the canary); the primary is `<target>-primary`."),
			"phase":                computed("The last recorded phase: `Initializing`, `Initialized`, `Waiting`, `Progressing`, `WaitingPromotion`, `Promoting`, `Finalising`, `Succeeded`, `Failed`, or `RollingBack`."),
			"primary_weight":       count("Live weight of the primary, in percent, read from the router object."),
			"canary_weight":        count("Live weight of the canary, in percent, read from the router object."),
			"primary_image":        computed("Image of the primary's first container: what most traffic runs."),
			"canary_image":         computed("Image of the canary's (the target's) first container: the revision under analysis, or the next one."),
			"canary_replicas":      count("Replicas of the canary; 0 outside a rollout."),
			"failed_checks":        count("Failed checks of the current or last run."),
			"last_promoted_spec":   computed("Hash of the pod template the primary runs."),
			"last_transition_time": computed("Time of the last phase change (RFC 3339)."),
			"message":              computed("What happened last, e.g. the failed check."),
			"last_check": computed("The last analysis interval's outcome: `passed`, `failed` or `held` (a query error), when (RFC 3339), " +
				"and each metric's value against its range, e.g. `passed at 2026-12-04T10:21:30Z: request-success-rate 99.87 within [min 99]`. " +
				"Empty before the first check. The state ConfigMap shows the same in its `canary-release.dev/last-check` annotation."),
		},
	}
}

func (d *ReleaseDataSource) Configure(_ context.Context, req datasource.ConfigureRequest, resp *datasource.ConfigureResponse) {
	if req.ProviderData == nil {
		return
	}
	c, ok := req.ProviderData.(*clients)
	if !ok {
		resp.Diagnostics.AddError("Unexpected Data Source Configure Type",
			fmt.Sprintf("Expected *clients, got: %T. Please report this issue to the provider developers.", req.ProviderData))
		return
	}
	d.c = c
}

func (d *ReleaseDataSource) Read(ctx context.Context, req datasource.ReadRequest, resp *datasource.ReadResponse) {
	var data ReleaseDataModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &data)...)
	if resp.Diagnostics.HasError() {
		return
	}
	if d.c == nil {
		resp.Diagnostics.AddError("Provider not configured", "The canary provider was not configured, so canary_release cannot be read; "+
			"its kubernetes settings may depend on values known only after apply.")
		return
	}
	if d.c.refuseUnknownConfig("Reading data.canary_release", remedyDependsOn, &resp.Diagnostics) {
		return
	}
	if data.Namespace.IsNull() {
		data.Namespace = types.StringValue("default")
	}
	ns, name := data.Namespace.ValueString(), data.Name.ValueString()
	cs, ok, err := rollout.LoadState(ctx, d.c.kube, ns, name)
	switch {
	case err != nil:
		resp.Diagnostics.AddError("Reading canary_release", err.Error())
		return
	case !ok:
		resp.Diagnostics.AddAttributeError(path.Root("name"), "No such canary_release",
			fmt.Sprintf("The namespace %q holds no state ConfigMap %s, so no canary_release named %q was initialised there.", ns, rollout.StateConfigMapName(name), name))
		return
	}
	m, err := recordedModel(ctx, cs.Spec)
	if err != nil {
		resp.Diagnostics.AddError("Reading canary_release", fmt.Sprintf("the state ConfigMap %s/%s holds no usable spec: %v", ns, rollout.StateConfigMapName(name), err))
		return
	}
	kind := rollout.Release{Namespace: ns}
	if isDaemonSet(m) {
		kind.TargetKind = daemonset.Kind
	}
	primary, err := d.primary(ctx, kind, name)
	if apierrors.IsNotFound(err) && kind.TargetKind != daemonset.Kind {
		// The record keeps no manifest, which would tell a DaemonSet's release.
		daemonSets := rollout.Release{Namespace: ns, TargetKind: daemonset.Kind}
		if found, dsErr := d.primary(ctx, daemonSets, name); dsErr == nil {
			primary, kind, err = found, daemonSets, nil
		}
	}
	if err != nil {
		resp.Diagnostics.AddError("Reading canary_release", err.Error())
		return
	}
	target := strings.TrimSuffix(primary.Name, "-primary")
	data.ID = types.StringValue(ns + "/" + name)
	data.MeshProvider = m.MeshProvider
	data.Target = types.StringValue(target)
	data.Phase = types.StringValue(string(cs.Status.Phase))
	data.FailedChecks = types.Int64Value(int64(cs.Status.FailedChecks))
	data.LastPromotedSpec = types.StringValue(cs.Status.LastPromotedSpec)
	data.LastTransitionTime = types.StringValue("")
	if !cs.Status.LastTransitionTime.IsZero() {
		data.LastTransitionTime = types.StringValue(cs.Status.LastTransitionTime.UTC().Format(time.RFC3339))
	}
	data.Message = types.StringValue(cs.Status.Message)
	data.LastCheck = types.StringValue(cs.Status.LastCheck)
	data.PrimaryImage = types.StringValue(firstImage(primary))

	canary, err := rollout.GetWorkload(ctx, d.c.kube, kind, target)
	if err != nil {
		resp.Diagnostics.AddError("Reading canary_release", fmt.Sprintf("the canary %s %s/%s: %v", kind.WorkloadKind(), ns, target, err))
		return
	}
	data.CanaryImage = types.StringValue(firstImage(canary))
	data.CanaryReplicas = types.Int64Value(int64(ptrValue(canary.Spec.Replicas)))

	// The router object is found by the same names the resource gives it.
	rel := rollout.Release{Namespace: ns, Name: name, Provider: m.MeshProvider.ValueString(), Target: target}
	if err := m.decodeService(&rel); err != nil {
		resp.Diagnostics.AddError("Reading canary_release", err.Error())
		return
	}
	rt, err := registry.NewRouter(rel.Provider, router.Clients{Dynamic: d.c.dynamic, Kube: d.c.kube}, m.routerSpec(rel))
	if err != nil {
		resp.Diagnostics.AddError("Reading canary_release", err.Error())
		return
	}
	w, err := rt.GetRoutes(ctx)
	if err != nil {
		resp.Diagnostics.AddError("Reading canary_release", fmt.Sprintf("the live weights of %s/%s: %v", ns, name, err))
		return
	}
	data.PrimaryWeight, data.CanaryWeight = types.Int64Value(int64(w.Primary)), types.Int64Value(int64(w.Canary))
	resp.Diagnostics.Append(resp.State.Set(ctx, &data)...)
}

// primary finds the release's primary Deployment by the labels the release gives it: in
// manifest mode the recorded spec does not name the target.
func (d *ReleaseDataSource) primary(ctx context.Context, kind rollout.Release, name string) (*appsv1.Deployment, error) {
	ns := kind.Namespace
	selector := labels.SelectorFromSet(labels.Set{router.LabelManagedBy: router.ManagedByValue, router.LabelRelease: name}).String()
	list, err := rollout.ListWorkloads(ctx, d.c.kube, kind, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing the %ss of %s/%s: %w", kind.WorkloadKind(), ns, name, err)
	}
	for i := range list.Items {
		if strings.HasSuffix(list.Items[i].Name, "-primary") {
			return &list.Items[i], nil
		}
	}
	return nil, apierrors.NewNotFound(appsv1.Resource("deployments"), name+" primary (labelled "+selector+")")
}

// recordedModel decodes the configuration a release recorded in its state ConfigMap.
func recordedModel(ctx context.Context, spec []byte) (ReleaseModel, error) {
	var schemaResp resource.SchemaResponse
	NewReleaseResource().Schema(ctx, resource.SchemaRequest{}, &schemaResp)
	v, err := valueFromJSON(spec, schemaResp.Schema.Type().TerraformType(ctx))
	if err != nil {
		return ReleaseModel{}, err
	}
	var m ReleaseModel
	state := tfsdk.State{Schema: schemaResp.Schema, Raw: v}
	if diags := getModel(ctx, state, &m); diags.HasError() {
		return ReleaseModel{}, diagErr(diags)
	}
	return m, nil
}

func firstImage(d *appsv1.Deployment) string {
	if len(d.Spec.Template.Spec.Containers) == 0 {
		return ""
	}
	return d.Spec.Template.Spec.Containers[0].Image
}

func ptrValue(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
