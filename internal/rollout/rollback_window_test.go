package rollout

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
