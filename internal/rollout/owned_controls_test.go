package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// A driver-owned target (Knative) runs the same phase machine as a Deployment: its gates, the
// operator's controls and its promotion proof are the engine's one chokepoint each.

func ownedControlsSetup(t *testing.T, a Analysis) (*Engine, *fake.Clientset, *fakeRouter, *fakeTarget, Release, Status) {
	t.Helper()
	if a.Interval == 0 {
		a.Interval = 20 * time.Millisecond
	}
	rel := testRelease(a)
	e, rt, tgt, st := ownedSetup(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 100, nil }))
	cs := versioned(e.Kube.(*fake.Clientset))
	tgt.newRevision("podinfo-00002", true)
	return e, cs, rt, tgt, rel, st
}

func TestOwnedTargetHoldsAtItsBuiltInGates(t *testing.T) {
	e, cs, rt, tgt, rel, st := ownedControlsSetup(t, Analysis{StepWeights: []int{10, 20, 30}, GateTimeout: 2 * time.Second,
		Webhooks: []Webhook{{Name: "rollout-manager", Type: HookConfirmRollout}, {Name: "release-manager", Type: HookConfirmPromotion}}})

	_, err := e.Apply(context.Background(), rel, nil, st)
	if err == nil || !strings.Contains(err.Error(), "the confirm-rollout gate rollout-manager stayed closed") {
		t.Fatalf("Apply without any approval = %v, want the confirm-rollout gate named", err)
	}
	if w, history := rt.weights(); len(history) > 0 && fmt.Sprint(history) != "[0]" || w.Canary != 0 {
		t.Fatalf("an unapproved rollout moved the weights: %v (now %+v)", history, w)
	}
	if tgt.pins.Primary != "podinfo-00001" || tgt.pins.Canary == "podinfo-00002" {
		t.Fatalf("pins %+v: the unapproved revision was pinned", tgt.pins)
	}

	// An approval acts on the run it is given to (one set before a run is dropped by it).
	rt.history = nil
	wait := applyInBackground(e, rel, recorded(t, e))
	waitFor(t, "the confirm-rollout gate to hold the run", phaseIs(t, e, PhaseWaiting))
	// The fake API server's watch misses what is written before it is opened (a real one
	// replays it from the resource version the run holds): the operator approves again until
	// the run has seen it.
	for phaseIs(t, e, PhaseWaiting)() {
		annotate(t, cs, controls.ApprovalKey(HookConfirmRollout), "")
		annotate(t, cs, controls.ApprovalKey(HookConfirmRollout), "approved")
		time.Sleep(200 * time.Millisecond)
	}
	st, err = wait()
	if err == nil || !strings.Contains(err.Error(), "the confirm-promotion gate release-manager stayed closed") {
		t.Fatalf("Apply with the rollout approved = %v, want the confirm-promotion gate named", err)
	}
	if _, history := rt.weights(); fmt.Sprint(history) != "[10 20 30 0]" {
		t.Errorf("weights %v, want the steps [10 20 30] then all back on the primary", history)
	}
	if tgt.pins.Primary != "podinfo-00001" || strings.Join(tgt.pinnedBy, ",") != "podinfo-00001" || st.LastPromotedSpec != "podinfo-00001" {
		t.Fatalf("pinned primary %q (by proofs for %v), promoted %q: the revision was promoted without its approval", tgt.pins.Primary, tgt.pinnedBy, st.LastPromotedSpec)
	}
}

func TestOwnedTargetAbortRollsBack(t *testing.T) {
	e, cs, rt, tgt, rel, st := ownedControlsSetup(t, Analysis{StepWeights: []int{10, 20, 30, 40, 50}})
	rt.onSet = func(w router.Weights) {
		if w.Canary == 20 {
			annotate(t, cs, controls.Abort, "true")
		}
	}
	_, err := e.Apply(context.Background(), rel, nil, st)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "aborted by the operator at canary weight 20%: canary-release.dev/abort=true (set by kubectl-annotate") {
		t.Fatalf("Apply = %v, want a rollback that names the abort and who set it", err)
	}
	if w, history := rt.weights(); w.Canary != 0 || fmt.Sprint(history) != "[10 20 0]" {
		t.Errorf("weights %v, want [10 20 0]", history)
	}
	if tgt.pins.Primary != "podinfo-00001" {
		t.Errorf("the aborted revision's pin: primary %q", tgt.pins.Primary)
	}
}

func TestOwnedTargetPromoteNowPromotesThroughTheChokepoint(t *testing.T) {
	e, cs, rt, tgt, rel, st := ownedControlsSetup(t, Analysis{StepWeights: []int{10, 20, 30, 40, 50}, Interval: 100 * time.Millisecond})
	rt.onSet = func(w router.Weights) {
		if w.Canary == 20 {
			annotate(t, cs, controls.PromoteNow, "true")
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, st)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the promotion the operator asked for", st.Phase, err)
	}
	if p := st.PromoteNow; p == nil || p.Revision != "podinfo-00002" || p.Manager != "kubectl-annotate" {
		t.Errorf("the record's promote-now is %+v, want podinfo-00002 by kubectl-annotate", p)
	}
	// The run sees the annotation through its watch, which a loaded machine may deliver an
	// interval late: promoted from 20% or a step later, never after all the steps.
	if _, history := rt.weights(); !strings.HasPrefix(fmt.Sprint(history), "[10 20 ") || !strings.HasSuffix(fmt.Sprint(history), " 0]") || len(history) > 4 {
		t.Errorf("weights %v, want [10 20 0]: promoted from 20%%", history)
	}
	if tgt.pins.Primary != "podinfo-00002" || !strings.Contains(st.Message, "by the operator's promote-now: kubectl-annotate") {
		t.Errorf("pinned primary %q, message %q", tgt.pins.Primary, st.Message)
	}
}
