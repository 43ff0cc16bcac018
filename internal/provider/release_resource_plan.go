package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// planReadTimeout bounds the cluster reads of a plan; a slow cluster must not stall `plan`.
const planReadTimeout = 15 * time.Second

// ValidateConfig catches at plan time what the schema alone cannot express.
func (r *ReleaseResource) ValidateConfig(ctx context.Context, req resource.ValidateConfigRequest, resp *resource.ValidateConfigResponse) {
	var m ReleaseModel
	resp.Diagnostics.Append(req.Config.Get(ctx, &m)...)
	if resp.Diagnostics.HasError() {
		return
	}
	provider := m.MeshProvider.ValueString()
	known := !m.MeshProvider.IsUnknown()

	if known && provider == "apisix" && m.RouteRef == nil {
		resp.Diagnostics.AddAttributeError(path.Root("route_ref"), "Missing route_ref",
			`route_ref is required when mesh_provider = "apisix": it names the ApisixRoute whose rule sends traffic to the apex Service.`)
	}
	if known && provider != "apisix" && m.RouteRef != nil {
		resp.Diagnostics.AddAttributeError(path.Root("route_ref"), "route_ref needs APISIX",
			fmt.Sprintf(`route_ref is only used with mesh_provider = "apisix", not %q.`, provider))
	}
	if known && provider != "gloo" && (m.UpstreamRef != nil || m.Gloo != nil) {
		attr := "upstream_ref"
		if m.Gloo != nil {
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
	if m.Analysis != nil {
		validateAnalysis(m.Analysis, provider, known, m.SkipAnalysis.ValueBool(), resp)
	}
}

func validateAnalysis(a *AnalysisModel, provider string, providerKnown, skip bool, resp *resource.ValidateConfigResponse) {
	at := path.Root("analysis")
	if !a.Interval.IsNull() && !a.Interval.IsUnknown() {
		if d, err := time.ParseDuration(a.Interval.ValueString()); err == nil && d < time.Second {
			resp.Diagnostics.AddAttributeError(at.AtName("interval"), "Interval too short",
				fmt.Sprintf("analysis.interval must be at least 1s, got %s.", a.Interval.ValueString()))
		}
	}
	if !a.Iterations.IsNull() {
		resp.Diagnostics.AddAttributeError(at.AtName("iterations"), "Strategy not available",
			"analysis.iterations selects Flagger's A/B or blue/green strategy, which canary_release does not offer yet. Use step_weight or step_weights.")
	}
	hasStep := !a.StepWeight.IsNull()
	hasSteps := a.StepWeights != nil
	switch {
	case hasStep && hasSteps:
		resp.Diagnostics.AddAttributeError(at.AtName("step_weights"), "Conflicting step settings",
			"Set exactly one of analysis.step_weight and analysis.step_weights.")
	case !hasStep && !hasSteps && !skip && a.Iterations.IsNull() && !a.StepWeight.IsUnknown():
		resp.Diagnostics.AddAttributeError(at.AtName("step_weight"), "Missing step settings",
			"Set analysis.step_weight (with max_weight) or analysis.step_weights, so the release knows how to shift traffic.")
	}
	for i := 1; i < len(a.StepWeights); i++ {
		if a.StepWeights[i] <= a.StepWeights[i-1] {
			resp.Diagnostics.AddAttributeError(at.AtName("step_weights"), "Step weights must ascend",
				fmt.Sprintf("analysis.step_weights must be strictly ascending, but %d follows %d.", a.StepWeights[i], a.StepWeights[i-1]))
			break
		}
	}
	for i, m := range a.Metrics {
		mp := at.AtName("metrics").AtListIndex(i)
		name := m.Name.ValueString()
		if m.Query.IsNull() && providerKnown && !m.Name.IsUnknown() {
			if _, ok := metrics.Builtin(provider, name); !ok {
				resp.Diagnostics.AddAttributeError(mp.AtName("query"), "Missing query",
					fmt.Sprintf("metric %q is not built in; built-in metrics are request-success-rate and request-duration. Set query.", name))
			}
		}
		if m.ThresholdRange == nil || (m.ThresholdRange.Min.IsNull() && m.ThresholdRange.Max.IsNull()) {
			resp.Diagnostics.AddAttributeError(mp.AtName("threshold_range"), "Missing threshold_range",
				fmt.Sprintf("metric %q needs threshold_range with min, max or both.", name))
		} else if tr := m.ThresholdRange; !tr.Min.IsNull() && !tr.Max.IsNull() && tr.Min.ValueFloat64() > tr.Max.ValueFloat64() {
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
	if (state.TargetRef == nil) != (plan.TargetRef == nil) {
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
	if m.TargetRef != nil {
		return "target_ref"
	}
	return "manifest"
}
