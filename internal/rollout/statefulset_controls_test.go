package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/canary-release/terraform-provider-canary/internal/autoscaler"
	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// The operator's controls and the built-in gates act on a StatefulSet's run as on a
// Deployment's, and an autoscaler cannot put more pods on a revision than its step allows.

// updateRevision is the revision the set's template makes (the fake controller names it).
func updateRevision(t *testing.T, cs *fake.Clientset) string {
	t.Helper()
	set, err := cs.AppsV1().StatefulSets("test").Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return set.Status.UpdateRevision
}

// startRelease puts web:2 in the set's template and applies rel in the background, returning
// once the first step's partition is written, with the wait for the apply's result. The
// caller's control then reaches the run through its watch well within the interval.
func startRelease(t *testing.T, e *Engine, cs *fake.Clientset, f *fakeStatefulSets, rel Release) (candidate string, wait func() (Status, error)) {
	t.Helper()
	versioned(cs)
	setStatefulSetImage(t, cs, "web:2")
	candidate = updateRevision(t, cs)
	wait = applyInBackground(e, rel, recorded2(t, e, "web"))
	waitFor(t, "the first step (partition 4: 1 of 5 pods)", func() bool { return slices.Contains(f.written(), 4) })
	return candidate, wait
}

func TestStatefulSetAbortRollsBackAndRejects(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Interval: 200 * time.Millisecond})
	q := newCountingQuerier(100)
	e, cs, f, _ := initStatefulSet(t, rel, q)
	candidate, wait := startRelease(t, e, cs, f, rel)
	annotateRelease(t, cs, "web", controls.Abort, "true")
	st, err := wait()
	var failure *Failure
	if !errors.As(err, &failure) || st.Phase != PhaseFailed ||
		!strings.Contains(err.Error(), "aborted by the operator at canary weight 20%: canary-release.dev/abort=true (set by kubectl-annotate at ") ||
		!strings.Contains(err.Error(), "rolled back, every pod of StatefulSet test/web runs revision") {
		t.Fatalf("Apply = %s, %v; want a rollback that names the abort and who set it", st.Phase, err)
	}
	if got := fmt.Sprint(f.written()); got != "[2147483647 4 2147483647]" {
		t.Errorf("partitions written = %s, want [2147483647 4 2147483647]: aborted at the first step, then held", got)
	}
	if got := podImages(t, cs, 5); strings.Join(got, ",") != "web:1,web:1,web:1,web:1,web:1" {
		t.Errorf("pods run %v, want web:1 on all five", got)
	}
	if n := f.most(candidate); n != 1 {
		t.Errorf("at most %d pods ran the aborted revision, want 1", n)
	}
	rec := recorded2(t, e, "web")
	if j := rec.Rejected; j == nil || j.Check != "abort" || j.Revision != candidate || !strings.Contains(j.Reason, "kubectl-annotate") {
		t.Errorf("the record's rejection is %+v, want the aborted revision %s, by the abort of kubectl-annotate", j, candidate)
	}
	// The aborted revision is refused until it changes, as a failed one.
	setStatefulSetImage(t, cs, "web:2")
	if _, err := e.Apply(context.Background(), rel, nil, rec); err == nil || !strings.Contains(err.Error(), "failed its analysis before") {
		t.Errorf("Apply of the aborted revision again = %v, want a refusal", err)
	}
}

func TestStatefulSetPauseHoldsThePartitionUntilResumed(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Interval: 200 * time.Millisecond})
	q := newCountingQuerier(100)
	e, cs, f, _ := initStatefulSet(t, rel, q)
	_, wait := startRelease(t, e, cs, f, rel)
	annotateRelease(t, cs, "web", controls.Pause, "true")
	waitFor(t, "the pause", func() bool { return strings.HasPrefix(recorded2(t, e, "web").Message, "Paused: ") })
	before := q.queries.Load()
	time.Sleep(600 * time.Millisecond) // three intervals
	if got := fmt.Sprint(f.written()); got != "[2147483647 4]" {
		t.Fatalf("while paused the partitions went %s, want [2147483647 4]: held at the first step", got)
	}
	if got := podImages(t, cs, 5); strings.Join(got, ",") != "web:1,web:1,web:1,web:1,web:2" {
		t.Errorf("while paused the pods run %v, want web:2 on the last one only", got)
	}
	if q.queries.Load() == before {
		t.Errorf("no check ran while paused; the checks go on at the step reached")
	}
	annotateRelease(t, cs, "web", controls.Pause, "")
	st, err := wait()
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the resume = %s, %v", st.Phase, err)
	}
	if got := fmt.Sprint(f.written()); got != "[2147483647 4 3 2 0 2147483647]" {
		t.Errorf("partitions written = %s, want every step once resumed", got)
	}
}

func TestStatefulSetPromoteNowPromotesWithTheOperatorsRecord(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Interval: 200 * time.Millisecond})
	q := newCountingQuerier(100)
	e, cs, f, _ := initStatefulSet(t, rel, q)
	candidate, wait := startRelease(t, e, cs, f, rel)
	annotateRelease(t, cs, "web", controls.PromoteNow, "true")
	st, err := wait()
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v", st.Phase, err)
	}
	if got := fmt.Sprint(f.written()); got != "[2147483647 4 0 2147483647]" {
		t.Errorf("partitions written = %s, want [2147483647 4 0 2147483647]: promoted from the first step", got)
	}
	if got := podImages(t, cs, 5); strings.Join(got, ",") != "web:2,web:2,web:2,web:2,web:2" {
		t.Errorf("pods run %v, want web:2 on all five", got)
	}
	if p := recorded2(t, e, "web").PromoteNow; p == nil || p.Revision != candidate || p.Manager != "kubectl-annotate" || p.FailedChecks != 0 {
		t.Errorf("the record's promote-now is %+v, want revision %s by kubectl-annotate after no failed check", p, candidate)
	}
	if !strings.Contains(st.Message, "by the operator's promote-now: kubectl-annotate") {
		t.Errorf("message %q does not say the operator promoted it", st.Message)
	}
}

func TestStatefulSetBuiltInPromotionGateHoldsUntilApproved(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Interval: 20 * time.Millisecond,
		Webhooks: []Webhook{{Name: "release-manager", Type: HookConfirmPromotion}}})
	q := newCountingQuerier(100)
	e, cs, f, _ := initStatefulSet(t, rel, q)
	versioned(cs)
	setStatefulSetImage(t, cs, "web:2")
	wait := applyInBackground(e, rel, recorded2(t, e, "web"))
	waitFor(t, "the promotion gate", func() bool {
		if st := recorded2(t, e, "web"); st.Phase == PhaseFailed {
			t.Fatalf("the release failed: %s", st.Message)
		}
		return recorded2(t, e, "web").Phase == PhaseWaitingPromotion
	})
	time.Sleep(200 * time.Millisecond) // ten intervals
	if got := fmt.Sprint(f.written()); got != "[2147483647 4 3 2]" {
		t.Errorf("partitions written before the approval = %s, want [2147483647 4 3 2]: no promotion", got)
	}
	if got := podImages(t, cs, 5); strings.Join(got, ",") != "web:1,web:1,web:2,web:2,web:2" {
		t.Errorf("before the approval the pods run %v, want web:2 on the last step's three only", got)
	}
	if msg := recorded2(t, e, "web").Message; !strings.Contains(msg, "kubectl annotate configmap -n test web-canary-release canary-release.dev/confirm-promotion=approved") {
		t.Errorf("the status %q does not say how to approve", msg)
	}
	annotateRelease(t, cs, "web", controls.ApprovalKey(HookConfirmPromotion), "approved")
	st, err := wait()
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the approval = %s, %v", st.Phase, err)
	}
	if got := podImages(t, cs, 5); strings.Join(got, ",") != "web:2,web:2,web:2,web:2,web:2" {
		t.Errorf("pods run %v, want web:2 on all five", got)
	}
}

func TestStatefulSetControlsSetBeforeTheRunAreIgnored(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Interval: 5 * time.Millisecond})
	q := newCountingQuerier(100)
	e, cs, f, _ := initStatefulSet(t, rel, q)
	versioned(cs)
	annotateRelease(t, cs, "web", controls.Abort, "true")
	var log logged
	e.Progress = log.progress
	setStatefulSetImage(t, cs, "web:2")
	st, err := e.Apply(context.Background(), rel, nil, recorded2(t, e, "web"))
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the abort set before the run ignored", st.Phase, err)
	}
	if got := fmt.Sprint(f.written()); got != "[2147483647 4 3 2 0 2147483647]" {
		t.Errorf("partitions written = %s, want every step", got)
	}
	cm, _ := cs.CoreV1().ConfigMaps("test").Get(context.Background(), StateConfigMapName("web"), metav1.GetOptions{})
	if _, ok := cm.Annotations[controls.Abort]; ok {
		t.Errorf("the stale abort is still on the ConfigMap: %v", cm.Annotations)
	}
	if text := log.text(); !strings.Contains(text, "ignored control canary-release.dev/abort=true (set by kubectl-annotate") {
		t.Errorf("the ignored control was not logged:\n%s", text)
	}
}

// An autoscaler that raises its maxReplicas with the template scales the set up between
// releases: the held partition gives every new pod the promoted revision.
func TestStatefulSetScaleUpBetweenReleasesStartsNoNewRevision(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60})
	rel.Autoscaler = &autoscaler.Ref{Name: "web"}
	hpa := &autoscalingv2.HorizontalPodAutoscaler{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "test"},
		Spec: autoscalingv2.HorizontalPodAutoscalerSpec{MaxReplicas: 5, ScaleTargetRef: autoscalingv2.CrossVersionObjectReference{APIVersion: "apps/v1", Kind: statefulset.Kind, Name: "web"}}}
	_, cs, f, _ := initStatefulSet(t, rel, nil, hpa)
	ctx := context.Background()
	hpa.Spec.MaxReplicas = 8
	if _, err := cs.AutoscalingV2().HorizontalPodAutoscalers("test").Update(ctx, hpa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	setStatefulSetImage(t, cs, "web:2")
	candidate := updateRevision(t, cs)
	set, err := cs.AppsV1().StatefulSets("test").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set.Spec.Replicas = ptr(int32(8)) // the autoscaler's scale-up
	if _, err := cs.AppsV1().StatefulSets("test").Update(ctx, set, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if set, _ = cs.AppsV1().StatefulSets("test").Get(ctx, "web", metav1.GetOptions{}); statefulset.Partition(set) != statefulset.HoldPartitionMax {
		t.Errorf("the partition is %d between releases, want %d whatever the autoscaler's maxReplicas", statefulset.Partition(set), statefulset.HoldPartitionMax)
	}
	if got := podImages(t, cs, 8); strings.Join(got, ",") != strings.Repeat("web:1,", 7)+"web:1" {
		t.Errorf("after the scale-up to 8 the pods run %v, want web:1 on all eight: none analysed web:2", got)
	}
	if n := f.most(candidate); n != 0 {
		t.Errorf("%d pods ran the unanalysed revision before any apply, want 0", n)
	}
}

// A scale-up during a step gives the new pods the revision under analysis: a check of more
// updated pods than the step allows does not count, and once that lasts
// progress_deadline_seconds the release rolls back.
func TestStatefulSetScaleUpDuringAStepDoesNotCount(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Interval: 200 * time.Millisecond})
	rel.ProgressDeadline = time.Second
	q := newCountingQuerier(100)
	e, cs, f, _ := initStatefulSet(t, rel, q)
	var log logged
	e.Progress = log.progress
	candidate, wait := startRelease(t, e, cs, f, rel)
	ctx := context.Background()
	set, err := cs.AppsV1().StatefulSets("test").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set.Spec.Replicas = ptr(int32(8)) // an autoscaler's scale-up, before the first check
	if _, err := cs.AppsV1().StatefulSets("test").Update(ctx, set, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := wait()
	var failure *Failure
	if !errors.As(err, &failure) || st.Phase != PhaseFailed || !strings.Contains(err.Error(), "(progress_deadline_seconds), more than the 1 its step of 20% allows") {
		t.Fatalf("Apply = %s, %v; want a rollback naming progress_deadline_seconds", st.Phase, err)
	}
	if text := log.text(); !strings.Contains(text, "check does not count: 4 of the 8 pods of StatefulSet web run revision "+candidate+", more than the 1 its step of 20% allows") {
		t.Errorf("the progress does not say the checks did not count:\n%s", text)
	}
	if n := q.queries.Load(); n != 0 || st.Iterations != 0 {
		t.Errorf("%d queries ran and %d checks counted with 4 pods on a step of 1, want none", n, st.Iterations)
	}
	if got := fmt.Sprint(f.written()); got != "[2147483647 4 2147483647]" {
		t.Errorf("partitions written = %s, want the first step held, then the hold", got)
	}
	if got := podImages(t, cs, 8); strings.Join(got, ",") != strings.Repeat("web:1,", 7)+"web:1" {
		t.Errorf("after the rollback the pods run %v, want web:1 on all eight", got)
	}
}
