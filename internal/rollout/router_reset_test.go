package rollout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// A router reset to 100/0 by someone else while the run waits, in Finalising, for a primary
// that lost its Ready pods sends all the traffic to a primary that cannot serve it. The run
// sees the reset while it waits and gives the traffic back to the canary, which runs the
// passed template, at once; before, it read the live weights only before each wait and left
// the traffic on the pod-less primary until the primary came back (the campaign's seeds 506,
// 650, 682, 736 and 936).
func TestRouterResetWhileThePrimaryIsLostGoesBackToTheCanary(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{30}, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	const primaryAway = 3 * time.Second
	var lost, back atomic.Bool
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if ok && strings.Contains(cm.Data[stateKeyStatus], `"phase":"Finalising"`) && lost.CompareAndSwap(false, true) {
			setPods(t, cs, "podinfo-primary", false)
			time.AfterFunc(primaryAway, func() {
				back.Store(true)
				setPods(t, cs, "podinfo-primary", true)
			})
		}
		return false, nil, nil
	})
	var mu sync.Mutex
	var resetAt, regainedAt time.Time
	rt.onSet = func(w router.Weights) {
		if !lost.Load() || back.Load() || w.Canary != 100 {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case resetAt.IsZero():
			// Someone resets the router behind the run's back.
			resetAt = time.Now().Add(200 * time.Millisecond)
			time.AfterFunc(200*time.Millisecond, func() {
				rt.mu.Lock()
				rt.w = router.Weights{Primary: 100}
				rt.mu.Unlock()
			})
		case regainedAt.IsZero():
			regainedAt = time.Now()
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the promotion finished once the primary is back", st.Phase, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if resetAt.IsZero() {
		t.Fatal("the run never gave the lost primary's traffic to the canary: nothing to reset")
	}
	if regainedAt.IsZero() {
		t.Fatalf("after the reset, the primary without Ready pods kept all the traffic until it came back %s later", primaryAway)
	}
	if late := regainedAt.Sub(resetAt); late > 1500*time.Millisecond {
		t.Errorf("the canary got the traffic back %s after the reset, want within 1.5 s", late)
	}
}

// Both sides lose their Ready pods as the run finalises a passed template: nothing can serve
// until one is back. The canary, whose template passed, comes back first and takes the
// traffic; before, the run waited for the primary alone and left the traffic on it, pod-less,
// until it came back (the campaign's seed 1028).
func TestBothSidesLostTheFirstBackTakesTheTraffic(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{30}, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	const canaryAway, primaryAway = 300 * time.Millisecond, 3 * time.Second
	var lost, canaryBack, primaryBack atomic.Bool
	var mu sync.Mutex
	var canaryBackAt, servedAt time.Time
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if ok && strings.Contains(cm.Data[stateKeyStatus], `"phase":"Finalising"`) && lost.CompareAndSwap(false, true) {
			setPods(t, cs, "podinfo-primary", false)
			setPods(t, cs, "podinfo", false)
			time.AfterFunc(canaryAway, func() {
				mu.Lock()
				canaryBackAt = time.Now()
				mu.Unlock()
				canaryBack.Store(true)
				setPods(t, cs, "podinfo", true)
			})
			time.AfterFunc(primaryAway, func() {
				primaryBack.Store(true)
				setPods(t, cs, "podinfo-primary", true)
			})
		}
		return false, nil, nil
	})
	rt.onSet = func(w router.Weights) {
		if canaryBack.Load() && !primaryBack.Load() && w.Canary == 100 {
			mu.Lock()
			if servedAt.IsZero() {
				servedAt = time.Now()
			}
			mu.Unlock()
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the promotion finished once the primary is back", st.Phase, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !lost.Load() {
		t.Fatal("the run never recorded Finalising")
	}
	if servedAt.IsZero() {
		t.Fatalf("the canary was Ready again %s after the loss, but the traffic stayed on the primary without Ready pods until it came back %s after it", canaryAway, primaryAway)
	}
	if late := servedAt.Sub(canaryBackAt); late > 1500*time.Millisecond {
		t.Errorf("the canary got the traffic %s after its pods were Ready, want within 1.5 s", late)
	}
}

// Someone resets the router to 100/0 after the run wrote the last step, and the check that
// follows passes: the canary had no traffic at its step, so that check does not count. The run
// writes the step again and analyses it there before the promotion. Before, it promoted on the
// check it took at 0% (the campaign's seed 4836, on a replica ratio's apex).
func TestRouterResetBeforeTheStepsCheckIsWrittenAgain(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{30}, Metrics: []Metric{successRate(99)}})
	e, _, rt, prior := setup(t, rel, passing(), "podinfo:2")
	var reset atomic.Bool
	rt.onSet = func(w router.Weights) {
		if w.Canary == 30 && reset.CompareAndSwap(false, true) {
			// Someone resets the router right behind the run's write.
			time.AfterFunc(time.Millisecond, func() {
				rt.mu.Lock()
				rt.w = router.Weights{Primary: 100}
				rt.mu.Unlock()
			})
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want Succeeded", st.Phase, err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !reset.Load() {
		t.Fatalf("weights written = %v: the 30%% step was never written, nothing to reset", rt.history)
	}
	// Every write of the run precedes the promotion, which finds the router at 100/0.
	if writes := len(slices.DeleteFunc(slices.Clone(rt.history), func(w int) bool { return w != 30 })); writes < 2 {
		t.Errorf("weights written = %v: the 30%% step was reset behind the run and not written again, so the promotion followed a check taken at 0%%", rt.history)
	}
}

// The state ConfigMap and the primary are deleted as the promotion is recorded: the run
// cannot record it and stops. The analysis passed, so the share of the deleted primary goes
// to the canary, which runs the passed template, before the apply fails. Before, the failed
// apply left 50% on the deleted primary (the campaign's seed 6242).
func TestPrimaryDeletedWithTheRecordAsThePromotionStartsLeavesTheCanaryServing(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{50}, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	var deleted atomic.Bool
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if !ok || !strings.Contains(cm.Data[stateKeyStatus], `"phase":"Promoting"`) || !deleted.CompareAndSwap(false, true) {
			return false, nil, nil
		}
		for _, o := range []struct {
			gvr  schema.GroupVersionResource
			name string
		}{
			{appsv1.SchemeGroupVersion.WithResource("deployments"), "podinfo-primary"},
			{corev1.SchemeGroupVersion.WithResource("configmaps"), cm.Name},
		} {
			if err := cs.Tracker().Delete(o.gvr, "test", o.name); err != nil {
				t.Error(err)
			}
		}
		return true, nil, apierrors.NewNotFound(corev1.Resource("configmaps"), cm.Name)
	})
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !deleted.Load() {
		t.Fatalf("Apply = %s, %v; want the run stopped by the deleted record", st.Phase, err)
	}
	if w, _ := rt.weights(); w.Canary != 100 {
		t.Errorf("weights = %+v after %v; want all traffic on the canary, which passed, as the primary is gone", w, err)
	}
}

// The analysis fails while the primary restarts (a template edit, a node drain): it has no
// Ready pods as the rollback begins, and has them again a second later. The rollback waits for
// them and finishes: the failed canary loses its traffic. Before, it was held at once, and the
// failed canary kept the traffic until the next apply (the campaign's seed 8832).
func TestRollbackWaitsForAPrimaryThatRestarts(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, newCountingQuerier(50), "podinfo:2")
	var restarted atomic.Bool
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if ok && strings.Contains(cm.Data[stateKeyStatus], `"phase":"RollingBack"`) && restarted.CompareAndSwap(false, true) {
			setPods(t, cs, "podinfo-primary", false)
			time.AfterFunc(time.Second, func() { setPods(t, cs, "podinfo-primary", true) })
		}
		return false, nil, nil
	})
	_, err := e.Apply(context.Background(), rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) || !restarted.Load() {
		t.Fatalf("Apply = %v; want the failed analysis rolled back while the primary restarts", err)
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("weights = %+v after %q; want all traffic back on the primary once its pods are back", w, f.Reason)
	}
	if strings.Contains(f.Reason, "rollback is held") {
		t.Errorf("failure %q: the rollback was held although the primary's pods were back within a second", f.Reason)
	}
}

// stuckRouter reads back all the traffic on the primary whatever the run writes, as when
// another controller owns the router object and rewrites it.
type stuckRouter struct{ *fakeRouter }

func (stuckRouter) GetRoutes(context.Context) (router.Weights, error) {
	return router.Weights{Primary: 100}, nil
}

// A router that never reads back the step the run wrote holds the step, since no check of it
// can count, but not for ever: at progress_deadline_seconds the run rolls back and the apply
// fails naming the router. Before, the run wrote the step again at every interval until the
// apply's timeout or Ctrl-C.
func TestRouterThatNeverHoldsTheStepIsRolledBackAtTheProgressDeadline(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{30}, Metrics: []Metric{successRate(99)}})
	rel.ProgressDeadline = 300 * time.Millisecond
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	e.Router = stuckRouter{rt}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := e.Apply(ctx, rel, nil, prior)
	if ctx.Err() != nil {
		t.Fatalf("Apply still holding the step after 20 s (phase %s): a router that never holds the step held the run until the timeout", st.Phase)
	}
	if err == nil || !strings.Contains(err.Error(), "progress_deadline_seconds") || !strings.Contains(err.Error(), "the router held 0% on the canary") {
		t.Fatalf("Apply = %s, %v; want a rollback naming the router and progress_deadline_seconds", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("the primary runs %s, want podinfo:1: no check of podinfo:2 counted", img)
	}
	if w, _ := rt.weights(); w.Canary != 0 {
		t.Errorf("the run left %d%% on the canary, want 0 after the rollback", w.Canary)
	}
}
