package rollout

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// fakeTarget is a driver-owned target in memory: its controller's revisions, which of them
// serve, and the two pins. It refuses what the Knative driver refuses.
type fakeTarget struct {
	mu      sync.Mutex
	rt      *fakeRouter
	created []string
	serving map[string]bool
	pins    mesh.Revisions
	// pinnedBy are the proofs' revisions, in order.
	pinnedBy []string
}

func (f *fakeTarget) Revisions(context.Context) (mesh.Revisions, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.pins
	if n := len(f.created); n > 0 {
		r.LatestCreated = f.created[n-1]
	}
	return r, nil
}

func (f *fakeTarget) Serving(_ context.Context, rev string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.serving[rev], nil
}

func (f *fakeTarget) PinPrimary(_ context.Context, proof mesh.Admission) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !proof.Admits(proof.Revision()) {
		return errors.New("no proof")
	}
	f.pins.Primary = proof.Revision()
	f.pinnedBy = append(f.pinnedBy, proof.Revision())
	return nil
}

func (f *fakeTarget) PinCanary(ctx context.Context, rev string) error {
	if w, _ := f.rt.GetRoutes(ctx); w.Canary > 0 {
		return errors.New("the canary carries weight")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pins.Canary = rev
	return nil
}

func (f *fakeTarget) newRevision(name string, serving bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.created = append(f.created, name)
	f.serving[name] = serving
}

// ownedSetup initialises a release of a driver-owned target whose first revision is podinfo-00001.
func ownedSetup(t *testing.T, rel Release, q MetricQuerier) (*Engine, *fakeRouter, *fakeTarget, Status) {
	t.Helper()
	rt := &fakeRouter{}
	tgt := &fakeTarget{rt: rt, serving: map[string]bool{}}
	tgt.newRevision("podinfo-00001", true)
	e := &Engine{Kube: newCluster(), Router: rt, Owned: tgt, Metrics: q, HTTP: http.DefaultClient, DrainDelay: time.Millisecond}
	st, err := e.Initialize(context.Background(), rel, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	if st.Phase != PhaseInitialized || st.LastPromotedSpec != "podinfo-00001" || tgt.pins.Primary != "podinfo-00001" {
		t.Fatalf("after Initialize: phase %s, promoted %q, pinned primary %q", st.Phase, st.LastPromotedSpec, tgt.pins.Primary)
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Fatalf("weights after Initialize = %+v", w)
	}
	rt.history = nil
	return e, rt, tgt, st
}

func TestOwnedTargetRevisionIsAnalysedStepByStepThenPinnedAsPrimary(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 30, Threshold: 2, Metrics: []Metric{successRate(99)}})
	e, rt, tgt, st := ownedSetup(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 100, nil }))
	tgt.newRevision("podinfo-00002", true)
	st, err := e.Apply(context.Background(), rel, nil, st)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	w, history := rt.weights()
	if st.Phase != PhaseSucceeded || st.LastPromotedSpec != "podinfo-00002" || w != (router.Weights{Primary: 100}) {
		t.Fatalf("phase %s, promoted %q, weights %+v", st.Phase, st.LastPromotedSpec, w)
	}
	if got := joinInts(history); got != "10,20,30,0" {
		t.Errorf("canary weights %s, want 10,20,30,0", got)
	}
	if tgt.pins.Primary != "podinfo-00002" || strings.Join(tgt.pinnedBy, ",") != "podinfo-00001,podinfo-00002" {
		t.Errorf("pinned primary %q, by proofs for %v", tgt.pins.Primary, tgt.pinnedBy)
	}
	// Nothing new: the release settles on the pinned primary.
	if st, err = e.Apply(context.Background(), rel, nil, st); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("settling Apply: %v, phase %s", err, st.Phase)
	}
}

func TestOwnedTargetFailedMetricRollsBackToThePinnedPrimary(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50, Threshold: 2, Metrics: []Metric{successRate(99)}})
	e, rt, tgt, st := ownedSetup(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 50, nil }))
	tgt.newRevision("podinfo-00002", true)
	st, err := e.Apply(context.Background(), rel, nil, st)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(err.Error(), "request-success-rate") {
		t.Fatalf("Apply = %v, want a failure naming request-success-rate", err)
	}
	w, history := rt.weights()
	if st.Phase != PhaseFailed || w != (router.Weights{Primary: 100}) || tgt.pins.Primary != "podinfo-00001" || st.LastPromotedSpec != "podinfo-00001" {
		t.Fatalf("phase %s, weights %+v, pinned primary %q, promoted %q", st.Phase, w, tgt.pins.Primary, st.LastPromotedSpec)
	}
	for _, c := range history {
		if c > 10 {
			t.Errorf("the failing revision got %d%%, more than its first step (history %v)", c, history)
		}
	}
}

// A revision without Ready pods gets no traffic: the run rolls back before its first step.
func TestOwnedTargetRevisionWithoutReadyPodsGetsNoTraffic(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50, Threshold: 2, Metrics: []Metric{successRate(99)}})
	rel.ProgressDeadline = 50 * time.Millisecond
	e, rt, tgt, st := ownedSetup(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 100, nil }))
	tgt.newRevision("podinfo-00002", false)
	_, err := e.Apply(context.Background(), rel, nil, st)
	if err == nil || !strings.Contains(err.Error(), "podinfo-00002") {
		t.Fatalf("Apply = %v, want a rollback naming the revision", err)
	}
	if _, history := rt.weights(); len(history) > 0 && history[0] > 0 {
		t.Fatalf("the revision without Ready pods got traffic: %v", history)
	}
	if tgt.pins.Primary != "podinfo-00001" {
		t.Fatalf("pinned primary %q", tgt.pins.Primary)
	}
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// ownedKilledAt leaves a driver-owned release as a run killed at a step would: its record says
// Progressing as written before the first step (the steps are not recorded), the canary
// revision is pinned, and the router sends it weight.
func ownedKilledAt(t *testing.T, e *Engine, rt *fakeRouter, tgt *fakeTarget, rel Release, prior Status, canary string, weight int, phase Phase) {
	t.Helper()
	ctx := context.Background()
	r := e.newRun(rel, prior, nil)
	r.st.LastAppliedSpec, r.st.CanarySpec = canary, canary
	if phase == PhasePromoting {
		r.st.PassedSpec = canary
	}
	if err := r.record(ctx, phase, normalEvent, "killed here"); err != nil {
		t.Fatal(err)
	}
	tgt.mu.Lock()
	tgt.pins.Canary = canary
	tgt.mu.Unlock()
	if err := rt.SetRoutes(ctx, router.Weights{Primary: 100 - weight, Canary: weight}); err != nil {
		t.Fatal(err)
	}
	rt.history = nil
}

// A run killed at a step left its canary revision weight that its record does not say (the
// record is written before the steps): the next run reads the live weights and takes that
// weight back before it pins the next canary. It went by the record's 100/0, left 30% on the
// killed run's canary (whose pods had gone), and its pin of the new canary was refused (the
// campaign's Knative seed 9265).
func TestOwnedTargetKilledRunsWeightIsTakenBackFromTheLiveSplit(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 30, Threshold: 2, Metrics: []Metric{successRate(99)}})
	e, rt, tgt, st := ownedSetup(t, rel, passing())
	tgt.newRevision("podinfo-00002", true)
	ownedKilledAt(t, e, rt, tgt, rel, st, "podinfo-00002", 30, PhaseProgressing)
	tgt.mu.Lock()
	tgt.serving["podinfo-00002"] = false // its pods went
	tgt.mu.Unlock()
	tgt.newRevision("podinfo-00003", true)
	got, err := e.Apply(context.Background(), rel, nil, st)
	if err != nil || got.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the kill = %s, %v; want Succeeded", got.Phase, err)
	}
	if _, history := rt.weights(); len(history) == 0 || history[0] != 0 {
		t.Fatalf("canary weights %v: the recovery's 0 must come first", history)
	}
	if tgt.pins.Primary != "podinfo-00003" || got.LastPromotedSpec != "podinfo-00003" {
		t.Fatalf("pinned primary %q, promoted %q", tgt.pins.Primary, got.LastPromotedSpec)
	}
}

// A run killed in Promoting after its pin of the passed revision landed promoted it: the next
// run's record says so. It kept the revision before as the last promoted one, so every plan
// showed the pinned primary as a revision to release and every apply found nothing to release
// (the campaign's Knative seed 4860: three clean applies, none converged).
func TestOwnedTargetPromotionKilledAfterItsPinIsRecorded(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 30, Threshold: 2, Metrics: []Metric{successRate(99)}})
	e, rt, tgt, st := ownedSetup(t, rel, passing())
	tgt.newRevision("podinfo-00002", true)
	ownedKilledAt(t, e, rt, tgt, rel, st, "podinfo-00002", 30, PhasePromoting)
	tgt.mu.Lock()
	tgt.pins.Primary = "podinfo-00002" // the promotion's pin landed, then the process died
	tgt.mu.Unlock()
	got, err := e.Apply(context.Background(), rel, nil, st)
	if err != nil {
		t.Fatalf("Apply after the kill: %v", err)
	}
	if got.LastPromotedSpec != "podinfo-00002" {
		t.Fatalf("the record's last promoted revision is %q, want the pinned podinfo-00002", got.LastPromotedSpec)
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Fatalf("weights %+v", w)
	}
	drift, err := e.Drift(context.Background(), rel, got)
	if err != nil {
		t.Fatal(err)
	}
	if len(drift) > 0 {
		t.Fatalf("drift after the recovery: %v", drift)
	}
}

// A run killed in Promoting right after it pinned the passed revision as the primary (its
// write-ahead record names the revision that passed): the next apply finds the pinned primary
// is the latest revision, nothing to release, and its record and state say that revision is
// the promoted one. Before, they kept the revision before it as promoted, and every plan after
// showed a diff (make chaos's knative schedules).
func TestOwnedTargetKilledAfterThePinRecordsThePromotion(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 30, Threshold: 2, Metrics: []Metric{successRate(99)}})
	e, _, tgt, prior := ownedSetup(t, rel, passing())
	tgt.newRevision("podinfo-00002", true)
	ctx := context.Background()
	r := e.newRun(rel, prior, nil)
	r.st.LastAppliedSpec, r.st.CanarySpec, r.st.PassedSpec = "podinfo-00002", "podinfo-00002", "podinfo-00002"
	if err := r.record(ctx, PhasePromoting, normalEvent, "killed after the pin"); err != nil {
		t.Fatal(err)
	}
	tgt.pins.Primary = "podinfo-00002" // the pin landed; the run was killed before its next record
	st, err := e.Apply(ctx, rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the kill = %s, %v; want Succeeded", st.Phase, err)
	}
	if st.LastPromotedSpec != "podinfo-00002" || st.PrimarySpec != "podinfo-00002" {
		t.Errorf("promoted %q, primary %q; want podinfo-00002, the pinned revision whose promotion the record announced", st.LastPromotedSpec, st.PrimarySpec)
	}
}

// A driver-owned target keeps the promoted revisions' history as a Deployment does, so a
// return to the revision promoted before, within rollback_window, is promoted without analysis.
func TestOwnedTargetRevertWithinTheRollbackWindowSkipsTheAnalysis(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.RollbackWindow = 2
	var failing atomic.Bool
	e, _, tgt, st := ownedSetup(t, rel, querierFunc(func(context.Context, string) (float64, error) {
		if failing.Load() {
			return 50, nil
		}
		return 100, nil
	}))
	tgt.newRevision("podinfo-00002", true)
	st, err := e.Apply(context.Background(), rel, nil, st)
	if err != nil || st.LastPromotedSpec != "podinfo-00002" {
		t.Fatalf("Apply of podinfo-00002: %v, promoted %q", err, st.LastPromotedSpec)
	}
	failing.Store(true) // an analysis now fails: only the window promotes
	tgt.newRevision("podinfo-00001", true)
	st, err = e.Apply(context.Background(), rel, nil, st)
	if err != nil || st.Phase != PhaseSucceeded || tgt.pins.Primary != "podinfo-00001" {
		t.Fatalf("revert to podinfo-00001: %v, phase %s, pinned primary %q; want it promoted within rollback_window", err, st.Phase, tgt.pins.Primary)
	}
}
