package provider

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// A weighted strategy with mesh_provider kubernetes is a valid plan for a Deployment: the
// replica ratio (it was refused as blue/green only before).
func TestReplicaRatioIsAValidPlan(t *testing.T) {
	kubeconfig := offlineKubeconfig(t)
	resource.UnitTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{{
			Config:   invalidConfig(kubeconfig, map[string]string{"mesh_provider": `"kubernetes"`}, map[string]string{"step_weight": "", "step_weights": "[10, 25, 50]"}),
			PlanOnly: true, ExpectNonEmptyPlan: true,
		}},
	})
}

// rollout_plan gives each step's canary pods and the share of the traffic they are: with a
// manifest of 4 replicas exactly, with target_ref for a few primary sizes.
func TestReplicaRatioRolloutPlan(t *testing.T) {
	four := int32(4)
	rel := rollout.Release{Namespace: "shop", Name: "web", Target: "web", Provider: "kubernetes", ProgressDeadline: time.Minute,
		Service:  rollout.Service{Port: 80, SelectorRouted: true},
		Analysis: rollout.Analysis{StepWeights: []int{10, 25, 50}, Interval: time.Minute, Threshold: 1},
		Manifest: &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Replicas: &four}}}
	text := describeRollout(rel, rollout.PreviewOf(rel))
	for _, want := range []string{
		"weights: 10 → 25 → 50 → promote",
		"replica ratio (no mesh): Service web selects the pods of both sides by the label canary-release.dev/apex=web",
		"beside 4 primary pods: 10 → 20% (1 pod), 25 → 20% (1 pod), 50 → 50% (4 pods)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("rollout_plan lacks %q:\n%s", want, text)
		}
	}
	rel.Manifest = nil
	text = describeRollout(rel, rollout.PreviewOf(rel))
	for _, want := range []string{"beside 2 primary pods: 10 → 33% (1 pod)", "beside 10 primary pods: 10 → 9% (1 pod), 25 → 23% (3 pods), 50 → 50% (10 pods)"} {
		if !strings.Contains(text, want) {
			t.Errorf("rollout_plan with target_ref lacks %q:\n%s", want, text)
		}
	}
	// Blue/green without a mesh has no ratio.
	rel.Analysis = rollout.Analysis{Iterations: 3, Interval: time.Minute, Threshold: 1}
	if text := describeRollout(rel, rollout.PreviewOf(rel)); strings.Contains(text, "replica ratio") {
		t.Errorf("a blue/green rollout_plan speaks of a replica ratio:\n%s", text)
	}
}
