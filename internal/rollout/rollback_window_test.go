package rollout

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// countingQuerier answers value to every query and counts them: a run that queried nothing
// ran no analysis.
type countingQuerier struct {
	value   atomic.Value
	queries atomic.Int64
}

func newCountingQuerier(v float64) *countingQuerier {
	q := &countingQuerier{}
	q.value.Store(v)
	return q
}

func (q *countingQuerier) Query(context.Context, string) (float64, error) {
	q.queries.Add(1)
	return q.value.Load().(float64), nil
}

// applyImage points the target at image and applies, returning the status, how many metric
// queries the run made and the canary weights it wrote.
func applyImage(t *testing.T, e *Engine, rt *fakeRouter, q *countingQuerier, rel Release, image string) (Status, int64, []int, error) {
	t.Helper()
	setImage(t, e, "podinfo", image)
	q.queries.Store(0)
	rt.mu.Lock()
	rt.history = nil
	rt.mu.Unlock()
	st, err := e.Apply(context.Background(), rel, nil, recorded(t, e))
	_, weights := rt.weights()
	return st, q.queries.Load(), weights, err
}

func primaryImage(t *testing.T, e *Engine) string {
	t.Helper()
	d, err := e.Kube.AppsV1().Deployments("test").Get(context.Background(), "podinfo-primary", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Spec.Containers[0].Image
}

// A revert to a template promoted within rollback_window is promoted at once, through its own
// recorded proof, without a metric query or a canary weight; one outside the window, and one
// whose analysis failed since, is analysed again.
func TestRollbackWindowRevertsWithoutAnalysisOnlyWithinTheWindow(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.RollbackWindow = 1
	q := newCountingQuerier(100)
	e, _, rt, prior := setup(t, rel, q, "podinfo:2")
	if st, err := e.Apply(context.Background(), rel, nil, prior); err != nil || st.Phase != PhaseSucceeded || q.queries.Load() == 0 {
		t.Fatalf("podinfo:2 = %s, %v after %d queries, want promoted after an analysis", st.Phase, err, q.queries.Load())
	}
	v2 := recorded(t, e).LastPromotedSpec

	// Back to podinfo:1, promoted one promotion ago: at once.
	setImage(t, e, "podinfo", "podinfo:1")
	if v, err := e.Revert(context.Background(), rel); err != nil || v == nil || v.Ago != 1 {
		t.Fatalf("Revert (for the plan) = %+v, %v, want podinfo:1, 1 promotion ago", v, err)
	}
	st, queries, weights, err := applyImage(t, e, rt, q, rel, "podinfo:1")
	if err != nil || st.Phase != PhaseSucceeded || primaryImage(t, e) != "podinfo:1" {
		t.Fatalf("revert to podinfo:1 = %s, %v; primary runs %s", st.Phase, err, primaryImage(t, e))
	}
	if queries != 0 || slices.ContainsFunc(weights, func(w int) bool { return w > 0 }) {
		t.Errorf("the revert within the window ran an analysis: %d queries, canary weights %v", queries, weights)
	}
	if st.Revert != st.LastPromotedSpec || !slices.Equal(st.Promoted, []string{st.LastPromotedSpec, v2}) {
		t.Errorf("record after the revert: revert %q, history %v, want the revert recorded and [%s %s]", st.Revert, st.Promoted, st.LastPromotedSpec, v2)
	}

	// podinfo:3 is analysed and promoted; podinfo:2 is now two promotions back, outside a
	// window of 1: analysed again.
	if st, queries, _, err := applyImage(t, e, rt, q, rel, "podinfo:3"); err != nil || st.Phase != PhaseSucceeded || queries == 0 {
		t.Fatalf("podinfo:3 = %s, %v after %d queries", st.Phase, err, queries)
	}
	if v, _ := e.Revert(context.Background(), rel); v != nil {
		t.Errorf("the plan announces a revert for a new template: %+v", v)
	}
	// Its analysis fails this time: it leaves the history.
	q.value.Store(50.0)
	st, queries, weights, err = applyImage(t, e, rt, q, rel, "podinfo:2")
	if err == nil || queries == 0 || !slices.Contains(weights, 50) || primaryImage(t, e) != "podinfo:3" {
		t.Fatalf("podinfo:2 outside the window = %s, %v after %d queries at weights %v, want an analysis that fails", st.Phase, err, queries, weights)
	}
	if slices.Contains(recorded(t, e).Promoted, v2) {
		t.Errorf("the history still holds %s after its analysis failed: %v", v2, recorded(t, e).Promoted)
	}

	// A wider window does not bring it back: it is analysed again (retry_rejected lets it be).
	wide := rel
	wide.RollbackWindow, wide.RetryRejected = 5, "again"
	q.value.Store(100.0)
	if st, queries, _, err := applyImage(t, e, rt, q, wide, "podinfo:2"); err != nil || st.Phase != PhaseSucceeded || queries == 0 {
		t.Fatalf("podinfo:2 after its failure, window 5 = %s, %v after %d queries, want promoted after an analysis", st.Phase, err, queries)
	}
	// Now podinfo:1 is two back, within 5: at once.
	if st, queries, _, err := applyImage(t, e, rt, q, wide, "podinfo:1"); err != nil || st.Phase != PhaseSucceeded || queries != 0 || primaryImage(t, e) != "podinfo:1" {
		t.Fatalf("podinfo:1 within a window of 5 = %s, %v after %d queries", st.Phase, err, queries)
	}
	// Without rollback_window, a revert is analysed like any template.
	off := wide
	off.RollbackWindow = 0
	if st, queries, _, err := applyImage(t, e, rt, q, off, "podinfo:2"); err != nil || st.Phase != PhaseSucceeded || queries == 0 {
		t.Fatalf("podinfo:2 without rollback_window = %s, %v after %d queries", st.Phase, err, queries)
	}
}

// The history is bounded, and a record written before it existed (format 2) reads as one
// whose history is its last promoted template.
func TestPromotedHistoryIsBoundedAndOldRecordsRead(t *testing.T) {
	var st Status
	for i := range MaxRollbackWindow + 5 {
		st.notePromoted(string(rune('a' + i)))
	}
	if len(st.Promoted) != MaxRollbackWindow+1 || st.Promoted[0] != st.LastPromotedSpec {
		t.Errorf("history = %v, want %d entries led by %s", st.Promoted, MaxRollbackWindow+1, st.LastPromotedSpec)
	}
	st.notePromoted("c") // promoted again: moved to the head, not repeated
	if st.Promoted[0] != "c" || slices.Index(st.Promoted[1:], "c") >= 0 {
		t.Errorf("history after promoting c again = %v", st.Promoted)
	}

	cs := newCluster()
	_, err := cs.CoreV1().ConfigMaps("test").Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: StateConfigMapName("podinfo"), Namespace: "test"},
		Data:       map[string]string{stateKeyStatus: `{"phase":"Succeeded","lastPromotedSpec":"old"}`, stateKeyFormat: "2"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	old, ok, err := LoadState(context.Background(), cs, "test", "podinfo")
	if err != nil || !ok {
		t.Fatalf("a format 2 record: %v, %v", ok, err)
	}
	if h := old.Status.promotedHistory(); !slices.Equal(h, []string{"old"}) {
		t.Errorf("history of a format 2 record = %v, want [old]", h)
	}
}

// A revert within rollback_window whose primary lost its Ready pods gives the canary all
// traffic before the primary's copy (moveOffLostPrimary); then someone resets the router to
// 100/0 (a hand edit, a GitOps tool) while the primary rolls to the reverted template. The
// wait for the primary reads the live weights, so the canary, which runs the template being
// promoted, takes the traffic back at once; before, the wait trusted the weights the run had
// written, and 100% stayed on a primary without Ready pods until its new pods were Ready
// (campaign seed 1051, skip_analysis, whose promotion takes the same path).
func TestRevertWaitsForThePrimaryWithTheLiveWeights(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.RollbackWindow = 1
	q := newCountingQuerier(100)
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	if st, err := e.Apply(context.Background(), rel, nil, prior); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("podinfo:2 = %s, %v, want promoted", st.Phase, err)
	}

	var armed, lost, reset, copied atomic.Bool
	var leftOnPrimary atomic.Int64
	back := make(chan struct{})
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if !ok || !armed.Load() {
			return false, nil, nil
		}
		switch status := cm.Data[stateKeyStatus]; {
		case strings.Contains(status, `"phase":"Progressing"`) && lost.CompareAndSwap(false, true):
			setPods(t, cs, "podinfo-primary", false)
		case strings.Contains(status, `"phase":"Promoting"`) && reset.CompareAndSwap(false, true):
			rt.mu.Lock()
			rt.w = router.Weights{Primary: 100} // someone else's write: not in the run's history
			rt.mu.Unlock()
		}
		return false, nil, nil
	})
	// The primary's copy to the reverted template has no Ready pods for a while.
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d, ok := a.(k8stesting.UpdateAction).GetObject().(*appsv1.Deployment)
		if !ok || a.GetSubresource() != "" || d.Name != "podinfo-primary" || !reset.Load() || !copied.CompareAndSwap(false, true) {
			return false, nil, nil
		}
		d = d.DeepCopy()
		old, err := cs.Tracker().Get(gvr, "test", d.Name)
		if err != nil {
			return true, nil, err
		}
		d.Generation = old.(*appsv1.Deployment).Generation + 1
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n}
		time.AfterFunc(300*time.Millisecond, func() {
			if live, _ := rt.weights(); live.Primary > 0 {
				leftOnPrimary.Store(int64(live.Primary))
			}
			setPods(t, cs, "podinfo-primary", true)
			close(back)
		})
		return true, d, cs.Tracker().Update(gvr, d, "test")
	})
	armed.Store(true)
	st, queries, _, err := applyImage(t, e, rt, q, rel, "podinfo:1")
	if err != nil || st.Phase != PhaseSucceeded || primaryImage(t, e) != "podinfo:1" || queries != 0 {
		t.Fatalf("revert to podinfo:1 = %s, %v after %d queries; primary runs %s", st.Phase, err, queries, primaryImage(t, e))
	}
	if !lost.Load() || !reset.Load() || !copied.Load() {
		t.Fatalf("the schedule did not happen: primary lost %v, router reset %v, primary copied %v", lost.Load(), reset.Load(), copied.Load())
	}
	<-back
	if w := leftOnPrimary.Load(); w > 0 {
		t.Errorf("%d%% of traffic stayed on the primary while it had no Ready pods, although the canary ran the reverted template and served", w)
	}
	if live, _ := rt.weights(); live.Canary != 0 || !primaryServes(cs) {
		t.Errorf("live weights %+v, primary serves %v; want all traffic on a serving primary", live, primaryServes(cs))
	}
}

// A template whose analysis fails leaves the history with the rollback's first record: when
// the last record (Failed) cannot be written, the plan must not announce a revert to it;
// before, the history left in the state ConfigMap still held it until the next apply.
func TestFailedTemplateLeavesTheHistoryAtTheRollbacksFirstRecord(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	rel.RollbackWindow = 1
	q := newCountingQuerier(100)
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	if st, err := e.Apply(context.Background(), rel, nil, prior); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("podinfo:2 = %s, %v, want promoted", st.Phase, err)
	}
	v1 := recorded(t, e).Promoted[1]
	// podinfo:1 again, analysed this time (no window), and its analysis fails; every Failed
	// record is refused.
	var refused atomic.Bool
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if ok && strings.Contains(cm.Data[stateKeyStatus], `"phase":"Failed"`) {
			refused.Store(true)
			return true, nil, apierrors.NewInternalError(errors.New("etcd is gone"))
		}
		return false, nil, nil
	})
	analysed := rel
	analysed.RollbackWindow = 0
	q.value.Store(50.0)
	if _, queries, _, err := applyImage(t, e, rt, q, analysed, "podinfo:1"); err == nil || queries == 0 || !refused.Load() {
		t.Fatalf("podinfo:1 analysed = %v after %d queries (Failed refused: %v), want a failed analysis", err, queries, refused.Load())
	}
	if h := recorded(t, e).Promoted; slices.Contains(h, v1) {
		t.Errorf("the recorded history %v still holds %s, whose analysis failed", h, v1)
	}
	if v, err := e.Revert(context.Background(), rel); err != nil || v != nil {
		t.Errorf("the plan announces a revert to a template whose analysis failed: %+v, %v", v, err)
	}
}

// A revert within rollback_window (and a skip_analysis release) has no step at which the
// controls are read, yet they act on it: a pause set while its canary starts holds the
// promotion until the operator resumes, and an abort rolls the revert back. Before, the run
// went from a Ready canary straight to Promoting, and the primary took the reverted template
// after the operator's pause or abort.
func TestControlsSetWhileARevertStartsAct(t *testing.T) {
	for _, tc := range []struct {
		name    string
		control string
		skip    bool
	}{
		{"revert, abort", controls.Abort, false},
		{"revert, pause", controls.Pause, false},
		{"skip_analysis, pause", controls.Pause, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rel := testRelease(Analysis{StepWeights: []int{10, 20}, Interval: 20 * time.Millisecond, Metrics: []Metric{successRate(99)}})
			rel.RollbackWindow = 1
			q := newCountingQuerier(100)
			e, cs, _, prior := setup(t, rel, q, "podinfo:2")
			versioned(cs)
			if st, err := e.Apply(context.Background(), rel, nil, prior); err != nil || st.Phase != PhaseSucceeded {
				t.Fatalf("podinfo:2 = %s, %v, want promoted", st.Phase, err)
			}
			if tc.skip {
				rel.RollbackWindow, rel.SkipAnalysis = 0, true
			}
			setImage(t, e, "podinfo", "podinfo:1")
			q.queries.Store(0)
			// The canary's pods are Ready 300 ms after its scale-up; meanwhile the operator
			// sets the control.
			var fired atomic.Bool
			gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
			cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
				scale, ok := a.(k8stesting.UpdateAction).GetObject().(*autoscalingv1.Scale)
				if !ok || scale.Name != "podinfo" || scale.Spec.Replicas == 0 || !fired.CompareAndSwap(false, true) {
					return false, nil, nil
				}
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
				time.AfterFunc(time.Millisecond, func() { annotate(t, cs, tc.control, "true") })
				time.AfterFunc(300*time.Millisecond, func() { setPods(t, cs, "podinfo", true) })
				return true, scale, nil
			})
			wait := applyInBackground(e, rel, recorded(t, e))
			if tc.control == controls.Abort {
				st, err := wait()
				var f *Failure
				if !errors.As(err, &f) || !strings.Contains(f.Reason, "aborted by the operator") || primaryImage(t, e) != "podinfo:2" {
					t.Fatalf("revert with an abort = %s, %v; primary runs %s, want the abort to roll back, podinfo:2 kept", st.Phase, err, primaryImage(t, e))
				}
				return
			}
			waitFor(t, "the pause to hold the run", func() bool {
				st := recorded(t, e)
				return st.Phase == PhaseProgressing && strings.HasPrefix(st.Message, "Paused")
			})
			time.Sleep(500 * time.Millisecond)
			if got := primaryImage(t, e); got != "podinfo:2" {
				t.Fatalf("the primary runs %s while the operator's pause holds the run, want podinfo:2", got)
			}
			annotate(t, cs, controls.Pause, "")
			if st, err := wait(); err != nil || st.Phase != PhaseSucceeded || primaryImage(t, e) != "podinfo:1" {
				t.Fatalf("after the resume = %s, %v; primary runs %s, want podinfo:1 promoted", st.Phase, err, primaryImage(t, e))
			}
			if q.queries.Load() != 0 {
				t.Errorf("%d metric queries: the promotion without analysis ran one", q.queries.Load())
			}
		})
	}
}
