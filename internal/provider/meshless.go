package provider

import (
	"fmt"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"

	meshk8s "github.com/canary-release/terraform-provider-canary/internal/mesh/kubernetes"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// A weighted strategy without a mesh (a SelectorOnly router such as mesh_provider
// "kubernetes") is a replica ratio for a Deployment and a partition for a StatefulSet: the
// traffic follows the pods behind the apex Service. Other kinds have neither.

// weightedWithoutMeshKinds are the target kinds a weighted strategy can release without a mesh.
var weightedWithoutMeshKinds = []string{"Deployment", rollout.KindStatefulSet}

// targetKind is target_ref.kind ("Deployment" by default, and for a manifest); "" while unknown.
func targetKind(m ReleaseModel) string {
	var target TargetRefModel
	ok, err := decode(m.TargetRef, &target)
	switch {
	case err != nil || (ok && target.Kind.IsUnknown()):
		return ""
	case ok && target.Kind.ValueString() != "":
		return target.Kind.ValueString()
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

// replicaRatioPlan is rollout_plan's line for a replica ratio: each step's canary pods and the
// share they are of the traffic, for the manifest's replicas or, with target_ref (whose
// replicas the plan does not read), for a few primary sizes.
func replicaRatioPlan(rel rollout.Release) string {
	steps := rollout.PreviewOf(rel).Steps
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
		parts := make([]string, 0, len(steps))
		for _, w := range steps {
			c := meshk8s.CanaryReplicas(primary, w)
			parts = append(parts, fmt.Sprintf("%d → %d%% (%d %s)", w, meshk8s.EffectivePercent(primary, c), c, plural(c, "pod")))
		}
		fmt.Fprintf(&b, "\n  beside %d primary %s: %s", primary, plural(primary, "pod"), strings.Join(parts, ", "))
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
