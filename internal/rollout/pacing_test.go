package rollout

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// A slow router must not stretch the analysis: each check is due one interval after the weight
// change it judges, so the time spent writing the weight, the state and the events is part of
// the interval (as with Flagger's ticker) rather than added to it.
func TestAnalysisIntervalsCountFromTheWeightChange(t *testing.T) {
	const interval = 200 * time.Millisecond
	const slowWrite = 150 * time.Millisecond
	rel := testRelease(Analysis{Interval: interval, StepWeight: 25, MaxWeight: 75})
	e, _, rt, prior := setup(t, rel, nil, "podinfo:2")
	var mu sync.Mutex
	var written []time.Time
	rt.onSet = func(router.Weights) {
		time.Sleep(slowWrite)
		mu.Lock()
		written = append(written, time.Now())
		mu.Unlock()
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply: phase %s, %v", st.Phase, err)
	}
	_, history := rt.weights()
	if !slices.Equal(history, []int{25, 50, 75, 0}) {
		t.Fatalf("canary weights = %v, want [25 50 75 0]", history)
	}
	// The weights 25 → 50 → 75 are each held for one interval: the gaps between their writes.
	var gaps []time.Duration
	for i := 1; i < 3; i++ {
		gaps = append(gaps, written[i].Sub(written[i-1]))
	}
	// Counted from the end of each write, the old pacing gave interval + slowWrite per step.
	if shortest := slices.Min(gaps); shortest > interval+slowWrite/2 {
		t.Errorf("weights were held %v, want about %v: the slow weight write stretched every interval", gaps, interval)
	}
	for _, g := range gaps {
		if g < interval-20*time.Millisecond {
			t.Errorf("a weight was held %v, less than the %v interval", g, interval)
		}
	}
}

// A rollout writes its state once per phase, not per step; it reads the state ConfigMap only
// to start with, and it leaves Services that are already right alone.
func TestRolloutSpendsNoRequestsOnUnchangedObjects(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50})
	e, cs, _, prior := setup(t, rel, nil, "podinfo:2")
	cs.ClearActions()
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply: phase %s, %v", st.Phase, err)
	}
	counts := map[string]int{}
	for _, a := range cs.Actions() {
		counts[a.GetVerb()+" "+a.GetResource().Resource]++
	}
	// One read by Apply's LoadState; the first save updates the ConfigMap it returned.
	if got := counts["get configmaps"]; got > 1 {
		t.Errorf("state ConfigMap read %d times in one rollout, want at most 1", got)
	}
	// Scaling is one write, and the target and the primary are read once each (issue #15's
	// API footprint), plus one read of the primary by the traffic gate before all traffic goes
	// back to it (issue 20: a primary that lost its pods during the promotion gets none), and
	// once as the analysis passes (issue 20 N1: a primary lost meanwhile gives its share to the
	// canary that passed; the promotion writes onto that copy).
	if got := counts["get deployments"]; got > 4 {
		t.Errorf("Deployments read %d times in one rollout, want the target and the primary once each, and the primary once by the traffic gate and once as the analysis passes", got)
	}
	// Progressing, Promoting, Finalising and Succeeded; the five steps write only the router.
	if got := counts["update configmaps"]; got != 4 {
		t.Errorf("state ConfigMap written %d times, want 4: once per phase, not per step", got)
	}
	if got := counts["update services"]; got != 0 {
		t.Errorf("unchanged Services updated %d times, want 0", got)
	}
	// The three Services are found by one list, not read one by one.
	if got, reads := counts["list services"], counts["get services"]; got != 1 || reads != 0 {
		t.Errorf("Services listed %d and read %d times, want one list and no reads", got, reads)
	}
	cluster, ok, err := LoadState(context.Background(), cs, "test", "podinfo")
	if err != nil || !ok || cluster.Status.Phase != PhaseSucceeded || cluster.Status.LastPromotedSpec != st.LastPromotedSpec {
		t.Errorf("cluster state = %+v, %v, %v; want the Succeeded status", cluster.Status, ok, err)
	}
}

// Without the right to list Services (a Role from before it was asked for), a run reads each
// by name and goes through.
func TestRolloutReadsServicesWhenListingIsForbidden(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50})
	e, cs, _, prior := setup(t, rel, nil, "podinfo:2")
	cs.PrependReactor("list", "services", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(corev1.Resource("services"), "", errors.New("RBAC: list not allowed"))
	})
	cs.ClearActions()
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply: phase %s, %v", st.Phase, err)
	}
	reads := 0
	for _, a := range cs.Actions() {
		if a.GetVerb() == "get" && a.GetResource().Resource == "services" {
			reads++
		}
	}
	if reads != 3 {
		t.Errorf("Services read %d times by name, want 3 (apex, primary, canary)", reads)
	}
}
