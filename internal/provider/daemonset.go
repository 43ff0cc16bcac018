package provider

import (
	"context"
	"fmt"

	"github.com/hashicorp/terraform-plugin-framework/path"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/types"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/workload/daemonset"
)

// decodeManifest reads the manifest as an apps/v1 Deployment, or as a DaemonSet through the
// Deployment-shaped view the engine releases it by.
func decodeManifest(text string) (*appsv1.Deployment, error) {
	var head metav1.TypeMeta
	if err := yaml.Unmarshal([]byte(text), &head); err != nil {
		return nil, fmt.Errorf("manifest is not a valid Deployment or DaemonSet in YAML or JSON: %v", err)
	}
	if head.APIVersion != "apps/v1" || (head.Kind != "Deployment" && head.Kind != daemonset.Kind) {
		return nil, fmt.Errorf("manifest must be an apps/v1 Deployment or DaemonSet, got apiVersion %q and kind %q", head.APIVersion, head.Kind)
	}
	if head.Kind == daemonset.Kind {
		var ds appsv1.DaemonSet
		if err := yaml.UnmarshalStrict([]byte(text), &ds); err != nil {
			return nil, fmt.Errorf("manifest is not a valid DaemonSet in YAML or JSON: %v", err)
		}
		return daemonset.View(&ds), nil
	}
	var d appsv1.Deployment
	if err := yaml.UnmarshalStrict([]byte(text), &d); err != nil {
		return nil, fmt.Errorf("manifest is not a valid Deployment in YAML or JSON: %v", err)
	}
	return &d, nil
}

// isDaemonSet reports a release of a DaemonSet: target_ref.kind, or the manifest's kind.
func isDaemonSet(m ReleaseModel) bool {
	var target TargetRefModel
	if ok, err := decode(m.TargetRef, &target); err == nil && ok {
		return target.Kind.ValueString() == daemonset.Kind
	}
	if m.Manifest.IsNull() || m.Manifest.IsUnknown() {
		return false
	}
	d, err := decodeManifest(m.Manifest.ValueString())
	return err == nil && d.Kind == daemonset.Kind
}

// validateDaemonSet refuses at plan time what a DaemonSet release cannot do.
func validateDaemonSet(ctx context.Context, m ReleaseModel, provider string, providerKnown bool, resp *resource.ValidateConfigResponse) {
	if !isDaemonSet(m) {
		return
	}
	if !m.AutoscalerRef.IsNull() {
		resp.Diagnostics.AddAttributeError(path.Root("autoscaler_ref"), "Autoscalers do not apply to DaemonSets",
			"A DaemonSet runs one pod per node it selects, so no HorizontalPodAutoscaler or ScaledObject sizes it: remove autoscaler_ref.")
	}
	var a AnalysisModel
	if !providerKnown || !registry.Capabilities(provider).SelectorOnly || !asKnown(ctx, m.Analysis, &a) {
		return
	}
	if !a.StepWeight.IsNull() || !a.StepWeights.IsNull() {
		// Without a mesh a weight is a share of the pods; a DaemonSet's pods are its nodes.
		resp.Diagnostics.AddAttributeError(path.Root("analysis").AtName("step_weight"), "A DaemonSet without a mesh runs blue/green",
			fmt.Sprintf("mesh_provider %q cannot give a DaemonSet's canary a share of the traffic: a DaemonSet runs one pod on every node it selects, not a number of replicas. "+
				"Set analysis.iterations (blue/green) instead of step_weight and step_weights, or choose a mesh_provider that splits by weight.", provider))
	}
}

// planDaemonSet adds to rollout_plan how the canary DaemonSet runs its pods.
func planDaemonSet(plan *ReleaseModel) {
	if !isDaemonSet(*plan) || plan.RolloutPlan.IsUnknown() || plan.RolloutPlan.IsNull() {
		return
	}
	text := plan.RolloutPlan.ValueString()
	if text == noRolloutCreate {
		plan.RolloutPlan = types.StringValue(text + "; the DaemonSet's pods move to its -primary copy, and the target DaemonSet is emptied by the node selector " +
			daemonset.NodeSelectorEmptied + "=true, which no node matches")
		return
	}
	if text == noRolloutUnchanged {
		return
	}
	plan.RolloutPlan = types.StringValue(text + "\npods: the canary DaemonSet runs a pod on every node its template selects for the analysis (the weights are the router's, not a share of the nodes), " +
		"and is emptied again by the node selector " + daemonset.NodeSelectorEmptied + "=true after the promotion or the rollback")
}
