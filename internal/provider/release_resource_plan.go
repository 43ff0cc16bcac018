package provider

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// planReadTimeout bounds the cluster reads of a plan; a slow cluster must not stall `plan`.
const planReadTimeout = 15 * time.Second

// ValidateConfig catches at plan time what the schema alone cannot express. Values that are
// not known yet (module variables, other resources' outputs) are skipped: the apply, which
// sees them, decodes them again.
func (r *ReleaseResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m ReleaseModel
	resp.Diagnostics.Append(getModel(ctx, req.Config, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	provider := m.MeshProvider.ValueString()
	known := !m.MeshProvider.IsUnknown()

	if known {
		validateMeshOptions(ctx, m, provider, resp)
		validateTargetKind(m, provider, resp)
	}
	validateStatefulSet(ctx, m, provider, known, resp)
	validateDaemonSet(ctx, m, provider, known, resp)
	if !m.Manifest.IsNull() && !m.Manifest.IsUnknown() && !m.Namespace.IsUnknown() {
		ns := m.Namespace.ValueString()
		if m.Namespace.IsNull() {
			ns = "default"
		}
		if _, err := parseManifest(m.Manifest.ValueString(), ns); err != nil {
			resp.Diagnostics.AddAttributeError(path.Root("manifest"), "Invalid manifest", err.Error())
		}
	}
	var a AnalysisModel
	if asKnown(ctx, m.Analysis, &a) {
		skip := m.SkipAnalysis.ValueBool() || m.SkipAnalysis.IsUnknown()
		validateAnalysis(ctx, a, provider, known, skip, isStatefulSet(m), resp)
		validateStrategy(ctx, m, a, provider, known, resp)
	}
}

// asKnown reads an object whose own value is known into target, whose fields are framework
// values that may still be unknown. It reports false for a null or unknown object.
func asKnown(ctx context.Context, o types.Object, target any) bool {
	if o.IsNull() || o.IsUnknown() {
		return false
	}
	return !o.As(ctx, target, basetypes.ObjectAsOptions{}).HasError()
}

func validateAnalysis(ctx context.Context, a AnalysisModel, provider string, providerKnown, skip, statefulSet bool, resp *resource.ValidateConfigResponse) {
	at := path.Root("analysis")
	hasStep, hasSteps := !a.StepWeight.IsNull(), !a.StepWeights.IsNull()
	switch {
	case hasStep && hasSteps && !a.StepWeight.IsUnknown() && !a.StepWeights.IsUnknown():
		resp.Diagnostics.AddAttributeError(at.AtName("step_weights"), "Conflicting step settings",
			"Set exactly one of analysis.step_weight and analysis.step_weights.")
	case !hasStep && !hasSteps && !skip && a.Iterations.IsNull():
		resp.Diagnostics.AddAttributeError(at.AtName("step_weight"), "Missing step settings",
			"Set analysis.step_weight (with max_weight) or analysis.step_weights, so the release knows how to shift traffic.")
	}
	if hasStep && a.MaxWeight.IsNull() {
		// Terraform drops the keys it does not know inside an object without a word, so a
		// Flagger-style maxWeight would leave the canary climbing to a default of 100.
		resp.Diagnostics.AddAttributeError(at.AtName("max_weight"), "Missing max_weight",
			"analysis.step_weight needs analysis.max_weight, the highest weight the canary gets before promotion (1 to 100). "+
				"It has no default here: Terraform silently drops the keys it does not know inside an object, so a misspelled "+
				"or camelCase maxWeight would otherwise send the canary up to 100%.")
	}
	if !a.MaxWeight.IsNull() && hasSteps {
		resp.Diagnostics.AddAttributeWarning(at.AtName("max_weight"), "max_weight is ignored with step_weights",
			"analysis.max_weight only bounds step_weight; with analysis.step_weights the last step is the highest weight, as in Flagger. Remove max_weight.")
	}
	var steps []types.Int64
	if !a.StepWeights.IsNull() && !a.StepWeights.IsUnknown() && !a.StepWeights.ElementsAs(ctx, &steps, false).HasError() {
		for i := 1; i < len(steps); i++ {
			if steps[i].IsUnknown() || steps[i-1].IsUnknown() {
				continue
			}
			if steps[i].ValueInt64() <= steps[i-1].ValueInt64() {
				resp.Diagnostics.AddAttributeError(at.AtName("step_weights"), "Step weights must ascend",
					fmt.Sprintf("analysis.step_weights must be strictly ascending, but %d follows %d.", steps[i].ValueInt64(), steps[i-1].ValueInt64()))
				break
			}
		}
	}
	validateWebhookURLs(ctx, a, resp)
	validateAlertAddresses(ctx, a, resp)
	var metricModels []MetricModel
	if a.Metrics.IsNull() || a.Metrics.IsUnknown() || a.Metrics.ElementsAs(ctx, &metricModels, false).HasError() {
		return
	}
	for i, m := range metricModels {
		mp := at.AtName("metrics").AtListIndex(i)
		name := m.Name.ValueString()
		if m.Query.IsNull() && m.TemplateRef.IsNull() && providerKnown && !m.Name.IsUnknown() {
			if _, ok := registry.Builtin(provider, name); !ok && (!statefulSet || name != statefulset.MetricSuccessRateDrop) {
				resp.Diagnostics.AddAttributeError(mp.AtName("query"), "Missing query", missingQuery(i, name, provider))
			}
		}
		validateMetricTemplateUse(i, m, resp)
		validateJudge(ctx, i, m, provider, providerKnown, resp)
		if m.ThresholdRange.IsUnknown() || (m.ThresholdRange.IsNull() && !m.Judge.IsNull()) {
			continue
		}
		var tr RangeModel
		if !asKnown(ctx, m.ThresholdRange, &tr) || (tr.Min.IsNull() && tr.Max.IsNull()) {
			resp.Diagnostics.AddAttributeError(mp.AtName("threshold_range"), "Missing threshold_range",
				fmt.Sprintf("analysis.metrics[%d].threshold_range: metric %q needs threshold_range with min, max or both, or a judge.", i, name))
		} else if !tr.Min.IsNull() && !tr.Max.IsNull() && !tr.Min.IsUnknown() && !tr.Max.IsUnknown() && tr.Min.ValueFloat64() > tr.Max.ValueFloat64() {
			resp.Diagnostics.AddAttributeError(mp.AtName("threshold_range"), "Empty threshold_range",
				fmt.Sprintf("analysis.metrics[%d].threshold_range: metric %q: min (%g) is above max (%g).", i, name, tr.Min.ValueFloat64(), tr.Max.ValueFloat64()))
		}
	}
}

// validateWebhookURLs requires a url on every webhook but the gates, which without one are
// built-in gates opened by the operator's annotation.
func validateWebhookURLs(ctx context.Context, a AnalysisModel, resp *resource.ValidateConfigResponse) {
	var hooks []WebhookModel
	if a.Webhooks.IsNull() || a.Webhooks.IsUnknown() || a.Webhooks.ElementsAs(ctx, &hooks, false).HasError() {
		return
	}
	for i, h := range hooks {
		if !h.URL.IsNull() || !h.URLWO.IsNull() || h.Type.IsUnknown() {
			continue
		}
		typ := h.Type.ValueString()
		if typ == "" {
			typ = rollout.HookRollout
		}
		if !controls.IsBuiltInGate(typ) {
			resp.Diagnostics.AddAttributeError(path.Root("analysis").AtName("webhooks").AtListIndex(i).AtName("url"), "Missing webhook url",
				fmt.Sprintf("analysis.webhooks[%d] (%q, type %q) needs url. Only the gates (confirm-rollout, confirm-traffic-increase, confirm-promotion) may leave it out: "+
					"without url a gate is built in, and the operator opens it with kubectl annotate.", i, h.Name.ValueString(), typ))
		}
	}
}

// validateAlertAddresses requires an address on every alert, stored or write-only.
func validateAlertAddresses(ctx context.Context, a AnalysisModel, resp *resource.ValidateConfigResponse) {
	var alerts []AlertModel
	if a.Alerts.IsNull() || a.Alerts.IsUnknown() || a.Alerts.ElementsAs(ctx, &alerts, false).HasError() {
		return
	}
	for i, am := range alerts {
		var p AlertProviderModel
		if am.Provider.IsUnknown() || am.Provider.As(ctx, &p, basetypes.ObjectAsOptions{}).HasError() {
			continue
		}
		if p.Address.IsNull() && p.AddressWO.IsNull() {
			resp.Diagnostics.AddAttributeError(path.Root("analysis").AtName("alerts").AtListIndex(i).AtName("provider").AtName("address"), "Missing alert address",
				fmt.Sprintf("analysis.alerts[%d].provider (alert %q) needs address, or address_wo to keep it out of the state (Terraform 1.11 or later).", i, am.Name.ValueString()))
		}
	}
}

// warnRejected warns, at plan time, of a revision a failed analysis rejected that the
// configuration still asks for: the apply would refuse it. A warning, not an error, so the
// workspace's other changes still plan and apply.
func warnRejected(ctx context.Context, eng *rollout.Engine, rel rollout.Release, diags *diag.Diagnostics) {
	j, err := eng.Rejection(ctx, rel)
	if err != nil || j == nil {
		return
	}
	diags.AddAttributeWarning(path.Root("retry_rejected"), "canary_release keeps a rejected revision out",
		fmt.Sprintf("canary_release %s/%s: %s. The apply of this resource will refuse it before writing anything, and send no user to it. %s.",
			rel.Namespace, rel.Name, j.Describe(), j.Remedy()))
}

// warnRejectedManifest is warnRejected for a plan that is not fully known, as every change of
// a manifest's is (the computed values follow the new manifest): the manifest itself is known,
// and the rejected revision is read from it, so the plan warns as a target_ref's does.
func (r *ReleaseResource) warnRejectedManifest(ctx context.Context, plan ReleaseModel, diags *diag.Diagnostics) {
	if plan.Manifest.IsNull() || plan.Manifest.IsUnknown() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, planReadTimeout)
	defer cancel()
	rel, err := plan.release()
	if err != nil {
		return
	}
	rel.IncludeLabelPrefix = r.c.labelPrefixes(plan)
	ctx, eng, err := r.engine(ctx, plan, rel, nil)
	if err != nil {
		return
	}
	warnRejected(ctx, eng, rel, diags)
}

// announceRevert says, at plan time, that the apply will promote a revert within rollback_window
// without analysis: a warning naming the revision, and a first line of the rollout_plan this
// plan just worked out. It needs the configuration's values, not the computed ones, so it runs
// on plans that are not fully known (a changed manifest's).
func (r *ReleaseResource) announceRevert(ctx context.Context, plan *ReleaseModel, seal *rollout.Seal, resp *resource.ModifyPlanResponse) {
	rel, err := plan.release()
	if err != nil || rel.RollbackWindow <= 0 || plan.RolloutPlan.IsUnknown() {
		return
	}
	rel.Seal = seal
	ctx, cancel := context.WithTimeout(ctx, planReadTimeout)
	defer cancel()
	v, err := (&rollout.Engine{Kube: r.c.kube}).Revert(ctx, rel)
	if err != nil || v == nil {
		return
	}
	text := v.Describe(rel.RollbackWindow)
	resp.Diagnostics.AddAttributeWarning(path.Root("rollback_window"), "canary_release reverts without analysis",
		fmt.Sprintf("canary_release %s/%s: %s.", rel.Namespace, rel.Name, text))
	plan.RolloutPlan = types.StringValue("rollback_window: " + text + "\n" + plan.RolloutPlan.ValueString())
}

// ModifyPlan reads the live objects and proposes an update when the cluster drifted.
func (r *ReleaseResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.c == nil {
		return
	}
	if r.c.planReadsDeferred(&resp.Diagnostics) {
		return
	}
	var plan ReleaseModel
	resp.Diagnostics.Append(getModel(ctx, req.Plan, &plan)...)
	if resp.Diagnostics.HasError() {
		return
	}
	validateTemplateRefs(ctx, plan, r.c.template, &resp.Diagnostics)
	validateJudgeBackends(ctx, plan, r.c.template, &resp.Diagnostics)
	var prior *ReleaseModel
	if !req.State.Raw.IsNull() {
		prior = &ReleaseModel{}
		resp.Diagnostics.Append(getModel(ctx, req.State, prior)...)
		refuseIdentityChange(*prior, plan, &resp.Diagnostics)
		if resp.Diagnostics.HasError() {
			return
		}
	}
	// The framework marks rollout_plan unknown only when something changes; otherwise it
	// keeps the prior text.
	if prior == nil || plan.RolloutPlan.IsUnknown() {
		r.warnOpenControls(ctx, plan, &resp.Diagnostics)
	}
	if plan.RolloutPlan.IsUnknown() {
		planRollout(ctx, &plan, prior, &resp.Diagnostics)
		if prior != nil {
			r.announceRevert(ctx, &plan, sealOf(ctx, req.Private, &resp.Diagnostics), resp)
		}
		r.planStatefulSet(ctx, &plan, prior, &resp.Diagnostics)
		planDaemonSet(&plan)
		r.planReplicaRatio(ctx, &plan, prior, &resp.Diagnostics)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("rollout_plan"), plan.RolloutPlan)...)
	}
	if !req.Plan.Raw.IsFullyKnown() {
		if prior != nil {
			r.warnRejectedManifest(ctx, plan, &resp.Diagnostics)
		}
		return
	}
	ctx, cancel := context.WithTimeout(ctx, planReadTimeout)
	defer cancel()
	rel, err := plan.release()
	if err != nil {
		return
	}
	rel.IncludeLabelPrefix = r.c.labelPrefixes(plan)
	ctx, eng, err := r.engine(ctx, plan, rel, nil)
	if err != nil {
		return
	}
	if warnings := eng.Router.Warnings(ctx); len(warnings) > 0 {
		resp.Diagnostics.AddWarning("canary_release routing", strings.Join(warnings, "\n"))
	}
	if req.State.Raw.IsNull() {
		return
	}
	var state ReleaseModel
	resp.Diagnostics.Append(getModel(ctx, req.State, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
	warnRejected(ctx, eng, rel, &resp.Diagnostics)
	if state.TargetRef.IsNull() != plan.TargetRef.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("manifest"), "Cannot switch between target_ref and manifest",
			"This release was created with "+modeName(state)+". Switching to "+modeName(plan)+" would hand the workload to a different owner mid-life; "+
				"create a new canary_release instead (for example by changing name).")
		return
	}
	drift, err := eng.Drift(ctx, rel, statusFrom(ctx, state.Status))
	if err != nil {
		resp.Diagnostics.AddWarning("canary_release could not check the cluster", err.Error())
		return
	}
	if len(drift) > 0 {
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("status"), types.ObjectUnknown(statusAttrTypes))...)
		// The repair is a run of its own, whose story replaces the last one.
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("last_run"), types.StringUnknown())...)
		// A drifted target may hold a new revision (a ConfigMap it uses changed): the apply
		// decides, so the preview must not promise that no rollout runs.
		decided := state
		decided.Manifest = types.StringNull()
		planRollout(ctx, &plan, &decided, &resp.Diagnostics)
		r.announceRevert(ctx, &plan, sealOf(ctx, req.Private, &resp.Diagnostics), resp)
		resp.Diagnostics.Append(resp.Plan.SetAttribute(ctx, path.Root("rollout_plan"), plan.RolloutPlan)...)
		resp.Diagnostics.AddWarning("canary_release drifted; apply repairs it", strings.Join(drift, "\n"))
	}
}

func modeName(m ReleaseModel) string {
	if !m.TargetRef.IsNull() {
		return "target_ref"
	}
	return "manifest"
}

// refuseIdentityChange stops, at plan time, a change of what names the generated objects.
// Done in place, it would leave the old primary, Services and routes serving (an old generated
// route keeps capturing traffic), and a replacement would initialise the new workload without
// analysis. The mesh drivers name the options that name their objects (mesh.Identified).
// Values not known yet are checked at apply time by the same comparison.
func refuseIdentityChange(prior, plan ReleaseModel, diags *diag.Diagnostics) {
	priorRel, err1 := prior.identity()
	planRel, err2 := plan.identity()
	if err1 != nil || err2 != nil {
		return
	}
	how := fmt.Sprintf("To move the release, do it in two applies: first remove this canary_release (destroy gives the workload back to %q when "+
		"revert_on_deletion is true), then add the new one, whose first apply initialises it; or give the new canary_release another name.", priorRel.target)
	switch {
	case priorRel.target != planRel.target:
		attr := path.Root("target_ref").AtName("name")
		if priorRel.manifest {
			attr = path.Root("manifest")
		}
		diags.AddAttributeError(attr, "The target Deployment cannot be renamed in place",
			fmt.Sprintf("This release's primary %s-primary, its Services and its routes are named after %q; renaming the target to %q would leave them serving. %s",
				priorRel.target, priorRel.target, planRel.target, how))
	case kindOf(priorRel) != kindOf(planRel):
		attr := path.Root("target_ref").AtName("kind")
		if planRel.manifest {
			attr = path.Root("manifest")
		}
		diags.AddAttributeError(attr, "The target's kind cannot change in place",
			fmt.Sprintf("This release's primary %s-primary is a %s; releasing a %s named %q instead would leave it serving. %s",
				priorRel.target, kindOf(priorRel), kindOf(planRel), planRel.target, how))
	case priorRel.service != planRel.service:
		diags.AddAttributeError(path.Root("service").AtName("name"), "service.name cannot change in place",
			fmt.Sprintf("The Services and routes of this release are named after %q; renaming them to %q would leave the old ones serving. %s", priorRel.service, planRel.service, how))
	default:
		if changes := identityChanges(priorRel.options, planRel.options); len(changes) > 0 {
			c := changes[0]
			diags.AddAttributeError(c.Path, c.Summary, c.Detail(c.old, c.new)+" "+how)
		}
	}
}

// kindOf is the identity's target kind; a state from before target_ref.kind existed has none.
func kindOf(id identity) string {
	if id.kind == "" {
		return "Deployment"
	}
	return id.kind
}

// identity is what names a release's generated objects.
type identity struct {
	target   string
	kind     string // the target's kind: its primary is one of that kind
	service  string // service.name; empty means the target's
	manifest bool
	// options are the mesh driver's values that name its objects (a route's name, a port).
	options []mesh.Identity
}

// optionChange is an identity value of the mesh options that differs.
type optionChange struct {
	mesh.Identity
	old, new string
}

// identityChanges lists the option identities that differ between two releases, the prior's
// first; one that only one side has compares with "".
func identityChanges(prior, plan []mesh.Identity) []optionChange {
	value := func(list []mesh.Identity, at path.Path) (string, bool) {
		for _, id := range list {
			if id.Path.Equal(at) {
				return id.Value, true
			}
		}
		return "", false
	}
	var out []optionChange
	for _, id := range prior {
		if now, _ := value(plan, id.Path); now != id.Value {
			out = append(out, optionChange{Identity: id, old: id.Value, new: now})
		}
	}
	for _, id := range plan {
		if _, had := value(prior, id.Path); !had && id.Value != "" {
			out = append(out, optionChange{Identity: id, new: id.Value})
		}
	}
	return out
}

func (m ReleaseModel) identity() (identity, error) {
	var id identity
	var target TargetRefModel
	switch ok, err := decode(m.TargetRef, &target); {
	case err != nil:
		return id, err
	case ok:
		id.target, id.kind = target.Name.ValueString(), target.Kind.ValueString()
	case m.Manifest.IsUnknown():
		return id, errUnknown
	case !m.Manifest.IsNull():
		d, err := parseManifest(m.Manifest.ValueString(), m.Namespace.ValueString())
		if err != nil {
			return id, err
		}
		id.target, id.kind, id.manifest = d.Name, d.Kind, true
	default:
		// Neither is set: a state whose import could not restore them. The apply compares the
		// target with the cluster's record of the release instead.
		return id, errUnknown
	}
	svc, _, err := m.service()
	if err != nil {
		return id, err
	}
	id.service = svc.Name.ValueString()
	id.options, err = registry.Identity(m.MeshProvider.ValueString(), m.meshValues())
	return id, err
}

// validateStrategy checks the strategy that analysis.iterations and analysis.match select
// against what the router and the metrics can do.
func validateStrategy(ctx context.Context, m ReleaseModel, a AnalysisModel, provider string, providerKnown bool, resp *resource.ValidateConfigResponse) {
	at := path.Root("analysis")
	iterations, match := !a.Iterations.IsNull(), !a.Match.IsNull()
	validateMirrorAndSession(ctx, a, provider, providerKnown, resp)
	if providerKnown && registry.Capabilities(provider).SelectorOnly && !a.StepWeightPromotion.IsNull() {
		resp.Diagnostics.AddAttributeError(at.AtName("step_weight_promotion"), "Weights need a router",
			fmt.Sprintf("mesh_provider %q switches the apex Service's selector all at once, so the traffic cannot return to the primary step by step: remove analysis.step_weight_promotion.", provider))
	}
	if providerKnown && registry.Capabilities(provider).SelectorOnly && (!a.StepWeight.IsNull() || !a.StepWeights.IsNull()) && !weightedWithoutMesh(m) && !isDaemonSet(m) {
		// A DaemonSet has its own error (validateDaemonSet).
		resp.Diagnostics.AddAttributeError(at.AtName("step_weight"), "Weights need a router",
			fmt.Sprintf("mesh_provider %q has no mesh or gateway to split traffic by weight: it releases a Deployment by replica ratio and a StatefulSet by partition, not a %s. "+
				"Set analysis.iterations (blue/green, switching the apex Service's selector) instead of step_weight and step_weights, or use a mesh.", provider, targetKind(m)))
	}
	validateReplicaRatio(m, a, provider, providerKnown, resp)
	if iterations && (!a.StepWeight.IsNull() || !a.StepWeights.IsNull()) {
		resp.Diagnostics.AddAttributeError(at.AtName("iterations"), "Conflicting strategies",
			"analysis.iterations selects A/B testing (with match) or blue/green (without); analysis.step_weight and step_weights select a weighted canary. Set one of them.")
	}
	if match && !iterations {
		resp.Diagnostics.AddAttributeError(at.AtName("match"), "match needs iterations",
			"analysis.match selects A/B testing, which runs analysis.iterations intervals: set iterations.")
	}
	if !iterations || !providerKnown || a.Iterations.IsUnknown() || a.Match.IsUnknown() {
		return
	}
	if match {
		if caps, why := registry.CapabilitiesWith(provider, m.meshValues()); !caps.Match {
			if why != "" {
				why = " " + why
			}
			resp.Diagnostics.AddAttributeError(at.AtName("match"), "A/B testing not available",
				fmt.Sprintf("analysis.match needs a router that can send matching requests to the canary: mesh_provider %s%s; not %q%s.",
					quotedOr(registry.Offering(matches)), capabilityConditions(matches), provider, why))
		}
		return
	}
	// Blue/green analyses test traffic sent straight to the canary Service. Metrics that the
	// gateway reports never see it, so the built-in ones of gateway routers would judge nothing.
	if registry.MeasuredAtGateway(provider, m.meshValues()) && !everyMetricCustom(ctx, a) {
		resp.Diagnostics.AddAttributeError(at.AtName("iterations"), "Blue/green not available with these metrics",
			fmt.Sprintf("Blue/green analyses test traffic sent straight to the canary Service, which the built-in metrics of mesh_provider %q (measured at the gateway) never see. "+
				"Use a mesh whose sidecars measure the canary's pods ("+listText(registry.MeasuredAtPods(), "or")+"), "+
				"or give every metric its own query or template_ref that the test traffic reaches.", provider))
	}
}

// validateMirrorAndSession checks analysis.mirror, mirror_weight and session_affinity against
// the strategy and the router.
func validateMirrorAndSession(ctx context.Context, a AnalysisModel, provider string, providerKnown bool, resp *resource.ValidateConfigResponse) {
	at := path.Root("analysis")
	mirror := a.Mirror.ValueBool()
	switch {
	case !a.MirrorWeight.IsNull() && !a.Mirror.IsUnknown() && !mirror:
		resp.Diagnostics.AddAttributeError(at.AtName("mirror_weight"), "mirror_weight needs mirror",
			"analysis.mirror_weight is the percent of requests mirrored: set analysis.mirror = true, or remove mirror_weight.")
	case mirror && !a.Match.IsNull():
		resp.Diagnostics.AddAttributeError(at.AtName("mirror"), "Mirroring and A/B testing",
			"analysis.mirror copies requests to the canary during a weighted canary's first interval or blue/green's iterations; A/B testing (match) already sends the canary real requests. Remove one of them.")
	case mirror && providerKnown && !registry.Capabilities(provider).Mirror:
		resp.Diagnostics.AddAttributeError(at.AtName("mirror"), "Mirroring not available",
			fmt.Sprintf("analysis.mirror needs a router that can copy requests to the canary: mesh_provider %s; not %q.", quotedOr(registry.Offering(mirrors)), provider))
	}
	if a.SessionAffinity.IsNull() {
		return
	}
	at = at.AtName("session_affinity")
	if providerKnown && !registry.Capabilities(provider).SessionAffinity {
		resp.Diagnostics.AddAttributeError(at, "Session affinity not available",
			fmt.Sprintf("analysis.session_affinity needs a router that can route by cookie: mesh_provider %s; not %q.", quotedOr(registry.Offering(keepsSessions)), provider))
	}
	if !a.Iterations.IsNull() {
		resp.Diagnostics.AddAttributeError(at, "Session affinity needs weights",
			"analysis.session_affinity keeps clients on the canary while it has weight: it works with step_weight or step_weights, not with iterations (A/B testing or blue/green).")
	}
	var sa SessionAffinityModel
	if asKnown(ctx, a.SessionAffinity, &sa) && !sa.CookieName.IsUnknown() && sa.CookieName.Equal(sa.PrimaryCookieName) {
		resp.Diagnostics.AddAttributeError(at.AtName("primary_cookie_name"), "Same cookie for both sides",
			fmt.Sprintf("analysis.session_affinity.primary_cookie_name must differ from cookie_name (both are %q): one cookie cannot send a client to both sides.", sa.CookieName.ValueString()))
	}
}

// quotedOr lists values as `"a" or "b"`.
// What a router can do, as registry.Offering asks it.
func matches(c router.Capabilities) bool       { return c.Match }
func mirrors(c router.Capabilities) bool       { return c.Mirror }
func keepsSessions(c router.Capabilities) bool { return c.SessionAffinity }

func quotedOr(values []string) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = strconv.Quote(v)
	}
	if len(quoted) < 2 {
		return strings.Join(quoted, "")
	}
	return strings.Join(quoted[:len(quoted)-1], ", ") + " or " + quoted[len(quoted)-1]
}

// everyMetricCustom reports that every metric brings its own query (or template).
func everyMetricCustom(ctx context.Context, a AnalysisModel) bool {
	var metricModels []MetricModel
	if a.Metrics.IsNull() || a.Metrics.IsUnknown() || a.Metrics.ElementsAs(ctx, &metricModels, false).HasError() {
		return true
	}
	for _, mm := range metricModels {
		if mm.Query.IsNull() && mm.TemplateRef.IsNull() {
			return false
		}
	}
	return true
}

// missingQuery says why a metric without query or template_ref cannot be measured: its name is
// not a built-in one, or the mesh_provider has no built-in metrics at all (its data plane
// reports somewhere the provider cannot query yet).
func missingQuery(i int, name, provider string) string {
	if d, ok := registry.Get(provider); ok && len(d.Describe().Queries) == 0 {
		return fmt.Sprintf("analysis.metrics[%d]: metric %q has no query, and mesh_provider %q has no built-in metrics (see its guide). Set query. "+
			"Or set template_ref, to use one of the provider's metric_templates.", i, name, provider)
	}
	return fmt.Sprintf("analysis.metrics[%d]: metric %q is not built in; built-in metrics are request-success-rate and request-duration. Set query. "+
		"Or set template_ref, to use one of the provider's metric_templates.", i, name)
}
