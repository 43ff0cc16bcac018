package rollout

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/retry"

	"github.com/canary-release/terraform-provider-canary/internal/lock"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// killAt leaves the release as a run killed mid-analysis would: the record says Progressing at
// the given weight, the canary runs the new template and the router sends it traffic.
func killAt(t *testing.T, e *Engine, rt *fakeRouter, rel Release, prior Status, weight int) {
	t.Helper()
	ctx := context.Background()
	r := e.newRun(rel, prior, nil)
	if err := r.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	r.st.LastAppliedSpec, r.st.CanarySpec = r.hash, r.hash
	r.st.CanaryWeight = weight
	if err := r.record(ctx, PhaseProgressing, normalEvent, "killed here"); err != nil {
		t.Fatal(err)
	}
	if err := r.w.scale(ctx, rel.Target, 2); err != nil {
		t.Fatal(err)
	}
	if err := rt.SetRoutes(ctx, router.Weights{Primary: 100 - weight, Canary: weight}); err != nil {
		t.Fatal(err)
	}
	rt.history = nil
}

func passing() MetricQuerier {
	return querierFunc(func(context.Context, string) (float64, error) { return 100, nil })
}

func TestKilledRunIsRolledBackThenAnalysedAgain(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the kill = %s, %v; want Succeeded", st.Phase, err)
	}
	if _, history := rt.weights(); fmt.Sprint(history) != "[0 25 50 0]" {
		t.Errorf("canary weights = %v, want the recovery's 0, then a fresh analysis [25 50] and 0", history)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2 after its analysis", img)
	}
}

func TestKilledFailingRunIsRolledBackAndFailsAgain(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, rt, prior := setup(t, rel, failing, "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	_, err := e.Apply(context.Background(), rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "request-success-rate") {
		t.Fatalf("Apply after the kill: %v; want the failed check", err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary image = %s, want podinfo:1 kept", img)
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("weights = %+v, want 100/0", w)
	}
}

// A lost Terraform state makes the next apply a Create: it must take the release over with the
// same safety as an update, never promote the target's unanalysed template.
func TestCreateOnAnExistingReleaseNeverPromotesUnanalysed(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, rt, prior := setup(t, rel, failing, "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	var warned []string
	e.Warn = func(summary, _ string) { warned = append(warned, summary) }
	_, err := e.Initialize(context.Background(), rel, nil)
	if err == nil {
		t.Fatal("Create over a killed, failing release succeeded; want the failed analysis")
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary image = %s, want podinfo:1: Create promoted an unanalysed template", img)
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("weights = %+v, want 100/0", w)
	}
	if r := *deployment(t, cs, "podinfo").Spec.Replicas; r != 0 {
		t.Errorf("canary replicas = %d, want 0 after the rollback", r)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], "took over") {
		t.Errorf("warnings = %q, want one about the takeover", warned)
	}
}

// Losing the state ConfigMap after a rollback must not promote the rejected template: the
// primary's annotation says what was promoted.
func TestLostConfigMapNeverPromotesTheRejectedTemplate(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, _, prior := setup(t, rel, failing, "podinfo:2")
	if _, err := e.Apply(context.Background(), rel, nil, prior); err == nil {
		t.Fatal("the failing release went through")
	}
	if err := cs.CoreV1().ConfigMaps("test").Delete(context.Background(), StateConfigMapName("podinfo"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { _, err := e.Initialize(context.Background(), rel, nil); return err },
		func() error { _, err := e.Apply(context.Background(), rel, nil, Status{}); return err },
	} {
		if err := step(); err == nil {
			t.Error("a run without the ConfigMap went through; want the analysis to fail again")
		}
		if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
			t.Fatalf("primary image = %s, want podinfo:1", img)
		}
	}
}

func TestSecondRunFailsAtOnceNamingTheLockHolder(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50})
	e, cs, _, prior := setup(t, rel, nil, "podinfo:2")
	held, err := lock.Acquire(context.Background(), cs, "test", "podinfo", lock.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	start := time.Now()
	_, err = e.Apply(context.Background(), rel, nil, prior)
	var he *lock.HeldError
	if !errors.As(err, &he) || !strings.Contains(err.Error(), held.Identity()) {
		t.Fatalf("error = %v, want a HeldError naming %q", err, held.Identity())
	}
	if time.Since(start) > 2*time.Second {
		t.Errorf("the second run waited %s; it must fail at once", time.Since(start))
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("the locked-out run touched the primary: %s", img)
	}
}

func TestQueryErrorsHoldTheStepWithoutFailedChecks(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	var calls atomic.Int32
	flaky := querierFunc(func(context.Context, string) (float64, error) {
		if calls.Add(1) <= 2 {
			return 0, fmt.Errorf("%w: connection refused", metrics.ErrQuery)
		}
		return 100, nil
	})
	e, cs, _, prior := setup(t, rel, flaky, "podinfo:2")
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded || st.FailedChecks != 0 {
		t.Fatalf("Apply = %s (failed checks %d), %v; want Succeeded with no failed check", st.Phase, st.FailedChecks, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2", img)
	}
}

func TestMetricsUnavailableRollsBackAndNeverPromotes(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, Threshold: 5, Metrics: []Metric{successRate(99)}})
	down := querierFunc(func(context.Context, string) (float64, error) {
		return 0, fmt.Errorf("%w: connection refused", metrics.ErrQuery)
	})
	e, cs, rt, prior := setup(t, rel, down, "podinfo:2")
	_, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "metrics unavailable: metric request-success-rate had 3 consecutive query errors") {
		t.Fatalf("error = %v, want metrics unavailable after 3 query errors", err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary image = %s, want podinfo:1", img)
	}
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("weights = %+v, want 100/0", w)
	}
}

// pinger is a querier whose Prometheus does not answer the probe.
type pinger struct{ querierFunc }

func (pinger) Ping(context.Context) error {
	return errors.New("dial tcp 127.0.0.1:1: connection refused")
}

func TestUnreachablePrometheusFailsBeforeAnyTrafficMoves(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, Metrics: []Metric{successRate(99)}})
	e, _, rt, prior := setup(t, rel, pinger{passing().(querierFunc)}, "podinfo:2")
	_, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "metrics unavailable before the first traffic shift") {
		t.Fatalf("error = %v", err)
	}
	if _, history := rt.weights(); len(history) != 0 {
		t.Errorf("weights written = %v, want none", history)
	}
}

// A rollback whose weight write fails must not scale the canary away from under its traffic.
func TestFailedRollbackWriteKeepsTheCanaryRunning(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, rt, prior := setup(t, rel, failing, "podinfo:2")
	e.Router = &failingZero{fakeRouter: rt}
	_, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "was incomplete") || !strings.Contains(err.Error(), "50% on the canary") {
		t.Fatalf("error = %v, want an incomplete rollback that says where traffic is", err)
	}
	if r := *deployment(t, cs, "podinfo").Spec.Replicas; r == 0 {
		t.Error("the canary was scaled to 0 while the router still sends it traffic")
	}
}

// failingZero refuses to route traffic back to the primary.
type failingZero struct{ *fakeRouter }

func (f *failingZero) SetRoutes(ctx context.Context, w router.Weights) error {
	if w.Canary == 0 {
		return errors.New("TrafficSplit test/podinfo: 500 Internal Server Error")
	}
	return f.fakeRouter.SetRoutes(ctx, w)
}

func TestRollbackToAPrimaryWithoutReadyPodsIsHeld(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, rt, prior := setup(t, rel, failing, "podinfo:2")
	// The primary loses its pods once the canary has traffic.
	rt.onSet = func(w router.Weights) {
		if w.Canary == 50 {
			p := deployment(t, cs, "podinfo-primary")
			p.Status.ReadyReplicas, p.Status.AvailableReplicas = 0, 0
			if _, err := cs.AppsV1().Deployments("test").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
				t.Error(err)
			}
		}
	}
	_, err := e.Apply(context.Background(), rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "The rollback is held: the primary podinfo-primary has no Ready pods") {
		t.Fatalf("error = %v, want a held rollback", err)
	}
	if w, _ := rt.weights(); w.Canary != 50 {
		t.Errorf("weights = %+v: traffic moved to a primary without Ready pods", w)
	}
}

func TestCanaryLosingItsPodsLosesItsWeightAtOnce(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Interval: 300 * time.Millisecond, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	afterFirstShiftTo(rt, 50, func() {
		setReady(t, cs, "podinfo", 0)
		time.Sleep(100 * time.Millisecond)
		setReady(t, cs, "podinfo", 2)
	})
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded || st.FailedChecks != 0 {
		t.Logf("message: %s", st.Message)
		t.Fatalf("Apply = %s (failed checks %d), %v; want Succeeded, the lost pods not counted as a failed check", st.Phase, st.FailedChecks, err)
	}
	if _, history := rt.weights(); fmt.Sprint(history) != "[50 0 50 0]" {
		t.Errorf("canary weights = %v, want [50 0 50 0]: the weight taken away at once, then the same step again", history)
	}
}

// Ctrl-C while the primary rolls to the passed template leaves traffic where it is served.
func TestCancelDuringPromotionLeavesTrafficOnServingSides(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	ctx, cancel := context.WithCancel(context.Background())
	// The primary's update never becomes ready, and the apply is cancelled meanwhile.
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	var stalled atomic.Bool
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d, ok := a.(k8stesting.UpdateAction).GetObject().(*appsv1.Deployment)
		if a.GetSubresource() != "" || !ok || d.Name != "podinfo-primary" || !stalled.CompareAndSwap(false, true) {
			return false, nil, nil
		}
		d = d.DeepCopy()
		d.Generation++
		time.AfterFunc(50*time.Millisecond, cancel)
		return true, d, cs.Tracker().Update(gvr, d, a.GetNamespace())
	})
	_, err := e.Apply(ctx, rel, nil, prior)
	if err == nil || !strings.Contains(err.Error(), "while the primary podinfo-primary was rolling") || !strings.Contains(err.Error(), "the next apply finishes the promotion") {
		t.Fatalf("error = %v", err)
	}
	w, _ := rt.weights()
	if w.Canary != 50 && w.Canary != 100 {
		t.Errorf("weights = %+v, want the canary (passed template) to keep its traffic", w)
	}
	cst, _, _ := LoadState(context.Background(), cs, "test", "podinfo")
	if cst.Status.Phase != PhasePromoting {
		t.Errorf("recorded phase = %s, want Promoting so the next run finishes it", cst.Status.Phase)
	}
	p := deployment(t, cs, "podinfo-primary")
	p.Status.ObservedGeneration = p.Generation // the deployment controller catches up
	if _, err := cs.AppsV1().Deployments("test").UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("next Apply = %s, %v; want the promotion finished", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2", img)
	}
}

// setReady sets a Deployment's Ready replicas, as the deployment controller would.
func setReady(t *testing.T, cs *fake.Clientset, name string, ready int32) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		d, err := cs.AppsV1().Deployments("test").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		d.Status.ReadyReplicas, d.Status.AvailableReplicas = ready, ready
		_, err = cs.AppsV1().Deployments("test").UpdateStatus(context.Background(), d, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Errorf("setting %s ready=%d: %v", name, ready, err)
	}
}

// afterFirstShiftTo runs change in the background, once, just after the canary first gets
// weight.
func afterFirstShiftTo(rt *fakeRouter, weight int, change func()) {
	var once atomic.Bool
	rt.onSet = func(w router.Weights) {
		if w.Canary == weight && once.CompareAndSwap(false, true) {
			go func() {
				// The fake clientset's watch replays nothing: let it start first.
				time.Sleep(50 * time.Millisecond)
				change()
			}()
		}
	}
}
