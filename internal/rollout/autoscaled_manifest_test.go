package rollout

import (
	"context"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A manifest release with autoscaler_ref: manifest.replicas sizes the primary it creates, and
// from then on the primary's autoscaler does. An apply that promotes a new template keeps the
// replicas the autoscaler set, instead of fighting it with the manifest's count (issue 20,
// item 10).
func TestAutoscaledManifestReplicasAreTheAutoscalers(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	two := int32(2)
	hpas := cs.AutoscalingV2().HorizontalPodAutoscalers("test")
	if _, err := hpas.Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "podinfo"},
			MinReplicas:    &two, MaxReplicas: 10,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Kube: cs, Router: &fakeRouter{}, Metrics: querierFunc(func(context.Context, string) (float64, error) { return 100, nil }), DrainDelay: 1}
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.Autoscaler = &autoscaler.Ref{Name: "podinfo"}
	rel.Manifest = manifestOf(podinfo("podinfo:1", 2))

	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	deployments := cs.AppsV1().Deployments("test")
	if got := primaryReplicaCount(t, deployments.Get); got != 2 {
		t.Fatalf("the new primary has %d replicas, want the manifest's 2", got)
	}

	// Load comes: the primary's autoscaler scales it to 6.
	primary, _ := deployments.Get(ctx, "podinfo-primary", metav1.GetOptions{})
	six := int32(6)
	primary.Spec.Replicas = &six
	if _, err := deployments.Update(ctx, primary, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// A new template is released and promoted; the manifest still says 2 replicas.
	rel.Manifest = manifestOf(podinfo("podinfo:2", 2))
	if st, err = e.Apply(ctx, rel, nil, st); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if st.Phase != PhaseSucceeded {
		t.Fatalf("phase = %s, want %s", st.Phase, PhaseSucceeded)
	}
	primary, _ = deployments.Get(ctx, "podinfo-primary", metav1.GetOptions{})
	if image := primary.Spec.Template.Spec.Containers[0].Image; image != "podinfo:2" {
		t.Fatalf("the primary runs %s, want the promoted podinfo:2", image)
	}
	if got := *primary.Spec.Replicas; got != 6 {
		t.Errorf("after the promotion the primary has %d replicas, want the autoscaler's 6 (the manifest's 2 fights the autoscaler)", got)
	}

	// An apply with nothing to roll out leaves them too.
	if _, err = e.Apply(ctx, rel, nil, st); err != nil {
		t.Fatalf("Apply again: %v", err)
	}
	if got := primaryReplicaCount(t, deployments.Get); got != 6 {
		t.Errorf("after an apply with nothing new the primary has %d replicas, want the autoscaler's 6", got)
	}
}

// manifestOf is a release manifest: the Deployment as the configuration writes it.
func manifestOf(d *appsv1.Deployment) *appsv1.Deployment {
	d.Namespace, d.ResourceVersion = "", ""
	return d
}

func primaryReplicaCount(t *testing.T, get func(context.Context, string, metav1.GetOptions) (*appsv1.Deployment, error)) int32 {
	t.Helper()
	p, err := get(context.Background(), "podinfo-primary", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the primary: %v", err)
	}
	if p.Spec.Replicas == nil {
		return 1
	}
	return *p.Spec.Replicas
}
