package rollout

import (
	"context"
	"strings"
	"sync"
	"testing"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// hpaRush is a release of podinfo (4 replicas) whose autoscaler has minReplicas 1: during the
// analysis the primary's autoscaler scales the primary down to 1 as the canary takes traffic
// (played by the querier), and onReturn sees the primary's replicas each time the router
// gives the primary all the traffic back.
func hpaRush(t *testing.T, good bool) (e *Engine, cs *fake.Clientset, rel Release, st Status, atReturn *[]int32) {
	t.Helper()
	ctx := context.Background()
	cs = newCluster()
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	one := int32(1)
	if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("test").Create(ctx, &autoscalingv2.HorizontalPodAutoscaler{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{
			ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Name: "podinfo"},
			MinReplicas:    &one, MaxReplicas: 10,
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := []int32{}
	atReturn = &seen
	value := 100.0
	if !good {
		value = 50
	}
	q := querierFunc(func(ctx context.Context, _ string) (float64, error) {
		// The primary's autoscaler scales the primary down: the canary takes its load.
		_, _ = cs.AppsV1().Deployments("test").UpdateScale(ctx, "podinfo-primary",
			&autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-primary", Namespace: "test"}, Spec: autoscalingv1.ScaleSpec{Replicas: 1}}, metav1.UpdateOptions{})
		return value, nil
	})
	rt := &fakeRouter{}
	e = &Engine{Kube: cs, Router: rt, Metrics: q, DrainDelay: 1}
	rel = testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.Autoscaler = &autoscaler.Ref{Name: "podinfo"}
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatal(err)
	}
	rt.onSet = func(w router.Weights) {
		if w.Primary != 100 {
			return
		}
		p, err := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		seen = append(seen, p.Status.ReadyReplicas)
		mu.Unlock()
	}
	setImage(t, e, "podinfo", "podinfo:2")
	return e, cs, rel, st, atReturn
}

// Issue 24 (HPA rush): the primary's autoscaler scaled the primary down during the analysis;
// before the traffic returns to it, at promotion or at rollback, it has its 4 pre-rollout
// replicas Ready again, and the autoscaler's minimum is put back afterwards.
func TestPrimaryGetsItsPreRolloutReplicasBeforeTrafficReturns(t *testing.T) {
	for _, good := range []bool{true, false} {
		name := map[bool]string{true: "promotion", false: "rollback"}[good]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			e, cs, rel, st, atReturn := hpaRush(t, good)
			st, err := e.Apply(ctx, rel, nil, st)
			want := PhaseSucceeded
			if !good {
				want = PhaseFailed
			}
			if st.Phase != want {
				t.Fatalf("phase %s (%v), want %s", st.Phase, err, want)
			}
			if len(*atReturn) == 0 {
				t.Fatal("the traffic never returned to the primary")
			}
			for _, n := range *atReturn {
				if n < 4 {
					t.Errorf("traffic returned to the primary with %d Ready replicas, want its 4 pre-rollout ones", n)
				}
			}
			hpa, err := cs.AutoscalingV2().HorizontalPodAutoscalers("test").Get(ctx, "podinfo-primary", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if *hpa.Spec.MinReplicas != 1 || hpa.Annotations[autoscaler.AnnotationHeldMinReplicas] != "" {
				t.Errorf("the primary's autoscaler after the run: min %d, annotations %v; want min 1 put back", *hpa.Spec.MinReplicas, hpa.Annotations)
			}
		})
	}
}

// A run killed while it holds the minimum leaves it to the next: the plan says so, and the
// next apply puts it back.
func TestHeldMinimumIsPutBackByTheNextRun(t *testing.T) {
	ctx := context.Background()
	e, cs, rel, st, _ := hpaRush(t, true)
	st, err := e.Apply(ctx, rel, nil, st)
	if err != nil {
		t.Fatal(err)
	}
	// As a kill between the hold and its release leaves it.
	hpas := cs.AutoscalingV2().HorizontalPodAutoscalers("test")
	w := workload{kube: cs, rel: rel}
	if held, err := w.scalers().HoldMin(ctx, 4); err != nil || held != 4 {
		t.Fatalf("hold = %d, %v", held, err)
	}
	drift, _ := e.Drift(ctx, rel, st)
	if len(drift) != 1 || !strings.Contains(drift[0], "still holds minReplicas 4") {
		t.Errorf("drift = %v, want the held minimum", drift)
	}
	if _, err := e.Apply(ctx, rel, nil, st); err != nil {
		t.Fatal(err)
	}
	hpa, _ := hpas.Get(ctx, "podinfo-primary", metav1.GetOptions{})
	if *hpa.Spec.MinReplicas != 1 || hpa.Annotations[autoscaler.AnnotationHeldMinReplicas] != "" {
		t.Errorf("after the next apply: min %d, annotations %v; want min 1 put back", *hpa.Spec.MinReplicas, hpa.Annotations)
	}
}
