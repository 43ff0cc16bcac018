package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// killedInFinalising leaves the release as a run killed in Finalising leaves it: the analysis
// passed and was recorded, the primary runs the passed template, the canary has weight.
func killedInFinalising(t *testing.T, e *Engine, rt *fakeRouter, rel Release, prior Status, weight int) {
	t.Helper()
	ctx := context.Background()
	r := e.newRun(rel, prior, nil)
	if err := r.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	r.st.LastAppliedSpec, r.st.CanarySpec, r.st.PassedSpec, r.st.PrimarySpec = r.hash, r.hash, r.hash, r.hash
	r.st.CanaryWeight = weight
	if err := r.record(ctx, PhaseFinalising, normalEvent, "killed here"); err != nil {
		t.Fatal(err)
	}
	if err := r.w.scale(ctx, rel.Target, 2); err != nil {
		t.Fatal(err)
	}
	if err := rt.SetRoutes(ctx, router.Weights{Primary: 100 - weight, Canary: weight}); err != nil {
		t.Fatal(err)
	}
}

func deletePrimary(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.Kube.AppsV1().Deployments("test").Delete(context.Background(), "podinfo-primary", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A primary deleted while a killed run was finalising a passed template is rebuilt from that
// template (the recorded analysis is its proof), and the promotion completes; before, every
// later apply and the destroy waited for a primary that no longer existed (make chaos, osm
// seed 10133067800015601678).
func TestPrimaryDeletedDuringFinalisingIsRebuiltFromThePassedTemplate(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killedInFinalising(t, e, rt, rel, prior, 20)
	deletePrimary(t, e)
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the primary's deletion = %s, %v; want the promotion finished", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("rebuilt primary runs %s, want the passed podinfo:2", img)
	}
	if live, _ := rt.weights(); live.Canary != 0 {
		t.Errorf("live canary weight %d, want 0", live.Canary)
	}
}

// A primary deleted before the analysis completed holds the rollback, with a message that says
// what to do; once the target is back on the last promoted template, the next apply rebuilds
// the primary from it and finishes the rollback (make chaos, gloo seed 11668880286484645355).
func TestPrimaryDeletedMidAnalysisIsRebuiltOnlyFromThePromotedTemplate(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	deletePrimary(t, e)
	ctx := context.Background()
	_, err := e.Apply(ctx, rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "was deleted") || !strings.Contains(f.Reason, "Set the target back") {
		t.Fatalf("Apply with the primary deleted and an unanalysed target = %v; want a held rollback that says what to do", err)
	}
	if p, err := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{}); err == nil {
		t.Fatalf("a primary was rebuilt from %s, which never passed analysis", p.Spec.Template.Spec.Containers[0].Image)
	}
	setImage(t, e, "podinfo", "podinfo:1")
	st, err := e.Apply(ctx, rel, nil, prior)
	if err != nil {
		t.Fatalf("Apply with the target back on the promoted template: %v", err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("rebuilt primary runs %s, want the promoted podinfo:1", img)
	}
	if live, _ := rt.weights(); live.Canary != 0 || st.CanaryWeight != 0 {
		t.Errorf("live canary weight %d, recorded %d; want 0", live.Canary, st.CanaryWeight)
	}
}

// A canary that lost its Ready pods gives its traffic to the primary even when the primary
// cannot be read: unknown is not "no" (make chaos, osm seed 8094743996570342513).
func TestLostCanaryGoesToAnUnreadablePrimary(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	obj, _ := cs.Tracker().Get(gvr, "test", "podinfo")
	canary := obj.(*appsv1.Deployment).DeepCopy()
	canary.Status.ReadyReplicas, canary.Status.AvailableReplicas = 0, 0
	if err := cs.Tracker().Update(gvr, canary, "test"); err != nil {
		t.Fatal(err)
	}
	cs.PrependReactor("get", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "podinfo-primary" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "podinfo-primary", errors.New("denied"))
		}
		return false, nil, nil
	})
	_, _ = e.Apply(context.Background(), rel, nil, prior)
	// The recovery's first write takes the weight off the canary (the apply then goes on to
	// analyse the target again, which this test does not judge).
	if _, history := rt.weights(); len(history) == 0 || history[0] != 0 {
		t.Errorf("weights written %v: the canary without Ready pods kept its 25%% because the primary could not be read", history)
	}
}
