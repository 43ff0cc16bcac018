package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// recorded reads the status the state ConfigMap holds.
func recorded(t *testing.T, e *Engine) Status {
	t.Helper()
	cs, ok, err := LoadState(context.Background(), e.Kube, "test", "podinfo")
	if err != nil || !ok {
		t.Fatalf("state ConfigMap: %v, %v", ok, err)
	}
	return cs.Status
}

// failingWeights refuses every write of the given canary weights, as an API server that keeps
// answering 500 would.
type failingWeights struct {
	*fakeRouter
	refuse map[int]bool
}

func (f *failingWeights) SetRoutes(ctx context.Context, w router.Weights) error {
	if f.refuse[w.Canary] {
		return errors.New("updating TrafficSplit test/podinfo: 500 Internal Server Error")
	}
	return f.fakeRouter.SetRoutes(ctx, w)
}

// A weight write that fails must not be recorded as if it went through: the status (returned
// and in the ConfigMap) keeps the live weight.
func TestFailedWeightWriteRecordsTheLiveWeight(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	e.Router = &failingWeights{fakeRouter: rt, refuse: map[int]bool{50: true, 0: true}}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "75% of traffic is on the primary podinfo-primary and 25% on the canary podinfo") {
		t.Fatalf("error = %v, want a failed rollback that says where traffic is", err)
	}
	if st.CanaryWeight != 25 || recorded(t, e).CanaryWeight != 25 {
		t.Errorf("canary weight returned %d, recorded %d; the live one is 25", st.CanaryWeight, recorded(t, e).CanaryWeight)
	}
	if r := *deployment(t, cs, "podinfo").Spec.Replicas; r == 0 {
		t.Error("the canary was scaled to 0 while it has 25% of traffic")
	}
}

// A write that keeps failing after the analysis passed leaves the promotion to the next apply,
// and says where traffic is.
func TestStuckFinalisingIsFinishedByTheNextApply(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	e.Router = &failingWeights{fakeRouter: rt, refuse: map[int]bool{0: true}}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "the run stopped in phase Finalising") ||
		!strings.Contains(f.Reason, "50% on the canary podinfo") || !strings.Contains(f.Reason, "the next apply finishes the promotion") {
		t.Fatalf("error = %v, want a Failure that says where traffic is and what comes next", err)
	}
	if got := recorded(t, e); got.Phase != PhaseFinalising || got.CanaryWeight != 50 || st.CanaryWeight != 50 {
		t.Errorf("recorded %s at %d%% (returned %d%%), want Finalising at the live 50%%", got.Phase, got.CanaryWeight, st.CanaryWeight)
	}
	e.Router = rt
	st, err = e.Apply(context.Background(), rel, nil, st)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("next Apply = %s, %v; want the promotion finished", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2", img)
	}
	if w, _ := rt.weights(); w.Canary != 0 {
		t.Errorf("weights = %+v, want all on the primary", w)
	}
}

// A template edited behind the apply mid-analysis is not what was analysed: the run rolls back.
func TestTargetEditedMidAnalysisRollsBack(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Interval: 300 * time.Millisecond, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	afterFirstShiftTo(rt, 50, func() {
		d := deployment(t, cs, "podinfo")
		d.Spec.Template.Spec.Containers[0].Image = "podinfo:3"
		if _, err := cs.AppsV1().Deployments("test").Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
	})
	_, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "the target's pod template changed during the analysis") {
		t.Fatalf("error = %v, want the edit named", err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary image = %s, want podinfo:1 kept", img)
	}
	if w, _ := rt.weights(); w.Canary != 0 {
		t.Errorf("weights = %+v, want all back on the primary", w)
	}
}

// A release whose objects were all deleted behind it is initialised again only from the
// template it last promoted: a new one must pass analysis first.
func TestDeletedReleaseIsNotReinitialisedWithAnUnanalysedTemplate(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, Metrics: []Metric{successRate(99)}})
	e, cs, _, prior := setup(t, rel, passing(), "podinfo:2")
	ctx := context.Background()
	for _, del := range []func() error{
		func() error {
			return cs.AppsV1().Deployments("test").Delete(ctx, "podinfo-primary", metav1.DeleteOptions{})
		},
		func() error {
			return cs.CoreV1().ConfigMaps("test").Delete(ctx, StateConfigMapName("podinfo"), metav1.DeleteOptions{})
		},
	} {
		if err := del(); err != nil {
			t.Fatal(err)
		}
	}
	_, err := e.Apply(ctx, rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "which never passed analysis, so it is not made the primary") {
		t.Fatalf("error = %v, want a refusal", err)
	}
	if _, err := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{}); err == nil {
		t.Fatal("a primary was created from the unanalysed template")
	}
	d := deployment(t, cs, "podinfo")
	d.Spec.Template.Spec.Containers[0].Image = "podinfo:1"
	if _, err := cs.AppsV1().Deployments("test").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if st, err := e.Apply(ctx, rel, nil, prior); err != nil || st.Phase != PhaseInitialized {
		t.Fatalf("Apply with the last promoted template = %s, %v; want it initialised again", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary image = %s, want podinfo:1", img)
	}
}
