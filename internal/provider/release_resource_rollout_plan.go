package provider

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/types"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// Texts of rollout_plan when no rollout runs.
const (
	noRolloutCreate    = "no rollout: the first apply initialises the release, and the primary starts from this pod template without analysis"
	noRolloutUnchanged = "no rollout: the pod template is unchanged"
)

// settleRolloutPlan fills a rollout_plan that the plan left unknown, from the final values.
func settleRolloutPlan(ctx context.Context, plan *ReleaseModel, prior *ReleaseModel) {
	if plan.RolloutPlan.IsUnknown() {
		var ignored diag.Diagnostics
		planRollout(ctx, plan, prior, &ignored)
		planDaemonSet(plan)
	}
}

// planRollout fills rollout_plan for a create or an update and warns when the rollout may
// outlast timeouts.update. prior is nil for a create. The text depends only on the
// configuration (and, for a create or an unchanged template, on nothing else), so a plan
// made again from the same configuration shows the same text: no perpetual diff.
func planRollout(ctx context.Context, plan *ReleaseModel, prior *ReleaseModel, diags *diag.Diagnostics) {
	if prior == nil {
		plan.RolloutPlan = types.StringValue(noRolloutCreate)
		return
	}
	rel, err := plan.release()
	if err != nil {
		// Values known only at apply (module variables, other resources' outputs) decide it:
		// the text stays unknown until then, or the apply would contradict the plan.
		plan.RolloutPlan = types.StringUnknown()
		return
	}
	if rel.Manifest != nil && unchangedTemplate(rel, *prior) {
		plan.RolloutPlan = types.StringValue(noRolloutUnchanged)
		return
	}
	preview := rollout.PreviewOf(rel)
	text := describeRollout(rel, preview)
	if rel.Manifest == nil || prior.Manifest.IsNull() {
		// With target_ref, the target may change earlier in this same apply (triggers); after
		// an import, the prior manifest is not known (the state ConfigMap never holds it).
		text = "decided at apply, when the target's pod template is compared with the last promoted one; if it differs:\n" + text
	}
	plan.RolloutPlan = types.StringValue(text)

	if plan.Timeouts.IsUnknown() {
		return
	}
	limit, d := plan.Timeouts.Update(ctx, defaultUpdateTimeout)
	if d.HasError() {
		return
	}
	switch {
	case preview.Shortest > limit:
		diags.AddAttributeWarning(path.Root("timeouts"), "The rollout cannot finish within timeouts.update",
			fmt.Sprintf("Even a rollout that passes every check takes %s, above timeouts.update (%s): the apply would run out of time, roll back to the primary and fail. "+
				"Raise timeouts.update, or shorten the analysis (fewer steps or a shorter analysis.interval).", humanDuration(preview.Shortest), humanDuration(limit)))
	case preview.Worst > limit && preview.Unbounded == "":
		diags.AddAttributeWarning(path.Root("timeouts"), "The rollout may outlast timeouts.update",
			fmt.Sprintf("This rollout takes %s at best and up to %s at worst, above timeouts.update (%s). A run that reaches the timeout rolls back to the primary and fails the apply. "+
				"Raise timeouts.update, or shorten the analysis (fewer steps, a shorter analysis.interval, a lower threshold or progress_deadline_seconds).",
				humanDuration(preview.Shortest), humanDuration(preview.Worst), humanDuration(limit)))
	}
}

// unchangedTemplate reports whether the planned manifest's pod template is the prior one.
func unchangedTemplate(rel rollout.Release, prior ReleaseModel) bool {
	if prior.Manifest.IsNull() || prior.Manifest.IsUnknown() {
		return false
	}
	before, err := parseManifest(prior.Manifest.ValueString(), rel.Namespace)
	return err == nil && equality.Semantic.DeepEqual(before.Spec.Template, rel.Manifest.Spec.Template)
}

// describeRollout is the rollout_plan text of a rollout: schedule, checks, gates, durations.
func describeRollout(rel rollout.Release, p rollout.Preview) string {
	deadline := humanDuration(rel.ProgressDeadline)
	if rel.SkipAnalysis {
		return fmt.Sprintf("skip_analysis: the new template is promoted as soon as the canary is Ready, without analysis\n"+
			"duration: up to %s (two readiness waits of progress_deadline_seconds, %s)", humanDuration(p.Worst), deadline)
	}
	checks := "nothing (no metrics and no rollout webhooks: every interval passes)"
	if len(p.Checks) > 0 {
		checks = strings.Join(p.Checks, ", ")
	}
	gates := "none"
	if len(p.Gates) > 0 {
		gates = strings.Join(p.Gates, ", ")
	}
	lines := []string{
		"weights: " + p.Schedule(),
		fmt.Sprintf("checks: %d intervals of %s, each judging %s", p.Intervals, humanDuration(rel.Analysis.Interval), checks),
		fmt.Sprintf("gates: %s; rollback at %s", gates, failedChecks(max(rel.Analysis.Threshold, 1))),
	}
	if rel.RollbackWindow > 0 {
		lines = append(lines, fmt.Sprintf("rollback_window: a template among the last %d promoted before the current one is promoted as soon as the canary is Ready, without analysis or weights", rel.RollbackWindow))
	}
	if p.Scaling != "" {
		lines = append(lines, "replicas: "+p.Scaling)
	}
	lines = append(lines, ratioPlanLines(rel)...)
	return strings.Join(append(lines, worst(rel, p)), "\n")
}

func worst(rel rollout.Release, p rollout.Preview) string {
	if p.Unbounded != "" {
		return fmt.Sprintf("duration: %s at best; at worst as long as the gate %s stays closed, since no analysis.gate_timeout bounds it (timeouts.update does)",
			humanDuration(p.Shortest), p.Unbounded)
	}
	return fmt.Sprintf("duration: %s at best, %s at worst (%s below the threshold, readiness waits of %s, every webhook at its timeout%s)",
		humanDuration(p.Shortest), humanDuration(p.Worst), failedChecks(max(rel.Analysis.Threshold, 1)-1), humanDuration(rel.ProgressDeadline), gateText(rel))
}

func gateText(rel rollout.Release) string {
	if rel.Analysis.GateTimeout == 0 {
		return ""
	}
	return ", every gate closed for its gate_timeout of " + humanDuration(rel.Analysis.GateTimeout)
}

func failedChecks(n int) string {
	if n == 1 {
		return "1 failed check"
	}
	return fmt.Sprintf("%d failed checks", n)
}

// humanDuration writes 1h0m0s as 1h and 2m30s as 2m30s.
func humanDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
