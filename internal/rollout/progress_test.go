package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
)

// progressLog collects a run's progress lines.
type progressLog struct {
	mu    sync.Mutex
	lines []Progress
}

func (l *progressLog) add(p Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, p)
}

func (l *progressLog) of(kind ProgressKind) []Progress {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Progress
	for _, p := range l.lines {
		if p.Kind == kind {
			out = append(out, p)
		}
	}
	return out
}

// steppingClock advances by step at each reading, so that every live-view write is due.
func steppingClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(step)
		return now
	}
}

// liveViews records the state ConfigMap's live labels at each write.
func liveViews(cs *k8stesting.Fake) *[]string {
	var mu sync.Mutex
	var views []string
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if ok {
			mu.Lock()
			views = append(views, fmt.Sprintf("%s %s %s", cm.Labels[LabelPhase], cm.Labels[LabelWeight], cm.Labels[LabelLastCheck]))
			mu.Unlock()
		}
		return false, nil, nil
	})
	return &views
}

// The progress lines tell each step as it happens: the weight, each metric's value against its
// range with the release's fields, and the verdict; each query is a detail line.
func TestProgressTellsWeightsChecksAndVerdict(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50, Threshold: 2, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 99.5, nil })
	e, _, _, prior := setup(t, rel, q, "podinfo:2")
	var log progressLog
	e.Progress = log.add
	if st, err := e.Apply(context.Background(), rel, nil, prior); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply: phase %s, %v", st.Phase, err)
	}
	var weights []int
	for _, p := range log.of(ProgressWeight) {
		weights = append(weights, p.Weight)
	}
	if !slices.Equal(weights, []int{25, 50, 0}) {
		t.Errorf("weight lines at %v, want [25 50 0]", weights)
	}
	checks := log.of(ProgressCheck)
	if len(checks) != 2 {
		t.Fatalf("%d check lines, want 2: %+v", len(checks), checks)
	}
	for i, c := range checks {
		if c.Metric != "request-success-rate" || c.Value == nil || *c.Value != 99.5 || c.Range != "[min 99]" ||
			c.Namespace != "test" || c.Name != "podinfo" || c.Phase != PhaseProgressing || c.Weight != 25*(i+1) {
			t.Errorf("check line %d = %+v (value %v), want the metric, 99.5, [min 99], the release, Progressing at %d%%", i, c, c.Value, 25*(i+1))
		}
		if !strings.Contains(c.Text(), "canary_release test/podinfo: metric request-success-rate = 99.50, within threshold_range [min 99]") {
			t.Errorf("check line reads %q", c.Text())
		}
	}
	if queries := log.of(ProgressQuery); len(queries) != 2 || !queries[0].Detail() || !strings.Contains(queries[0].Query, `destination_name="podinfo"`) {
		t.Errorf("query lines = %+v, want 2 details naming the rendered query", queries)
	}
	if v := log.of(ProgressVerdict); len(v) != 1 || v[0].Phase != PhaseSucceeded {
		t.Errorf("verdict lines = %+v, want one Succeeded", v)
	}
}

// A failed check is one line with the metric, its value and the count against the threshold,
// and the rollback's verdict follows.
func TestProgressTellsAFailedCheckAndTheRollback(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, _, prior := setup(t, rel, q, "podinfo:2")
	var log progressLog
	e.Progress = log.add
	_, err := e.Apply(context.Background(), rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) {
		t.Fatalf("Apply: %v, want a failure", err)
	}
	checks := log.of(ProgressCheck)
	if len(checks) != 1 || checks[0].Value == nil || *checks[0].Value != 50 || !strings.Contains(checks[0].Message, "failed checks: 1 of threshold 1") {
		t.Errorf("check lines = %+v, want one with the value 50 and the count", checks)
	}
	if v := log.of(ProgressVerdict); len(v) != 1 || v[0].Phase != PhaseFailed {
		t.Errorf("verdict lines = %+v, want one Failed", v)
	}
	cm, err := cs.CoreV1().ConfigMaps("test").Get(context.Background(), StateConfigMapName("podinfo"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Labels[LabelPhase] != "Failed" || cm.Labels[LabelWeight] != "0" || cm.Labels[LabelLastCheck] != "failed" ||
		!strings.Contains(cm.Annotations[AnnotationLastCheck], "metric request-success-rate returned 50.00, outside threshold_range [min 99]") {
		t.Errorf("state ConfigMap labels %v, annotations %v; want Failed, 0, failed and the failed check", cm.Labels, cm.Annotations)
	}
}

// Under a short interval the live view costs no request of its own: the phases' saves carry
// it (TestRolloutSpendsNoRequestsOnUnchangedObjects counts them). Once liveViewWindow has
// passed since the last write, each step's weight and the last check's verdict are written,
// once per step, and the ConfigMap ends with the verdict.
func TestLiveViewShowsEachStepOnceTheWindowAllows(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 10, MaxWeight: 30, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 99.5, nil })
	e, cs, _, prior := setup(t, rel, q, "podinfo:2")
	e.Now = steppingClock(liveViewWindow)
	views := liveViews(&cs.Fake)
	if st, err := e.Apply(context.Background(), rel, nil, prior); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply: phase %s, %v", st.Phase, err)
	}
	want := []string{
		"Progressing 0 ",        // the phase's own save
		"Progressing 10 ",       // the first step, before any check
		"Progressing 20 passed", // each next step, with the check that let it advance
		"Progressing 30 passed", //
		"Promoting 30 passed",   // the phases' saves
		"Finalising 30 passed",  // written ahead of the move back
		"Succeeded 0 passed",    //
	}
	if !slices.Equal(*views, want) {
		t.Errorf("live views written:\n%s\nwant:\n%s", strings.Join(*views, "\n"), strings.Join(want, "\n"))
	}
	cm, err := cs.CoreV1().ConfigMaps("test").Get(context.Background(), StateConfigMapName("podinfo"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := cm.Annotations[AnnotationLastCheck]; !strings.HasPrefix(got, "passed at 2026-12-04T") || !strings.Contains(got, "request-success-rate 99.50 within [min 99]") {
		t.Errorf("last-check annotation = %q, want the time and the metric's value against its range", got)
	}
	cluster, _, err := LoadState(context.Background(), cs, "test", "podinfo")
	if err != nil || cluster.Status.LastCheck != cm.Annotations[AnnotationLastCheck] {
		t.Errorf("status last check = %q (%v), want the annotation's", cluster.Status.LastCheck, err)
	}
}
