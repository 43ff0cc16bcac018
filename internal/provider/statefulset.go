package provider

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// statefulSetRouter is the one mesh_provider a StatefulSet runs with: its pods stay behind
// their own Service, and the share of updated pods is the share of the traffic. No other
// router here can split by pod.
const statefulSetRouter = "kubernetes"

// isStatefulSet reports a target_ref of kind StatefulSet.
func isStatefulSet(m ReleaseModel) bool {
	var target TargetRefModel
	ok, err := decode(m.TargetRef, &target)
	return err == nil && ok && target.Kind.ValueString() == statefulset.Kind
}

// validateStatefulSet refuses at plan time what a release by partition cannot do.
func validateStatefulSet(ctx context.Context, m ReleaseModel, provider string, providerKnown bool, resp *resource.ValidateConfigResponse) {
	if !isStatefulSet(m) {
		return
	}
	kind := path.Root("target_ref").AtName("kind")
	if providerKnown && provider != statefulSetRouter {
		resp.Diagnostics.AddAttributeError(kind, "StatefulSets need mesh_provider \"kubernetes\"",
			fmt.Sprintf("target_ref.kind = %q is released in place, by lowering its RollingUpdate partition, so the traffic follows the pods behind their own Service: "+
				"mesh_provider must be %q (not %q), since no other router here splits traffic by pod.", statefulset.Kind, statefulSetRouter, provider))
	}
	if !m.RollbackWindow.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("rollback_window"), "Not available for StatefulSets",
			"rollback_window promotes a revert from the canary copy of a Deployment; a StatefulSet is released in place by its partition, "+
				"and analyses every revision, a revert included: remove rollback_window.")
	}
	var a AnalysisModel
	if !asKnown(ctx, m.Analysis, &a) {
		return
	}
	at := path.Root("analysis")
	if !a.Iterations.IsNull() {
		resp.Diagnostics.AddAttributeError(at.AtName("iterations"), "StatefulSets are released step by step",
			"A StatefulSet is released in place by its partition, a share of its pods at a time: set analysis.step_weight or step_weights, not iterations "+
				"(blue/green and A/B testing need a second copy of the workload, which a StatefulSet does not get: it would duplicate its volumes).")
	}
	for _, unsupported := range []struct {
		name string
		set  bool
	}{{"mirror", !a.Mirror.IsNull() && a.Mirror.ValueBool()}, {"session_affinity", !a.SessionAffinity.IsNull()}, {"step_weight_promotion", !a.StepWeightPromotion.IsNull()}} {
		if unsupported.set {
			resp.Diagnostics.AddAttributeError(at.AtName(unsupported.name), "Not available for StatefulSets",
				fmt.Sprintf("analysis.%s needs a router that splits traffic by weight; a StatefulSet is released by its partition: remove it.", unsupported.name))
		}
	}
	var hooks []WebhookModel
	if !a.Webhooks.IsNull() && !a.Webhooks.IsUnknown() && !a.Webhooks.ElementsAs(ctx, &hooks, false).HasError() {
		for i, h := range hooks {
			if t := h.Type.ValueString(); !h.Type.IsUnknown() && t != "" && !slices.Contains(rollout.InPlaceHookTypes, t) {
				resp.Diagnostics.AddAttributeError(at.AtName("webhooks").AtListIndex(i).AtName("type"), "Not available for StatefulSets",
					fmt.Sprintf("A StatefulSet release runs %s webhooks only, not %q.", strings.Join(rollout.InPlaceHookTypes, ", "), t))
			}
		}
	}
}

// planStatefulSet words rollout_plan in pods, and says on the first apply that the partition
// will be held. rollout_plan depends on the configuration alone (the apply plans again, and
// must find the same text), so it gives each step's pods for a few replica counts; a warning
// gives them for the set's replica count now, when it can be read.
func (r *ReleaseResource) planStatefulSet(ctx context.Context, plan, prior *ReleaseModel, diags *diag.Diagnostics) {
	if !isStatefulSet(*plan) {
		return
	}
	rel, err := plan.release()
	if err != nil {
		return
	}
	if prior == nil {
		plan.RolloutPlan = types.StringValue(fmt.Sprintf("no rollout: the first apply initialises the release; it sets StatefulSet %s's spec.updateStrategy.rollingUpdate.partition "+
			"to 2147483647, above any replica count the set can reach whatever its autoscaler's bounds, so that each later template change is released by lowering it step by step", rel.Target))
		diags.AddAttributeWarning(path.Root("target_ref"), "canary_release will hold the StatefulSet's partition",
			fmt.Sprintf("The first apply sets spec.updateStrategy.rollingUpdate.partition of StatefulSet %s/%s above any replica count it can reach. "+
				"If another tool manages the StatefulSet, make it ignore that field (for the kubernetes provider, lifecycle { ignore_changes } on it).", rel.Namespace, rel.Target))
		return
	}
	plan.RolloutPlan = types.StringValue("decided at apply, when the StatefulSet's template is compared with the last promoted one; if it differs:\n" + StatefulSetRolloutPlan(rel, 0))
	if r.c == nil || r.c.kube == nil {
		return
	}
	if set, err := r.c.kube.AppsV1().StatefulSets(rel.Namespace).Get(ctx, rel.Target, metav1.GetOptions{}); err == nil {
		replicas := int32(1)
		if set.Spec.Replicas != nil {
			replicas = *set.Spec.Replicas
		}
		diags.AddAttributeWarning(path.Root("rollout_plan"), "StatefulSet steps in pods",
			fmt.Sprintf("If the template changed, StatefulSet %s/%s (%d pods now) is released as:\n%s", rel.Namespace, rel.Target, replicas, StatefulSetRolloutPlan(rel, replicas)))
	}
}

// exampleReplicas are the replica counts rollout_plan shows each step's pods for.
var exampleReplicas = []int32{2, 3, 5, 10}

// StatefulSetRolloutPlan words a release by partition: the pods of each step (of replicas,
// or of a few replica counts when 0), the promotion and the rollback.
func StatefulSetRolloutPlan(rel rollout.Release, replicas int32) string {
	var b strings.Builder
	fmt.Fprintf(&b, "StatefulSet %s is released in place by its partition", rel.Target)
	if replicas > 0 {
		fmt.Fprintf(&b, " (%d pods)", replicas)
	}
	b.WriteString(":\n")
	if rel.SkipAnalysis {
		b.WriteString("- skip_analysis: every pod moves to the new revision at once\n")
	} else {
		for i, w := range rollout.StepWeights(rel.Analysis) {
			if replicas > 0 {
				k := statefulset.PodsForWeight(w, replicas)
				fmt.Fprintf(&b, "- step %d: %d of %d pods on the new revision (%d%%, step weight %d%%), partition %d, analysed for %s\n",
					i+1, k, replicas, int(k*100/replicas), w, replicas-k, humanDuration(rel.Analysis.Interval))
				continue
			}
			var counts []string
			for _, n := range exampleReplicas {
				counts = append(counts, fmt.Sprintf("%d of %d", statefulset.PodsForWeight(w, n), n))
			}
			fmt.Fprintf(&b, "- step %d: %d%% of the pods, rounded down to whole pods and at least 1 (%s pods), analysed for %s\n",
				i+1, w, strings.Join(counts, ", "), humanDuration(rel.Analysis.Interval))
		}
	}
	b.WriteString("- promotion: partition 0, every pod on the new revision, then the partition is held again\n")
	b.WriteString("- on failure: the last promoted template is restored, every pod runs it again and is Ready, and the partition is held again")
	return b.String()
}
