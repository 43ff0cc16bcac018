package rollout

import (
	"context"
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The primary gets its own copy of the target's autoscaler, kept in sync on every apply, and
// the canary is analysed at the autoscaler's minimum.
func TestPrimaryAutoscalerFollowsTheTargets(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	three := int32(3)
	hpas := cs.AutoscalingV2().HorizontalPodAutoscalers("test")
	if _, err := hpas.Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "podinfo"},
			MinReplicas:    &three, MaxReplicas: 10,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var canaryReplicas int32
	q := querierFunc(func(ctx context.Context, _ string) (float64, error) {
		d, _ := cs.AppsV1().Deployments("test").Get(ctx, "podinfo", metav1.GetOptions{})
		canaryReplicas = *d.Spec.Replicas
		return 100, nil
	})
	rt := &fakeRouter{}
	e := &Engine{Kube: cs, Router: rt, Metrics: q, DrainDelay: 1}
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.Autoscaler = &autoscaler.Ref{Name: "podinfo", PrimaryMaxReplicas: 20}
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	primary, err := hpas.Get(ctx, "podinfo-primary", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the primary's autoscaler: %v", err)
	}
	if primary.Spec.ScaleTargetRef.Name != "podinfo-primary" || *primary.Spec.MinReplicas != 3 || primary.Spec.MaxReplicas != 20 {
		t.Errorf("primary autoscaler = %+v, want podinfo-primary scaled 3..20", primary.Spec)
	}

	// The target's autoscaler changes: the plan shows it, and the next apply follows it.
	target, _ := hpas.Get(ctx, "podinfo", metav1.GetOptions{})
	five := int32(5)
	target.Spec.MinReplicas = &five
	if _, err := hpas.Update(ctx, target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if drift, _ := e.Drift(ctx, rel, st); len(drift) != 1 || !strings.Contains(drift[0], "no longer follows podinfo") {
		t.Errorf("drift = %v, want the autoscaler's", drift)
	}
	d, _ := cs.AppsV1().Deployments("test").Get(ctx, "podinfo", metav1.GetOptions{})
	d.Spec.Template.Spec.Containers[0].Image = "podinfo:2"
	if _, err := cs.AppsV1().Deployments("test").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err = e.Apply(ctx, rel, nil, st); err != nil {
		t.Fatal(err)
	}
	if canaryReplicas != 5 {
		t.Errorf("the canary was analysed with %d replicas, want the autoscaler's minimum 5", canaryReplicas)
	}
	if primary, _ = hpas.Get(ctx, "podinfo-primary", metav1.GetOptions{}); *primary.Spec.MinReplicas != 5 {
		t.Errorf("the primary's autoscaler kept min %d, want 5", *primary.Spec.MinReplicas)
	}
	if drift, _ := e.Drift(ctx, rel, st); len(drift) != 0 {
		t.Errorf("drift after the apply: %v", drift)
	}

	if err := e.Delete(ctx, rel, true); err != nil {
		t.Fatal(err)
	}
	if _, err := hpas.Get(ctx, "podinfo-primary", metav1.GetOptions{}); err == nil {
		t.Error("the primary's autoscaler outlived the release")
	}
	if _, err := hpas.Get(ctx, "podinfo", metav1.GetOptions{}); err != nil {
		t.Errorf("the user's autoscaler: %v", err)
	}
}
