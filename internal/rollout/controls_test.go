package rollout

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// annotate sets (value != "") or removes a control on the state ConfigMap as kubectl annotate
// does, managedFields included.
func annotate(t *testing.T, cs *fake.Clientset, key, value string) {
	t.Helper()
	annotateRelease(t, cs, "podinfo", key, value)
}

// annotateRelease is annotate on the state ConfigMap of the release named release.
func annotateRelease(t *testing.T, cs *fake.Clientset, release, key, value string) {
	t.Helper()
	ctx := context.Background()
	for {
		cm, err := cs.CoreV1().ConfigMaps("test").Get(ctx, StateConfigMapName(release), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Annotations == nil {
			cm.Annotations = map[string]string{}
		}
		if value == "" {
			delete(cm.Annotations, key)
		} else {
			cm.Annotations[key] = value
		}
		if _, err := cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-annotate"}); err == nil {
			return
		}
	}
}

// versioned makes the fake API server keep resource versions of ConfigMaps and refuse an update
// of an older version with a conflict, as a real one does: the run's cached copy of its state
// ConfigMap must not overwrite an operator's annotation.
func versioned(cs *fake.Clientset) *fake.Clientset {
	var version atomic.Int64
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
	cs.PrependReactor("create", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*corev1.ConfigMap).ResourceVersion = fmt.Sprint(version.Add(1))
		return false, nil, nil
	})
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if live, err := cs.Tracker().Get(gvr, cm.Namespace, cm.Name); err == nil && cm.ResourceVersion != "" &&
			live.(*corev1.ConfigMap).ResourceVersion != cm.ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), cm.Name, errors.New("the object has been modified"))
		}
		cm.ResourceVersion = fmt.Sprint(version.Add(1))
		return false, nil, nil
	})
	return cs
}

// applyInBackground runs an Apply; the returned function waits for its result.
func applyInBackground(e *Engine, rel Release, prior Status) func() (Status, error) {
	type result struct {
		st  Status
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := e.Apply(context.Background(), rel, nil, prior)
		done <- result{st, err}
	}()
	return func() (Status, error) {
		r := <-done
		return r.st, r.err
	}
}

// waitFor polls until cond holds, or fails the test.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// logged collects the engine's progress lines.
type logged struct {
	mu    sync.Mutex
	lines []string
}

func (l *logged) progress(p Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, p.Text())
}

func (l *logged) text() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func phaseIs(t *testing.T, e *Engine, phase Phase) func() bool {
	return func() bool {
		cs, ok, err := LoadState(context.Background(), e.Kube, "test", "podinfo")
		return err == nil && ok && cs.Status.Phase == phase
	}
}

func TestBuiltInGateOpensOnTheOperatorsApproval(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Interval: 20 * time.Millisecond,
		Webhooks: []Webhook{{Name: "release-manager", Type: HookConfirmPromotion}}})
	e, cs, _, prior := setup(t, rel, nil, "podinfo:2")
	versioned(cs)
	var log logged
	e.Progress = log.progress
	wait := applyInBackground(e, rel, prior)
	waitFor(t, "the gate to hold the run", phaseIs(t, e, PhaseWaitingPromotion))
	time.Sleep(100 * time.Millisecond)
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Fatalf("the primary runs %s before the approval", img)
	}
	annotate(t, cs, controls.ApprovalKey(HookConfirmPromotion), "approved")
	st, err := wait()
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the approved release promoted", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("the primary runs %s, want podinfo:2", img)
	}
	if text := log.text(); !strings.Contains(text, "canary-release.dev/confirm-promotion=approved (set by kubectl-annotate at ") {
		t.Errorf("the approval was not logged with its manager and time:\n%s", text)
	}
}

func TestPauseHoldsTheWeightUntilResumed(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{20, 40}, Interval: 20 * time.Millisecond})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	versioned(cs)
	var atPause atomic.Int32
	rt.onSet = func(w router.Weights) {
		if w.Canary == 20 {
			annotate(t, cs, controls.Pause, "true")
			atPause.Store(1)
		}
	}
	wait := applyInBackground(e, rel, prior)
	waitFor(t, "the pause", func() bool {
		return atPause.Load() == 1 && strings.HasPrefix(recorded(t, e).Message, "Paused: ")
	})
	// The run sees the annotation through its watch, which a loaded machine may deliver an
	// interval late: the pause must hold whatever weight it found.
	_, atPauseSeen := rt.weights()
	time.Sleep(200 * time.Millisecond) // ten intervals
	if w, history := rt.weights(); fmt.Sprint(history) != fmt.Sprint(atPauseSeen) || w.Canary == 0 {
		t.Fatalf("while paused the weights went %v (now %+v), want %v held", history, w, atPauseSeen)
	}
	annotate(t, cs, controls.Pause, "")
	st, err := wait()
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the resume = %s, %v", st.Phase, err)
	}
	if _, history := rt.weights(); fmt.Sprint(history) != "[20 40 0]" {
		t.Errorf("weights %v, want [20 40 0]", history)
	}
}

func TestAbortRollsBackAndRejectsTheRevision(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{10, 20, 30, 40, 50}, Interval: 20 * time.Millisecond})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	versioned(cs)
	rt.onSet = func(w router.Weights) {
		if w.Canary == 20 {
			annotate(t, cs, controls.Abort, "true")
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	// The run sees the annotation through its watch, which a loaded machine may deliver an
	// interval late: the abort acts at 20% or one step later.
	var f *Failure
	if !errors.As(err, &f) || !regexp.MustCompile(`aborted by the operator at canary weight (20|30)%: canary-release.dev/abort=true \(set by kubectl-annotate`).MatchString(f.Reason) {
		t.Fatalf("Apply = %v, want a rollback that names the abort and who set it", err)
	}
	if w, history := rt.weights(); w.Canary != 0 || (fmt.Sprint(history) != "[10 20 0]" && fmt.Sprint(history) != "[10 20 30 0]") {
		t.Errorf("weights %v, want [10 20 0]", history)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("the primary runs %s after the abort", img)
	}
	if st.Rejected == nil || st.Rejected.Check != "abort" || st.Rejected.Revision != st.LastAppliedSpec {
		t.Errorf("the record's rejection is %+v, want the aborted revision", st.Rejected)
	}
}

func TestPromoteNowPromotesThroughTheChokepoint(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{10, 20, 30, 40, 50}, Interval: 20 * time.Millisecond, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 100, nil })
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	versioned(cs)
	rt.onSet = func(w router.Weights) {
		if w.Canary == 20 {
			annotate(t, cs, controls.PromoteNow, "true")
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v", st.Phase, err)
	}
	// Seen through the watch, which a loaded machine may deliver an interval late.
	if _, history := rt.weights(); fmt.Sprint(history) != "[10 20 0]" && fmt.Sprint(history) != "[10 20 30 0]" {
		t.Errorf("weights %v, want [10 20 0]: promoted from 20%%", history)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("the primary runs %s, want podinfo:2", img)
	}
	if p := st.PromoteNow; p == nil || p.Revision != st.LastPromotedSpec || p.Manager != "kubectl-annotate" {
		t.Errorf("the record's promote-now is %+v, want the promoted revision and its manager", p)
	}
	if !strings.Contains(st.Message, "by the operator's promote-now: kubectl-annotate") {
		t.Errorf("message %q does not say the operator promoted it", st.Message)
	}
}

func TestPromoteNowIsRefusedAfterAFailedCheck(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{10, 20, 30}, Threshold: 5, Interval: 20 * time.Millisecond, Metrics: []Metric{successRate(99)}})
	var checks atomic.Int32
	q := querierFunc(func(context.Context, string) (float64, error) {
		if checks.Add(1) == 1 {
			return 50, nil // the first check fails
		}
		return 100, nil
	})
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	versioned(cs)
	var warned []string
	e.Warn = func(summary, detail string) { warned = append(warned, summary+": "+detail) }
	events := captureEvents(cs)
	rt.onSet = func(w router.Weights) {
		if w.Canary == 20 {
			annotate(t, cs, controls.PromoteNow, "true")
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v", st.Phase, err)
	}
	if _, history := rt.weights(); fmt.Sprint(history) != "[10 20 30 0]" {
		t.Errorf("weights %v, want every step [10 20 30 0]: the promote-now was refused", history)
	}
	if st.PromoteNow != nil {
		t.Errorf("the record holds a promote-now %+v after a failed check", st.PromoteNow)
	}
	refused := false
	for _, ev := range *events {
		refused = refused || ev.Reason == "PromoteNowRefused" && strings.Contains(ev.Message, "1 check(s) of this analysis failed so far")
	}
	if !refused || len(warned) != 1 || !strings.Contains(warned[0], "Promote-now refused") {
		t.Errorf("the refusal was not told once (events %v, warnings %q)", *events, warned)
	}
}

func TestControlsSetBeforeTheRunAreIgnored(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{10, 20}, Interval: 20 * time.Millisecond})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	versioned(cs)
	annotate(t, cs, controls.PromoteNow, "true")
	annotate(t, cs, controls.Abort, "true")
	var log logged
	e.Progress = log.progress
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded || st.PromoteNow != nil {
		t.Fatalf("Apply = %s, %v (promote-now %+v)", st.Phase, err, st.PromoteNow)
	}
	if _, history := rt.weights(); fmt.Sprint(history) != "[10 20 0]" {
		t.Errorf("weights %v, want every step", history)
	}
	cm, _ := cs.CoreV1().ConfigMaps("test").Get(context.Background(), StateConfigMapName("podinfo"), metav1.GetOptions{})
	if _, ok := cm.Annotations[controls.Abort]; ok {
		t.Errorf("the stale abort is still on the ConfigMap: %v", cm.Annotations)
	}
	if text := log.text(); !strings.Contains(text, "ignored control canary-release.dev/abort=true (set by kubectl-annotate") {
		t.Errorf("the ignored controls were not logged:\n%s", text)
	}
}

// An abort set while the canary starts (its pods take a moment to be Ready) acts before the
// first step: the canary never gets traffic. Before, the run wrote the first step and saw the
// abort only at the check that followed (the campaign's seed 1004440: 20% five seconds after
// the abort).
func TestAbortWhileTheCanaryStartsActsBeforeTheFirstStep(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{10, 20}, Interval: 20 * time.Millisecond})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	versioned(cs)
	var aborted atomic.Bool
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		scale, ok := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
		if !ok || scale.Name != "podinfo" || scale.Spec.Replicas == 0 || !aborted.CompareAndSwap(false, true) {
			return false, nil, nil
		}
		// The canary scales up: its new pods are Ready 300 ms later, and meanwhile the
		// operator aborts.
		obj, err := cs.Tracker().Get(gvr, "test", "podinfo")
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		d.Spec.Replicas, d.Generation = &scale.Spec.Replicas, d.Generation+1
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: scale.Spec.Replicas, UpdatedReplicas: scale.Spec.Replicas}
		if err := cs.Tracker().Update(gvr, d, "test"); err != nil {
			return true, nil, err
		}
		time.AfterFunc(time.Millisecond, func() { annotate(t, cs, controls.Abort, "true") })
		time.AfterFunc(300*time.Millisecond, func() { setPods(t, cs, "podinfo", true) })
		return true, scale, nil
	})
	_, err := e.Apply(context.Background(), rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "aborted by the operator at canary weight 0%") {
		t.Fatalf("Apply = %v, want the abort to act at 0%%", err)
	}
	if _, history := rt.weights(); slices.ContainsFunc(history, func(w int) bool { return w > 0 }) {
		t.Errorf("weights %v: the aborted canary got traffic", history)
	}
}

// A run whose first record creates the state ConfigMap (it was lost) drops nothing there, so
// an approval set after that record is kept by the run's next save, and opens its gate.
func TestControlsSetAfterARecordThatCreatedTheStateAreKept(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Interval: 20 * time.Millisecond})
	cs := versioned(fake.NewClientset())
	store := stateStore{kube: cs, rel: rel, clearOneShot: true}
	ctx := context.Background()
	if err := store.save(ctx, Status{Phase: PhaseProgressing}, nil); err != nil {
		t.Fatal(err)
	}
	annotate(t, cs, controls.ApprovalKey(HookConfirmPromotion), "approved")
	if err := store.save(ctx, Status{Phase: PhaseProgressing, CanaryWeight: 50}, nil); err != nil {
		t.Fatal(err)
	}
	cm, err := cs.CoreV1().ConfigMaps("test").Get(ctx, StateConfigMapName("podinfo"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Annotations[controls.ApprovalKey(HookConfirmPromotion)]; got != "approved" {
		t.Errorf("the run's second save left the approval set after its first as %q, want it kept", got)
	}
}
