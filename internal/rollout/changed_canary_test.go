package rollout

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Issue 20, item N6, recovery: a run killed in Finalising left 60% on the canary, and the next
// apply finds a new template on the target. That template never passed analysis, so it loses
// the 60% at once (the primary serves and runs the passed template), then it is analysed from
// the first step; before, recovery stepped it down by step_weight_promotion (60, 40, 20, 0)
// (campaign seed 4333).
func TestChangedCanaryLosesItsTrafficAtOnceInRecovery(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, StepWeightPromotion: 20, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	killedInFinalising(t, e, rt, rel, prior, 60)
	setImage(t, e, "podinfo", "podinfo:3")
	rt.history = nil
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the promotion finished, then podinfo:3 analysed and promoted", st.Phase, err)
	}
	_, history := rt.weights()
	if len(history) == 0 || history[0] != 0 {
		t.Fatalf("weights written %v: the unanalysed podinfo:3 kept 60%% and was stepped down, instead of losing it at once", history)
	}
	for _, w := range history {
		if w > 50 {
			t.Errorf("weights written %v: podinfo:3 got %d%%, above its last step", history, w)
		}
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:3" {
		t.Errorf("primary runs %s, want podinfo:3 once its own analysis passed", img)
	}
}

// Issue 20, item N6, live: blue/green gave the canary 100% for its last interval; the
// analysis passed, and while the primary rolls to the passed template the target is edited
// behind the release. The edited template never passed analysis: its traffic goes at once to
// the primary, whose pods (of the promoted and the passed template) serve; before, it kept
// 100% until the primary was Ready (campaign seed 322).
func TestCanaryEditedDuringPromotionLosesItsTrafficAtOnce(t *testing.T) {
	rel := testRelease(Analysis{Iterations: 2, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	var rolling, edited, primaryReady atomic.Bool
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d, ok := a.(k8stesting.UpdateAction).GetObject().(*appsv1.Deployment)
		if a.GetSubresource() != "" || !ok || d.Name != "podinfo-primary" || !rolling.CompareAndSwap(false, true) {
			return false, nil, nil
		}
		// The primary rolls: its old pods keep serving, the new ones are not Ready yet.
		d = d.DeepCopy()
		d.Generation++
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation - 1, Replicas: n, ReadyReplicas: n, AvailableReplicas: n}
		time.AfterFunc(20*time.Millisecond, func() { setImage(t, e, "podinfo", "podinfo:3"); edited.Store(true) })
		time.AfterFunc(500*time.Millisecond, func() { primaryReady.Store(true); setPods(t, cs, "podinfo-primary", true) })
		return true, d, cs.Tracker().Update(gvr, d, a.GetNamespace())
	})
	movedWhileRolling := false
	rt.onSet = func(w router.Weights) {
		if edited.Load() && w.Canary == 0 && !primaryReady.Load() {
			movedWhileRolling = true
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want podinfo:2's promotion finished", st.Phase, err)
	}
	if !edited.Load() {
		t.Fatal("the target was never edited during the promotion")
	}
	if _, history := rt.weights(); !movedWhileRolling {
		t.Errorf("weights written %v: the edited canary kept 100%% until the primary was Ready", history)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary runs %s, want the passed podinfo:2", img)
	}
	if live, _ := rt.weights(); live.Canary != 0 {
		t.Errorf("live canary weight %d, want 0", live.Canary)
	}
}

// The same recovery, then podinfo:3's own analysis passes while the primary has no Ready pods:
// podinfo:3 passed, so the primary's traffic goes to it at once as its promotion starts (N1).
// Before, the recovery's finding that the earlier canary had changed stuck to the run, so
// the promotion took podinfo:3 for a changed canary too and left the traffic on the pod-less
// primary until its copy was Ready (the campaign's seed 3703).
func TestChangedCanaryFoundInRecoveryDoesNotStickToTheNextAnalysis(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, StepWeightPromotion: 20, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	killedInFinalising(t, e, rt, rel, prior, 60)
	setImage(t, e, "podinfo", "podinfo:3")
	rt.history = nil
	var lost atomic.Bool
	rt.onSet = func(w router.Weights) {
		if w.Canary == 50 && lost.CompareAndSwap(false, true) {
			setPods(t, cs, "podinfo-primary", false) // lost during podinfo:3's last step
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want podinfo:3 analysed and promoted", st.Phase, err)
	}
	_, history := rt.weights()
	if !lost.Load() {
		t.Fatalf("weights written %v: podinfo:3 never reached its 50%% step", history)
	}
	if i := slices.Index(history, 50); i < 0 || i+1 >= len(history) || history[i+1] != 100 {
		t.Errorf("weights written %v: after podinfo:3 passed at 50%% beside a primary without Ready pods, want its traffic on podinfo:3 at once (100%%)", history)
	}
}
