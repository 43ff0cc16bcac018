package provider

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/diag"
	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	meshk8s "github.com/canary-release/terraform-provider-canary/internal/mesh/kubernetes"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/workload"
	"github.com/canary-release/terraform-provider-canary/internal/workload/daemonset"
)

// A weighted strategy without a mesh (a SelectorOnly router such as mesh_provider
// "kubernetes") is a replica ratio for a Deployment and a partition for a StatefulSet: the
// traffic follows the pods behind the apex Service. Other kinds have neither.

// weightedWithoutMeshKinds are the target kinds a weighted strategy can release without a mesh.
var weightedWithoutMeshKinds = append([]string{"Deployment"}, workload.InPlaceKinds()...)

// targetKind is target_ref.kind or the manifest's ("Deployment" by default); "" while unknown.
func targetKind(m ReleaseModel) string {
	var target TargetRefModel
	ok, err := decode(m.TargetRef, &target)
	switch {
	case err != nil || (ok && target.Kind.IsUnknown()):
		return ""
	case ok && target.Kind.ValueString() != "":
		return target.Kind.ValueString()
	case isDaemonSet(m):
		return daemonset.Kind
	}
	return "Deployment"
}

// weightedWithoutMesh reports a target that a SelectorOnly router can release by weight.
func weightedWithoutMesh(m ReleaseModel) bool {
	kind := targetKind(m)
	for _, k := range weightedWithoutMeshKinds {
		if kind == k || kind == "" {
			return true
		}
	}
	return false
}

// validateReplicaRatio refuses at plan time what a replica ratio cannot do: an autoscaler on
// the canary would undo the replicas its steps set.
func validateReplicaRatio(m ReleaseModel, a AnalysisModel, provider string, providerKnown bool, resp *resource.ValidateConfigResponse) {
	if !providerKnown || !registry.Capabilities(provider).SelectorOnly || (a.StepWeight.IsNull() && a.StepWeights.IsNull()) {
		return
	}
	if targetKind(m) != "Deployment" || m.AutoscalerRef.IsNull() {
		return
	}
	resp.Diagnostics.AddAttributeError(path.Root("autoscaler_ref"), "Not available with a replica ratio",
		fmt.Sprintf("With mesh_provider %q and analysis.step_weight or step_weights, each step sets the canary's replicas to its share of the primary's Ready pods "+
			"(the traffic follows the pods): an autoscaler on the target would undo them. Remove autoscaler_ref, or use a mesh that splits traffic by weight.", provider))
}

// planReplicaRatio warns, for a target_ref release by replica ratio, with each step's pods
// beside the primary's Ready pods now: rollout_plan depends on the configuration alone, so it
// gives them for a few primary sizes only.
func (r *ReleaseResource) planReplicaRatio(ctx context.Context, plan, prior *ReleaseModel, diags *diag.Diagnostics) {
	if prior == nil || r.c == nil || r.c.kube == nil {
		return
	}
	rel, err := plan.release()
	if err != nil || !rel.RatioRouted() || rel.SkipAnalysis || rel.Manifest != nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, planReadTimeout)
	defer cancel()
	primary, err := r.c.kube.AppsV1().Deployments(rel.Namespace).Get(rctx, rel.PrimaryName(), metav1.GetOptions{})
	if err != nil || primary.Status.ReadyReplicas == 0 {
		return
	}
	diags.AddAttributeWarning(path.Root("rollout_plan"), "Replica ratio steps in pods",
		fmt.Sprintf("If the template changed, Deployment %s/%s is released beside the %d Ready pods of %s as:\n%s",
			rel.Namespace, rel.Target, primary.Status.ReadyReplicas, rel.PrimaryName(), ratioSteps(rel, primary.Status.ReadyReplicas)))
}

// ratioSteps words each step's canary pods beside primary pods, and their share.
func ratioSteps(rel rollout.Release, primary int32) string {
	steps := rollout.PreviewOf(rel).Steps
	parts := make([]string, 0, len(steps))
	for _, w := range steps {
		c := meshk8s.CanaryReplicas(primary, w)
		parts = append(parts, fmt.Sprintf("%d → %d%% (%d %s)", w, meshk8s.EffectivePercent(primary, c), c, plural(c, "pod")))
	}
	return strings.Join(parts, ", ")
}

// replicaRatioPlan is rollout_plan's line for a replica ratio: each step's canary pods and the
// share they are of the traffic, for the manifest's replicas or, with target_ref (whose
// replicas the plan does not read), for a few primary sizes.
func replicaRatioPlan(rel rollout.Release) string {
	sizes := exampleReplicas
	if rel.Manifest != nil {
		sizes = []int32{1}
		if rel.Manifest.Spec.Replicas != nil && *rel.Manifest.Spec.Replicas > 0 {
			sizes = []int32{*rel.Manifest.Spec.Replicas}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "replica ratio (no mesh): Service %s selects the pods of both sides by the label %s=%s; each step scales the canary to its share of the primary's Ready pods, "+
		"rounded down to whole pods but at least one, and the step's weight is the share of Ready pods:", rel.Apex(), router.LabelApex, rel.Apex())
	for _, primary := range sizes {
		fmt.Fprintf(&b, "\n  beside %d primary %s: %s", primary, plural(primary, "pod"), ratioSteps(rel, primary))
	}
	return b.String()
}

func plural(n int32, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// ratioPlanLines is what describeRollout adds for a replica ratio (nothing otherwise).
func ratioPlanLines(rel rollout.Release) []string {
	if !rel.RatioRouted() || rel.SkipAnalysis {
		return nil
	}
	return []string{replicaRatioPlan(rel)}
}
