package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"github.com/hashicorp/terraform-plugin-framework/types/basetypes"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// planReadTimeout bounds the cluster reads of a plan; a slow cluster must not stall `plan`.
const planReadTimeout = 15 * time.Second

// ValidateConfig catches at plan time what the schema alone cannot express. Values that are
// not known yet (module variables, other resources' outputs) are skipped: the apply, which
// sees them, decodes them again.
func (r *ReleaseResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m ReleaseModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	provider := m.MeshProvider.ValueString()
	known := !m.MeshProvider.IsUnknown()

	if known && provider == "apisix" && m.RouteRef.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("route_ref"), "Missing route_ref",
			`route_ref is required when mesh_provider = "apisix": it names the ApisixRoute whose rule sends traffic to the apex Service.`)
	}
	if known && provider != "apisix" && isSet(m.RouteRef) {
		resp.Diagnostics.AddAttributeError(path.Root("route_ref"), "route_ref needs APISIX",
			fmt.Sprintf(`route_ref is only used with mesh_provider = "apisix", not %q.`, provider))
	}
	if known && provider != "gloo" && (isSet(m.UpstreamRef) || isSet(m.Gloo)) {
		attr := "upstream_ref"
		if isSet(m.Gloo) {
			attr = "gloo"
		}
		resp.Diagnostics.AddAttributeError(path.Root(attr), attr+" needs Gloo",
			fmt.Sprintf(`%s is only used with mesh_provider = "gloo", not %q.`, attr, provider))
	}
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
		validateAnalysis(ctx, a, provider, known, skip, resp)
	}
}

// isSet reports an object that is set, or may be once known.
func isSet(o types.Object) bool { return !o.IsNull() }

// asKnown reads an object whose own value is known into target, whose fields are framework
// values that may still be unknown. It reports false for a null or unknown object.
func asKnown(ctx context.Context, o types.Object, target any) bool {
	if o.IsNull() || o.IsUnknown() {
		return false
	}
	return !o.As(ctx, target, basetypes.ObjectAsOptions{}).HasError()
}

func validateAnalysis(ctx context.Context, a AnalysisModel, provider string, providerKnown, skip bool, resp *resource.ValidateConfigResponse) {
	at := path.Root("analysis")
	if !a.Iterations.IsNull() && !a.Iterations.IsUnknown() {
		resp.Diagnostics.AddAttributeError(at.AtName("iterations"), "Strategy not available",
			"analysis.iterations selects Flagger's A/B or blue/green strategy, which canary_release does not offer yet. Use step_weight or step_weights.")
	}
	hasStep, hasSteps := !a.StepWeight.IsNull(), !a.StepWeights.IsNull()
	switch {
	case hasStep && hasSteps && !a.StepWeight.IsUnknown() && !a.StepWeights.IsUnknown():
		resp.Diagnostics.AddAttributeError(at.AtName("step_weights"), "Conflicting step settings",
			"Set exactly one of analysis.step_weight and analysis.step_weights.")
	case !hasStep && !hasSteps && !skip && a.Iterations.IsNull():
		resp.Diagnostics.AddAttributeError(at.AtName("step_weight"), "Missing step settings",
			"Set analysis.step_weight (with max_weight) or analysis.step_weights, so the release knows how to shift traffic.")
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
	var metricModels []MetricModel
	if a.Metrics.IsNull() || a.Metrics.IsUnknown() || a.Metrics.ElementsAs(ctx, &metricModels, false).HasError() {
		return
	}
	for i, m := range metricModels {
		mp := at.AtName("metrics").AtListIndex(i)
		name := m.Name.ValueString()
		if m.Query.IsNull() && providerKnown && !m.Name.IsUnknown() {
			if _, ok := metrics.Builtin(provider, name); !ok {
				resp.Diagnostics.AddAttributeError(mp.AtName("query"), "Missing query",
					fmt.Sprintf("metric %q is not built in; built-in metrics are request-success-rate and request-duration. Set query.", name))
			}
		}
		if m.ThresholdRange.IsUnknown() {
			continue
		}
		var tr RangeModel
		if !asKnown(ctx, m.ThresholdRange, &tr) || (tr.Min.IsNull() && tr.Max.IsNull()) {
			resp.Diagnostics.AddAttributeError(mp.AtName("threshold_range"), "Missing threshold_range",
				fmt.Sprintf("metric %q needs threshold_range with min, max or both.", name))
		} else if !tr.Min.IsNull() && !tr.Max.IsNull() && !tr.Min.IsUnknown() && !tr.Max.IsUnknown() && tr.Min.ValueFloat64() > tr.Max.ValueFloat64() {
			resp.Diagnostics.AddAttributeError(mp.AtName("threshold_range"), "Empty threshold_range",
				fmt.Sprintf("metric %q: threshold_range.min (%g) is above max (%g).", name, tr.Min.ValueFloat64(), tr.Max.ValueFloat64()))
		}
	}
}

// ModifyPlan reads the live objects and proposes an update when the cluster drifted.
func (r *ReleaseResource) ModifyPlan(ctx context.Context, req resource.ModifyPlanRequest, resp *resource.ModifyPlanResponse) {
	if req.Plan.Raw.IsNull() || r.c == nil {
		return
	}
	var plan ReleaseModel
	resp.Diagnostics.Append(req.Plan.Get(ctx, &plan)...)
	if resp.Diagnostics.HasError() || !req.Plan.Raw.IsFullyKnown() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, planReadTimeout)
	defer cancel()
	rel, err := plan.release()
	if err != nil {
		return
	}
	eng, err := r.engine(ctx, plan, rel, nil)
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
	resp.Diagnostics.Append(req.State.Get(ctx, &state)...)
	if resp.Diagnostics.HasError() {
		return
	}
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
		resp.Diagnostics.AddWarning("canary_release drifted; apply repairs it", strings.Join(drift, "\n"))
	}
}

func modeName(m ReleaseModel) string {
	if !m.TargetRef.IsNull() {
		return "target_ref"
	}
	return "manifest"
}
