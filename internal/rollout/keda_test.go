package rollout

import (
	"context"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// kedaScaledObject is the user's ScaledObject of podinfo: 2 to 5 replicas on one Prometheus trigger.
func kedaScaledObject() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
		"metadata": map[string]any{"name": "podinfo", "namespace": "test"},
		"spec": map[string]any{
			"scaleTargetRef":  map[string]any{"name": "podinfo"},
			"minReplicaCount": int64(2), "maxReplicaCount": int64(5),
			"triggers": []any{map[string]any{"type": "prometheus", "name": "rps", "metadata": map[string]any{
				"serverAddress": "http://prometheus:9090", "query": `sum(rate(http_requests_total{deployment="podinfo"}[1m]))`, "threshold": "100",
			}}},
		},
	}}
}

// Issue 24 (KEDA): autoscaler_ref kind ScaledObject, as Flagger does it: a -primary copy that
// scales the primary with the primary's queries, the target's ScaledObject paused at the
// replicas the release gives the target, the canary analysed at minReplicaCount, the
// minimum held while traffic returns to the primary, and destroy gives the target's back to KEDA.
func TestScaledObjectReleasePromotesAndRollsBack(t *testing.T) {
	ctx := context.Background()
	cs := newCluster()
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{autoscaler.ScaledObjects: "ScaledObjectList"}, kedaScaledObject())
	sos := dyn.Resource(autoscaler.ScaledObjects).Namespace("test")
	value := 100.0
	var canaryReplicas, primaryAtReturn []int32
	q := querierFunc(func(ctx context.Context, _ string) (float64, error) {
		d, _ := cs.AppsV1().Deployments("test").Get(ctx, "podinfo", metav1.GetOptions{})
		canaryReplicas = append(canaryReplicas, *d.Spec.Replicas)
		// KEDA scales the primary down as the canary takes its load.
		_, _ = cs.AppsV1().Deployments("test").UpdateScale(ctx, "podinfo-primary",
			&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-primary", Namespace: "test"}, Spec: autoscalingv1.ScaleSpec{Replicas: 1}}, metav1.UpdateOptions{})
		return value, nil
	})
	rt := &fakeRouter{}
	e := &Engine{Kube: cs, Dynamic: dyn, Router: rt, Metrics: q, DrainDelay: 1}
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.Autoscaler = &autoscaler.Ref{Name: "podinfo", Kind: autoscaler.KindScaledObject}
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	paused := func(want string) {
		t.Helper()
		so, err := sos.Get(ctx, "podinfo", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := so.GetAnnotations()[autoscaler.AnnotationPausedReplicas]; got != want {
			t.Errorf("the target's ScaledObject has %s=%q, want %q", autoscaler.AnnotationPausedReplicas, got, want)
		}
	}
	primarySO := func() *unstructured.Unstructured {
		t.Helper()
		so, err := sos.Get(ctx, "podinfo-primary", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("the primary's ScaledObject: %v", err)
		}
		return so
	}
	so := primarySO()
	if name, _, _ := unstructured.NestedString(so.Object, "spec", "scaleTargetRef", "name"); name != "podinfo-primary" {
		t.Errorf("the primary's ScaledObject scales %q, want podinfo-primary", name)
	}
	triggers, _, _ := unstructured.NestedSlice(so.Object, "spec", "triggers")
	if query := triggers[0].(map[string]any)["metadata"].(map[string]any)["query"]; query != `sum(rate(http_requests_total{deployment="podinfo-primary"}[1m]))` {
		t.Errorf("the primary's query = %v, want the target's on podinfo-primary", query)
	}
	paused("0")

	rt.onSet = func(w router.Weights) {
		if w.Primary == 100 {
			p, _ := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{})
			primaryAtReturn = append(primaryAtReturn, p.Status.ReadyReplicas)
		}
	}
	for _, c := range []struct {
		image string
		value float64
		want  Phase
	}{{"podinfo:2", 100, PhaseSucceeded}, {"podinfo:3", 10, PhaseFailed}} {
		canaryReplicas, primaryAtReturn, value = nil, nil, c.value
		setImage(t, e, "podinfo", c.image)
		st, _ = e.Apply(ctx, rel, nil, st)
		if st.Phase != c.want {
			t.Fatalf("%s: phase %s (%s), want %s", c.image, st.Phase, st.Message, c.want)
		}
		if len(canaryReplicas) == 0 || canaryReplicas[0] != 2 {
			t.Errorf("%s: the canary was analysed with %v replicas, want minReplicaCount 2", c.image, canaryReplicas)
		}
		for _, n := range primaryAtReturn {
			if n < 3 {
				t.Errorf("%s: traffic returned to the primary with %d Ready replicas, want its 3 pre-rollout ones", c.image, n)
			}
		}
		if len(primaryAtReturn) == 0 {
			t.Errorf("%s: traffic never returned to the primary", c.image)
		}
		paused("0")
		so := primarySO()
		soMin, _, _ := unstructured.NestedInt64(so.Object, "spec", "minReplicaCount")
		if soMin != 2 || so.GetAnnotations()[autoscaler.AnnotationHeldMinReplicas] != "" {
			t.Errorf("%s: the primary's ScaledObject after the run: minReplicaCount %d, annotations %v; want 2 put back", c.image, soMin, so.GetAnnotations())
		}
	}
	setImage(t, e, "podinfo", "podinfo:2")
	if _, err := e.Apply(ctx, rel, nil, st); err != nil {
		t.Fatal(err)
	}
	if err := e.Delete(ctx, rel, true); err != nil {
		t.Fatal(err)
	}
	if _, err := sos.Get(ctx, "podinfo-primary", metav1.GetOptions{}); err == nil {
		t.Error("the primary's ScaledObject outlived the release")
	}
	paused("")
}
