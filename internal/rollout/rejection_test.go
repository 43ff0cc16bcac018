package rollout

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRejectedRevisionStaysRejectedUntilRetriedOrChanged(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, rt, prior := setup(t, rel, failing, "podinfo:2")
	st, err := e.Apply(ctx, rel, nil, prior)
	if err == nil {
		t.Fatal("the failing analysis passed")
	}
	j := st.Rejected
	if j == nil || j.Revision != st.LastAppliedSpec || j.Check != "request-success-rate" || !strings.Contains(j.Reason, "50.00") || j.At.IsZero() {
		t.Fatalf("rejection = %+v, want the revision, the metric and its value", j)
	}
	if got, err := e.Rejection(ctx, rel); err != nil || got == nil || got.Revision != j.Revision {
		t.Fatalf("Rejection (for the plan) = %+v, %v", got, err)
	}

	// The same revision again: refused before any write.
	_, before := rt.weights()
	cs.ClearActions()
	_, err = e.Apply(ctx, rel, nil, st)
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("Apply of the rejected revision = %v, want a refusal", err)
	}
	for _, want := range []string{"revision " + j.Revision + " was rejected at", "request-success-rate", "changed nothing", "retry_rejected"} {
		if !strings.Contains(f.Reason, want) {
			t.Errorf("refusal %q does not say %q", f.Reason, want)
		}
	}
	for _, a := range cs.Actions() {
		switch a.GetVerb() {
		case "create", "update", "patch", "delete":
			if a.GetResource().Resource != "leases" {
				t.Errorf("the refused apply wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
			}
		}
	}
	if _, after := rt.weights(); len(after) != len(before) {
		t.Errorf("the refused apply wrote weights %v", after[len(before):])
	}

	// A deliberate retry analyses it again.
	retry := rel
	retry.RetryRejected = "2026-12-04"
	if got, _ := e.Rejection(ctx, retry); got != nil {
		t.Errorf("the plan still warns after retry_rejected changed: %+v", got)
	}
	e.Metrics = querierFunc(func(context.Context, string) (float64, error) { return 100, nil })
	if st, err := e.Apply(ctx, retry, nil, recorded(t, e)); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("the retry = %s, %v", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("the retried revision was not promoted: the primary runs %s", img)
	}
}

func TestChangedTemplateAfterARejectionRollsOut(t *testing.T) {
	ctx := context.Background()
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, _, prior := setup(t, rel, failing, "podinfo:2")
	st, _ := e.Apply(ctx, rel, nil, prior)
	if st.Rejected == nil {
		t.Fatal("no rejection recorded")
	}
	setImage(t, e, "podinfo", "podinfo:3")
	if got, err := e.Rejection(ctx, rel); err != nil || got != nil {
		t.Errorf("the plan warns of a changed template: %+v, %v", got, err)
	}
	e.Metrics = querierFunc(func(context.Context, string) (float64, error) { return 100, nil })
	if st, err := e.Apply(ctx, rel, nil, st); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("the new template = %s, %v", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:3" {
		t.Errorf("the primary runs %s, want podinfo:3", img)
	}
}

// An interrupted analysis (a timeout, a lost lock) says nothing against the revision.
func TestInterruptedAnalysisRejectsNothing(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, _, _, prior := setup(t, rel, nil, "podinfo:2")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	st, _ := e.Apply(ctx, rel, nil, prior)
	if st.Rejected != nil {
		t.Errorf("a cancelled apply rejected the revision: %+v", st.Rejected)
	}
}
