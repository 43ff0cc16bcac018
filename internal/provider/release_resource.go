package provider

import (
	"context"
	"errors"
	"fmt"
	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"slices"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/tfsdk"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-go/tftypes"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/workload"
)

var (
	_ resource.Resource                   = &ReleaseResource{}
	_ resource.ResourceWithConfigure      = &ReleaseResource{}
	_ resource.ResourceWithImportState    = &ReleaseResource{}
	_ resource.ResourceWithModifyPlan     = &ReleaseResource{}
	_ resource.ResourceWithValidateConfig = &ReleaseResource{}
)

// Default timeouts: a release is bounded by its analysis, which the user sizes.
const (
	defaultCreateTimeout = 20 * time.Minute
	defaultUpdateTimeout = 60 * time.Minute
	defaultDeleteTimeout = 20 * time.Minute
)

// ReleaseResource is `canary_release`.
type ReleaseResource struct {
	c *clients
}

// NewReleaseResource is the resource factory.
func NewReleaseResource() resource.Resource { return &ReleaseResource{} }

func (r *ReleaseResource) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_release"
}

func (r *ReleaseResource) Configure(_ context.Context, req resource.ConfigureRequest, resp *resource.ConfigureResponse) {
	if req.ProviderData == nil {
		return
	}
	c, ok := req.ProviderData.(*clients)
	if !ok {
		resp.Diagnostics.AddError("Unexpected Resource Configure Type",
			fmt.Sprintf("Expected *clients, got: %T. Please report this issue to the provider developers.", req.ProviderData))
		return
	}
	r.c = c
}

// engine wires the engine for one release, and returns the context to run it with (see
// runContext: its logs and API requests go to the provider's log subsystems). The engine's
// warnings become diagnostics, its progress lines log lines and terminal lines.
func (r *ReleaseResource) engine(ctx context.Context, m ReleaseModel, rel rollout.Release, diags *diag.Diagnostics) (context.Context, *rollout.Engine, error) {
	rt, err := registry.NewRouter(rel.Provider, router.Clients{Dynamic: r.c.dynamic, Kube: r.c.kube}, m.routerSpec(rel))
	if err != nil {
		return ctx, nil, err
	}
	ctx = r.c.runContext(ctx)
	e := &rollout.Engine{
		Kube: r.c.kube, LockKube: r.c.leases, Router: rt, Dynamic: r.c.dynamic, HTTP: r.c.http, InsecureHTTP: r.c.insecureHTTP,
		Progress: r.c.withPush(ctx, rel, r.c.progressReporter(ctx)),
	}
	e.Owned = registry.NewTarget(rel.Provider, router.Clients{Dynamic: r.c.dynamic, Kube: r.c.kube}, m.routerSpec(rel))
	e.Lock.Machine = r.c.lockMachine
	e.RouterFor = func(provider string, recorded []byte) (router.Router, error) {
		return r.routerFor(ctx, m, rel, provider, recorded)
	}
	if diags != nil {
		e.Warn = func(summary, detail string) { diags.AddWarning(summary, detail) }
	}
	if r.c.metrics != nil {
		e.Metrics = r.c.metrics
	}
	e.PodLabels = r.c.podLabels
	return ctx, e, nil
}

// ownedTarget is the release's target when its driver owns it (a Knative Service); nil otherwise.
func (r *ReleaseResource) ownedTarget(m ReleaseModel, rel rollout.Release) mesh.Target {
	return registry.NewTarget(rel.Provider, router.Clients{Dynamic: r.c.dynamic, Kube: r.c.kube}, m.routerSpec(rel))
}

// routerFor is the release's router on another mesh_provider, the one a replacement moved it
// from: built from the configuration the cluster recorded (its routing options were that
// router's), else from this one's names. The workload stays, so a route a Gateway serves is
// handed over to the apex Service rather than deleted.
func (r *ReleaseResource) routerFor(ctx context.Context, m ReleaseModel, rel rollout.Release, provider string, recorded []byte) (router.Router, error) {
	spec := m.routerSpec(rel)
	if len(recorded) > 0 {
		if rm, err := recordedModel(ctx, recorded); err == nil {
			previous := rollout.Release{Namespace: rel.Namespace, Name: rel.Name, Provider: provider, Target: rel.Target}
			if err := rm.decodeService(&previous); err == nil {
				spec = rm.routerSpec(previous)
			}
		}
	}
	spec.OwnsWorkload = false
	return registry.NewRouter(provider, router.Clients{Dynamic: r.c.dynamic, Kube: r.c.kube}, spec)
}

// specJSON is the configuration saved in the cluster state, so that import can restore what
// is not secret of it (see recordable).
func specJSON(v tftypes.Value) []byte {
	b, err := valueJSON(v)
	if err != nil {
		return nil
	}
	return b
}

func (r *ReleaseResource) Create(ctx context.Context, req resource.CreateRequest, resp *resource.CreateResponse) {
	defer func() { setIdentity(ctx, resp.State, resp.Identity, &resp.Diagnostics) }()
	if r.c.refuseUnknownConfig("Creating canary_release", remedyReportBug, &resp.Diagnostics) {
		return
	}
	var plan ReleaseModel
	resp.Diagnostics.Append(getModel(ctx, req.Plan, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := plan.Timeouts.Create(ctx, defaultCreateTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	rel, err := plan.releaseWith(r.c.template)
	if err != nil {
		resp.Diagnostics.AddError("Invalid canary_release", err.Error())
		return
	}
	writeOnly, diags := readWriteOnly(ctx, req.Config)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	writeOnly.apply(&rel)
	rel.IncludeLabelPrefix = r.c.labelPrefixes(plan)
	rel.Instance = newInstanceID()
	resp.Diagnostics.Append(setInstance(ctx, resp.Private, rel.Instance)...)
	// A new key: a record this create finds was signed by an earlier instance, or no one.
	if rel.Seal, err = rollout.NewSeal(); err != nil {
		resp.Diagnostics.AddError("canary_release record key", err.Error())
		return
	}
	ctx, eng, err := r.engine(ctx, plan, rel, &resp.Diagnostics)
	if err != nil {
		resp.Diagnostics.AddError("Invalid canary_release", err.Error())
		return
	}
	story := newRunStory(append(slices.Clone(r.c.secrets), writeOnly.secrets()...))
	eng.Progress = story.wrap(eng.Progress)
	st, err := eng.Initialize(ctx, rel, specJSON(recordable(req.Plan.Raw)))
	if err != nil {
		// No state is saved: the next Create adopts what this one left, by its labels, or
		// takes over the release that it found (see the Safety section of the docs).
		var f *rollout.Failure
		if errors.As(err, &f) {
			resp.Diagnostics.AddError("Canary release failed", story.withStory(f.Reason))
			return
		}
		resp.Diagnostics.AddError("Canary release initialisation failed", story.withStory(err.Error()))
		return
	}
	plan.LastRun = types.StringValue(story.String())
	resp.Diagnostics.Append(setSeal(ctx, resp.Private, rel.Seal)...)
	plan.ID = types.StringValue(rel.Namespace + "/" + rel.Name)
	plan.Status = statusValue(st)
	settleRolloutPlan(ctx, &plan, nil)
	resp.Diagnostics.Append(setModel(ctx, &resp.State, &plan)...)
}

func (r *ReleaseResource) Read(ctx context.Context, req resource.ReadRequest, resp *resource.ReadResponse) {
	defer func() {
		// A removed resource still answers with the identity it had: the framework refuses a
		// read without one (Terraform before 1.12 stored none).
		from := resp.State
		if from.Raw.IsNull() {
			from = req.State
		}
		setIdentity(ctx, from, resp.Identity, &resp.Diagnostics)
	}()
	// Read only what it needs: a refresh of hundreds of releases spends its CPU in converting
	// whole states, and only id and status change here.
	var namespace, name, meshProvider types.String
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("namespace"), &namespace)...)
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("name"), &name)...)
	resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("mesh_provider"), &meshProvider)...)
	if resp.Diagnostics.HasError() || r.c == nil {
		return
	}
	if meshProvider.IsNull() && r.c.refuseUnknownConfig("Importing canary_release", remedyImportLater, &resp.Diagnostics) {
		return
	}
	if r.c.planReadsDeferred(&resp.Diagnostics) {
		return
	}
	cs, ok, err := rollout.LoadState(ctx, r.c.kube, namespace.ValueString(), name.ValueString())
	if err != nil {
		resp.Diagnostics.AddError("Reading canary_release state", err.Error())
		return
	}
	if !ok {
		// Without its ConfigMap a release still exists while its primary or its Services do:
		// the primary's own record of its template is the truth then, the next plan shows
		// the drift, and the next apply never initialises it afresh from an unanalysed
		// template (a Create would).
		var state ReleaseModel
		if meshProvider.IsNull() || getModel(ctx, resp.State, &state).HasError() {
			resp.State.RemoveResource(ctx)
			return
		}
		rel, err := state.release()
		if err != nil {
			resp.State.RemoveResource(ctx)
			return
		}
		remnant, err := rollout.FindRemnant(ctx, r.c.kube, rel, r.ownedTarget(state, rel))
		if err != nil {
			resp.Diagnostics.AddError("Reading canary_release state", err.Error())
			return
		}
		if !remnant.Found {
			resp.State.RemoveResource(ctx)
			return
		}
		st := statusFrom(ctx, state.Status)
		st.Message = "the state ConfigMap is missing; the next apply rebuilds it from the primary " + rel.WorkloadKind()
		if remnant.PrimarySpec != "" {
			st.LastPromotedSpec = remnant.PrimarySpec
		} else {
			st.Message = "the state ConfigMap and the primary " + rel.WorkloadKind() + " are missing; the next apply initialises the release again, from its last promoted template only"
		}
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("status"), statusValue(st))...)
		return
	}
	if !meshProvider.IsNull() {
		st := cs.Status
		if cs.Verify(sealOf(ctx, req.Private, &resp.Diagnostics)) != nil {
			// What was promoted stays what the Terraform state says; the apply warns.
			var prior types.Object
			resp.Diagnostics.Append(req.State.GetAttribute(ctx, path.Root("status"), &prior)...)
			st = rollout.UntrustedStatus(st, statusFrom(ctx, prior), "")
		}
		if st.Phase.Active() {
			st = r.withLiveSplit(ctx, req.State, st)
		}
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), namespace.ValueString()+"/"+name.ValueString())...)
		resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("status"), statusValue(st))...)
		return
	}
	// An import: the configuration comes back from the cluster state.
	typ := req.State.Schema.Type().TerraformType(ctx)
	v, err := valueFromJSON(cs.Spec, typ)
	if err != nil {
		resp.Diagnostics.AddError("Importing canary_release", "the state ConfigMap holds no usable spec: "+err.Error())
		return
	}
	resp.State.Raw = v
	var state ReleaseModel
	resp.Diagnostics.Append(getModel(ctx, resp.State, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	state.ID = types.StringValue(state.Namespace.ValueString() + "/" + state.Name.ValueString())
	if state.TargetRef.IsNull() && state.Manifest.IsNull() {
		// The record keeps no manifest: rebuild it from the Deployment the release owns.
		manifest, err := rollout.ImportedManifest(ctx, r.c.kube, namespace.ValueString(), name.ValueString(), cs.Status.Target)
		if err != nil {
			resp.Diagnostics.AddError("Importing canary_release", err.Error())
			return
		}
		state.Manifest = types.StringValue(manifest)
	}
	// No key yet: the record cannot be verified, so only what the primary runs (its own
	// annotation) is taken as promoted; the first apply makes a key.
	primaryRuns := ""
	if rel, err := state.release(); err == nil {
		if remnant, err := rollout.FindRemnant(ctx, r.c.kube, rel, r.ownedTarget(state, rel)); err == nil {
			primaryRuns = remnant.PrimarySpec
		}
	}
	state.Status = statusValue(rollout.UntrustedStatus(cs.Status, rollout.Status{}, primaryRuns))
	// The imported instance is the release's owner from now on, as its record says.
	resp.Diagnostics.Append(setInstance(ctx, resp.Private, cs.Status.Owner)...)
	resp.Diagnostics.Append(setModel(ctx, &resp.State, &state)...)
}

// withLiveSplit gives a status whose run is under way, or stopped half-way, the router's
// live weights (rollout.WithLiveSplit): the state ConfigMap records phases, not steps. Only
// such releases pay for the read, so a refresh of settled releases reads one ConfigMap each.
func (r *ReleaseResource) withLiveSplit(ctx context.Context, state tfsdk.State, st rollout.Status) rollout.Status {
	var m ReleaseModel
	if getModel(ctx, state, &m).HasError() {
		return st
	}
	rel, err := m.release()
	if err != nil || workload.ReleasedInPlace(rel.TargetKind) {
		return st // the split of a kind released in place is its pods, which the record keeps
	}
	rt, err := registry.NewRouter(rel.Provider, router.Clients{Dynamic: r.c.dynamic, Kube: r.c.kube}, m.routerSpec(rel))
	if err != nil {
		return st
	}
	return rollout.WithLiveSplit(ctx, rt, st)
}

func (r *ReleaseResource) Update(ctx context.Context, req resource.UpdateRequest, resp *resource.UpdateResponse) {
	defer func() { setIdentity(ctx, resp.State, resp.Identity, &resp.Diagnostics) }()
	if r.c.refuseUnknownConfig("Updating canary_release", remedyReportBug, &resp.Diagnostics) {
		return
	}
	var plan, state ReleaseModel
	resp.Diagnostics.Append(getModel(ctx, req.Plan, &plan)...)
	resp.Diagnostics.Append(getModel(ctx, req.State, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	// The plan may not have known the new names; now every value is known.
	refuseIdentityChange(state, plan, &resp.Diagnostics)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := plan.Timeouts.Update(ctx, defaultUpdateTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	rel, err := plan.releaseWith(r.c.template)
	if err != nil {
		resp.Diagnostics.AddError("Invalid canary_release", err.Error())
		return
	}
	writeOnly, diags := readWriteOnly(ctx, req.Config)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	writeOnly.apply(&rel)
	rel.IncludeLabelPrefix = r.c.labelPrefixes(plan)
	rel.Instance = instanceOf(ctx, req.Private, &resp.Diagnostics)
	if rel.Instance == "" {
		// An instance made before identities existed gets one now.
		rel.Instance = newInstanceID()
	}
	resp.Diagnostics.Append(setInstance(ctx, resp.Private, rel.Instance)...)
	if rel.Seal = sealOrNew(ctx, req.Private, &resp.Diagnostics); resp.Diagnostics.HasError() {
		return
	}
	ctx, eng, err := r.engine(ctx, plan, rel, &resp.Diagnostics)
	if err != nil {
		resp.Diagnostics.AddError("Invalid canary_release", err.Error())
		return
	}
	story := newRunStory(append(slices.Clone(r.c.secrets), writeOnly.secrets()...))
	eng.Progress = story.wrap(eng.Progress)
	st, err := eng.Apply(ctx, rel, specJSON(recordable(req.Plan.Raw)), statusFrom(ctx, state.Status))
	// Saved even when the release failed: the records it wrote are signed up to this sequence.
	resp.Diagnostics.Append(setSeal(ctx, resp.Private, rel.Seal)...)
	if err != nil {
		// Keep the prior arguments, so that the next plan proposes the release again; the
		// story is this run's, failed as it is.
		state.Status = statusValue(st)
		if st.Phase == "" {
			state.Status = statusValue(statusFrom(ctx, state.Status))
		}
		state.LastRun = types.StringValue(story.String())
		resp.Diagnostics.Append(setModel(ctx, &resp.State, &state)...)
		var f *rollout.Failure
		if errors.As(err, &f) {
			resp.Diagnostics.AddError("Canary release failed", story.withStory(f.Reason))
			return
		}
		resp.Diagnostics.AddError("Canary release failed", story.withStory(err.Error()))
		return
	}
	plan.LastRun = types.StringValue(story.String())
	plan.ID = types.StringValue(rel.Namespace + "/" + rel.Name)
	plan.Status = statusValue(st)
	settleRolloutPlan(ctx, &plan, &state)
	resp.Diagnostics.Append(setModel(ctx, &resp.State, &plan)...)
}

func (r *ReleaseResource) Delete(ctx context.Context, req resource.DeleteRequest, resp *resource.DeleteResponse) {
	if r.c.refuseUnknownConfig("Deleting canary_release", remedyReportBug, &resp.Diagnostics) {
		return
	}
	var state ReleaseModel
	resp.Diagnostics.Append(getModel(ctx, req.State, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	timeout, diags := state.Timeouts.Delete(ctx, defaultDeleteTimeout)
	resp.Diagnostics.Append(diags...)
	if resp.Diagnostics.HasError() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rel, err := state.release()
	if err != nil {
		resp.Diagnostics.AddError("Invalid canary_release", err.Error())
		return
	}
	rel.IncludeLabelPrefix = r.c.labelPrefixes(state)
	rel.Instance = instanceOf(ctx, req.Private, &resp.Diagnostics)
	rel.Seal = sealOf(ctx, req.Private, &resp.Diagnostics)
	ctx, eng, err := r.engine(ctx, state, rel, &resp.Diagnostics)
	if err != nil {
		resp.Diagnostics.AddError("Invalid canary_release", err.Error())
		return
	}
	if err := eng.Delete(ctx, rel, state.RevertOnDeletion.ValueBool()); err != nil {
		var notOwner *rollout.NotOwnerError
		if errors.As(err, &notOwner) {
			resp.Diagnostics.AddWarning("canary_release left to the instance that runs it", err.Error())
			return
		}
		resp.Diagnostics.AddError("Deleting canary_release", err.Error())
		return
	}
	r.c.forgetSeries(ctx, rel)
}

func (r *ReleaseResource) ImportState(ctx context.Context, req resource.ImportStateRequest, resp *resource.ImportStateResponse) {
	namespace, name, ok := importTarget(ctx, req, &resp.Diagnostics)
	if !ok {
		return
	}
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("id"), namespace+"/"+name)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("namespace"), namespace)...)
	resp.Diagnostics.Append(resp.State.SetAttribute(ctx, path.Root("name"), name)...)
}
