package rollout

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/canary-release/terraform-provider-canary/internal/lock"
)

// nameHolder makes the record name a holder, as a run under the lock writes it, and deletes
// the Lease: the next run reads it as deleted, and waits out the lock's quiet period.
func nameHolder(t *testing.T, e *Engine, rel Release) {
	t.Helper()
	ctx := context.Background()
	cs, ok, err := LoadState(ctx, e.Kube, "test", "podinfo")
	if err != nil || !ok {
		t.Fatalf("LoadState = %v, %v", ok, err)
	}
	r := e.newRun(rel, cs.Status, nil)
	r.st.Holder = "terraform-provider-canary pid 1 on another-host"
	if err := r.save(ctx); err != nil {
		t.Fatal(err)
	}
	err = e.Kube.CoordinationV1().Leases("test").Delete(ctx, "podinfo-canary-release-lock", metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// quietWaitWeights starts an apply that finds the Lease deleted, and returns the weights
// written while it waits out the quiet period, and whether the record stayed as it was.
func quietWaitWeights(t *testing.T, e *Engine, cs *fake.Clientset, rt *fakeRouter, rel Release, prior Status) ([]int, bool) {
	t.Helper()
	e.Lock = lock.Options{LeaseDuration: 800 * time.Millisecond, RenewInterval: 100 * time.Millisecond}
	before := recordData(t, cs)
	_, written := rt.weights()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.Apply(ctx, rel, nil, prior)
	}()
	time.Sleep(400 * time.Millisecond) // half the quiet period
	_, history := rt.weights()
	unchanged := maps.Equal(before, recordData(t, cs))
	cancel()
	<-done
	return history[len(written):], unchanged
}

// Campaign seeds 1003719 and 1004417: the Lease was deleted by hand while a run finalised a
// passed template at 80/20, and the primary then lost its Ready pods. The next run waits out
// the lock's quiet period before it writes anything, in case the old run still writes; it
// may move traffic off the side without Ready pods onto the canary, which runs the passed
// template, through the gate, and writes nothing else (the record stays as it was).
func TestQuietPeriodMovesTrafficOffALostPrimaryToThePassedCanary(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killedInFinalising(t, e, rt, rel, prior, 20)
	nameHolder(t, e, rel)
	setPods(t, cs, "podinfo-primary", false)
	written, unchanged := quietWaitWeights(t, e, cs, rt, rel, prior)
	if fmt.Sprint(written) != "[100]" {
		t.Errorf("weights written during the quiet period %v, want [100]: the primary without Ready pods kept its 80%% although the canary runs the passed template", written)
	}
	if !unchanged {
		t.Errorf("the record changed during the quiet period: a waiting run writes nothing but the move off a lost side")
	}
}

// The same wait with an unanalysed canary (the run was killed at 25% of its analysis): the
// primary without Ready pods keeps its traffic, which the canary may not take.
func TestQuietPeriodGivesAnUnanalysedCanaryNothing(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	nameHolder(t, e, rel)
	setPods(t, cs, "podinfo-primary", false)
	written, unchanged := quietWaitWeights(t, e, cs, rt, rel, prior)
	if len(written) != 0 || !unchanged {
		t.Errorf("during the quiet period: weights written %v, record unchanged %v; want nothing written", written, unchanged)
	}
}

// A canary without Ready pods gives its traffic to the primary during the wait.
func TestQuietPeriodMovesTrafficOffALostCanaryToThePrimary(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	nameHolder(t, e, rel)
	setPods(t, cs, "podinfo", false)
	written, unchanged := quietWaitWeights(t, e, cs, rt, rel, prior)
	if fmt.Sprint(written) != "[0]" || !unchanged {
		t.Errorf("during the quiet period: weights written %v, record unchanged %v; want [0] and the record untouched", written, unchanged)
	}
}

// Campaign seed 460: the primary lost its Ready pods while the run waited out the deleted
// Lease, after the wait's first look. The wait looks again at the analysis interval, so the
// traffic moves to the passed canary within an interval, not at the Lease's pace (half its
// renew interval, 10s by default).
func TestQuietPeriodMovesTrafficOffAPrimaryLostDuringTheWait(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	rel.Analysis.Interval = 100 * time.Millisecond
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killedInFinalising(t, e, rt, rel, prior, 20)
	nameHolder(t, e, rel)
	e.Lock = lock.Options{LeaseDuration: 13 * time.Second, RenewInterval: 6 * time.Second}
	_, before := rt.weights()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = e.Apply(ctx, rel, nil, prior)
	}()
	time.Sleep(500 * time.Millisecond) // the wait's first look found the primary serving
	setPods(t, cs, "podinfo-primary", false)
	time.Sleep(1500 * time.Millisecond) // the Lease's pace would look again only at 3s
	_, history := rt.weights()
	cancel()
	<-done
	if written := history[len(before):]; fmt.Sprint(written) != "[100]" {
		t.Errorf("weights written in the 1.5s after the primary lost its Ready pods during the wait: %v, want [100] (the canary runs the passed template)", written)
	}
}
