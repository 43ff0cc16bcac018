package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/controls"
	"github.com/canary-release/terraform-provider-canary/internal/rollout/promotion"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// killedInFinalising leaves the release as a run killed in Finalising leaves it: the analysis
// passed and was recorded, the primary runs the passed template, the canary has weight.
func killedInFinalising(t *testing.T, e *Engine, rt *fakeRouter, rel Release, prior Status, weight int) {
	t.Helper()
	ctx := context.Background()
	r := e.newRun(rel, prior, nil)
	if err := r.prepare(ctx); err != nil {
		t.Fatal(err)
	}
	r.st.LastAppliedSpec, r.st.CanarySpec, r.st.PassedSpec, r.st.PrimarySpec = r.hash, r.hash, r.hash, r.hash
	r.st.CanaryWeight = weight
	if err := r.record(ctx, PhaseFinalising, normalEvent, "killed here"); err != nil {
		t.Fatal(err)
	}
	proof, err := promotion.Analysis(r.st.PassedSpec, r.hash)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.promote(ctx, r.target, proof); err != nil {
		t.Fatal(err)
	}
	if err := r.w.scale(ctx, rel.Target, 2); err != nil {
		t.Fatal(err)
	}
	if err := rt.SetRoutes(ctx, router.Weights{Primary: 100 - weight, Canary: weight}); err != nil {
		t.Fatal(err)
	}
}

func deletePrimary(t *testing.T, e *Engine) {
	t.Helper()
	if err := e.Kube.AppsV1().Deployments("test").Delete(context.Background(), "podinfo-primary", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A primary deleted while a killed run was finalising a passed template is rebuilt from that
// template (the recorded analysis is its proof), and the promotion completes; before, every
// later apply and the destroy waited for a primary that no longer existed (make chaos, osm
// seed 10133067800015601678).
func TestPrimaryDeletedDuringFinalisingIsRebuiltFromThePassedTemplate(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killedInFinalising(t, e, rt, rel, prior, 20)
	deletePrimary(t, e)
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the primary's deletion = %s, %v; want the promotion finished", st.Phase, err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("rebuilt primary runs %s, want the passed podinfo:2", img)
	}
	if live, _ := rt.weights(); live.Canary != 0 {
		t.Errorf("live canary weight %d, want 0", live.Canary)
	}
}

// A primary deleted before the analysis completed holds the rollback, with a message that says
// what to do; once the target is back on the last promoted template, the next apply rebuilds
// the primary from it and finishes the rollback (make chaos, gloo seed 11668880286484645355).
func TestPrimaryDeletedMidAnalysisIsRebuiltOnlyFromThePromotedTemplate(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	deletePrimary(t, e)
	ctx := context.Background()
	_, err := e.Apply(ctx, rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "was deleted") || !strings.Contains(f.Reason, "set the target back to its last promoted template and apply") {
		t.Fatalf("Apply with the primary deleted and an unanalysed target = %v; want a held rollback that says what to do", err)
	}
	if p, err := cs.AppsV1().Deployments("test").Get(ctx, "podinfo-primary", metav1.GetOptions{}); err == nil {
		t.Fatalf("a primary was rebuilt from %s, which never passed analysis", p.Spec.Template.Spec.Containers[0].Image)
	}
	setImage(t, e, "podinfo", "podinfo:1")
	st, err := e.Apply(ctx, rel, nil, prior)
	if err != nil {
		t.Fatalf("Apply with the target back on the promoted template: %v", err)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("rebuilt primary runs %s, want the promoted podinfo:1", img)
	}
	if live, _ := rt.weights(); live.Canary != 0 || st.CanaryWeight != 0 {
		t.Errorf("live canary weight %d, recorded %d; want 0", live.Canary, st.CanaryWeight)
	}
}

// A canary that lost its Ready pods gives its traffic to the primary even when the primary
// cannot be read: unknown is not "no" (make chaos, osm seed 8094743996570342513).
func TestLostCanaryGoesToAnUnreadablePrimary(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 25, MaxWeight: 50})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	obj, _ := cs.Tracker().Get(gvr, "test", "podinfo")
	canary := obj.(*appsv1.Deployment).DeepCopy()
	canary.Status.ReadyReplicas, canary.Status.AvailableReplicas = 0, 0
	if err := cs.Tracker().Update(gvr, canary, "test"); err != nil {
		t.Fatal(err)
	}
	cs.PrependReactor("get", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.GetAction).GetName() == "podinfo-primary" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "podinfo-primary", errors.New("denied"))
		}
		return false, nil, nil
	})
	_, _ = e.Apply(context.Background(), rel, nil, prior)
	// The recovery's first write takes the weight off the canary (the apply then goes on to
	// analyse the target again, which this test does not judge).
	if _, history := rt.weights(); len(history) == 0 || history[0] != 0 {
		t.Errorf("weights written %v: the canary without Ready pods kept its 25%% because the primary could not be read", history)
	}
}

// setPods gives a Deployment Ready pods of its current spec, or takes them all away, behind
// the engine, as a node failure and its repair do.
func setPods(t *testing.T, cs *fake.Clientset, name string, ready bool) {
	t.Helper()
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	obj, err := cs.Tracker().Get(gvr, "test", name)
	if err != nil {
		t.Error(err)
		return
	}
	d := obj.(*appsv1.Deployment).DeepCopy()
	if ready {
		n := *d.Spec.Replicas
		d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n}
	} else {
		d.Status.ReadyReplicas, d.Status.AvailableReplicas = 0, 0
	}
	if err := cs.Tracker().Update(gvr, d, "test"); err != nil {
		t.Error(err)
	}
}

// primaryServes reads whether the primary has Ready pods now.
func primaryServes(cs *fake.Clientset) bool {
	obj, err := cs.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("deployments"), "test", "podinfo-primary")
	return err == nil && kinds.HasReadyPods(obj.(*appsv1.Deployment))
}

// Issue 20, item N1: the primary loses its Ready pods as Finalising is recorded, with 70% of
// the traffic on it. The canary runs the template that passed, so it takes that share at once,
// and the promotion finishes when the primary is back; before, the gate only refused to give
// the primary more, its 70% stayed on it, and the apply failed (campaign seed 581).
func TestPrimaryLostInFinalisingGivesItsShareToThePassedCanary(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{30}, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	var lost atomic.Bool
	cs.PrependReactor("update", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		cm, ok := a.(k8stesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		if ok && strings.Contains(cm.Data[stateKeyStatus], `"phase":"Finalising"`) && lost.CompareAndSwap(false, true) {
			setPods(t, cs, "podinfo-primary", false)
			time.AfterFunc(300*time.Millisecond, func() { setPods(t, cs, "podinfo-primary", true) })
		}
		return false, nil, nil
	})
	var unserved []string
	rt.onSet = func(w router.Weights) {
		if w.Primary > 0 && lost.Load() && !primaryServes(cs) {
			unserved = append(unserved, splitText(w))
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the promotion finished once the primary is back", st.Phase, err)
	}
	live, history := rt.weights()
	if !lost.Load() {
		t.Fatal("the run never recorded Finalising")
	}
	if !slices.Contains(history, 100) {
		t.Errorf("weights written %v: the primary without Ready pods kept its 70%% although the passed canary could take it", history)
	}
	if len(unserved) > 0 {
		t.Errorf("the primary got traffic while it had no Ready pods: %v", unserved)
	}
	if live.Canary != 0 {
		t.Errorf("live canary weight %d, want 0", live.Canary)
	}
}

// Issue 20, item N1, recovery: a run killed in Finalising left 70% on a primary that has lost
// its Ready pods since. The next apply moves that share to the canary, which runs the passed
// template, before it waits for the primary; before, it waited with the traffic left there.
func TestRecoveryMovesALostPrimarysShareToThePassedCanary(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 30, MaxWeight: 30})
	e, cs, rt, prior := setup(t, rel, nil, "podinfo:2")
	killedInFinalising(t, e, rt, rel, prior, 30)
	setPods(t, cs, "podinfo-primary", false)
	rt.history = nil
	restored := make(chan struct{})
	time.AfterFunc(300*time.Millisecond, func() { setPods(t, cs, "podinfo-primary", true); close(restored) })
	var first *router.Weights
	var firstBeforeRestore bool
	rt.onSet = func(w router.Weights) {
		if first == nil {
			first = &w
			select {
			case <-restored:
			default:
				firstBeforeRestore = true
			}
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the promotion finished", st.Phase, err)
	}
	_, history := rt.weights()
	if first == nil || first.Canary != 100 || !firstBeforeRestore {
		t.Errorf("weights written %v: the primary without Ready pods kept its 70%% until it was back", history)
	}
	if img := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary runs %s, want the passed podinfo:2", img)
	}
}

// Issue 20, item N1: the primary loses its Ready pods (deleted, evicted) while the analysis
// runs; the unanalysed canary may not take its share then. Once the analysis passes it may:
// the canary takes all traffic before the promotion is even recorded, whose writes (an event
// sink, a deleted state ConfigMap) may take long or fail; before, the primary kept its 70%
// until the promotion's copy made it Ready (campaign seeds 5259, 9909).
func TestPrimaryLostDuringTheAnalysisGivesItsShareToTheCanaryThatPassed(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{30}, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	var lost atomic.Bool
	rt.onSet = func(w router.Weights) {
		if w.Canary == 30 && lost.CompareAndSwap(false, true) {
			setPods(t, cs, "podinfo-primary", false)
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the promotion finished", st.Phase, err)
	}
	live, history := rt.weights()
	if i := slices.Index(history, 30); i < 0 || i+1 >= len(history) || history[i+1] != 100 {
		t.Errorf("weights written %v: after the analysis passed, the primary without Ready pods kept its 70%% although the canary could take it", history)
	}
	if live.Canary != 0 {
		t.Errorf("live canary weight %d, want 0", live.Canary)
	}
}

// Issue 20, item N1: the primary loses its Ready pods just as Finalising gives it all the
// traffic back. The canary, which runs the passed template, keeps its pods and takes the
// traffic again until the primary is back; before, it was scaled to zero after the drain delay
// and the release ended Succeeded with all traffic on a primary without Ready pods
// (campaign seeds 7353, 9669).
func TestPrimaryLostAsItTakesTheTrafficBackKeepsTheCanary(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{30}, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, passing(), "podinfo:2")
	e.DrainDelay = 50 * time.Millisecond
	var lost atomic.Bool
	rt.onSet = func(w router.Weights) {
		if w.Canary == 0 && lost.CompareAndSwap(false, true) {
			setPods(t, cs, "podinfo-primary", false)
			time.AfterFunc(300*time.Millisecond, func() { setPods(t, cs, "podinfo-primary", true) })
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the promotion finished once the primary is back", st.Phase, err)
	}
	live, history := rt.weights()
	if i := slices.Index(history, 0); i < 0 || !slices.Contains(history[i:], 100) {
		t.Errorf("weights written %v: the primary lost its Ready pods as it took the traffic back, and kept it", history)
	}
	if live.Canary != 0 || !primaryServes(cs) {
		t.Errorf("live canary weight %d, primary serves %v; want all traffic on a serving primary", live.Canary, primaryServes(cs))
	}
}

// A release with nothing new to roll out (the target is on the last promoted template) whose
// primary has no Ready pods gives the traffic to a canary that serves, since it runs that
// template, until the primary is Ready again; then everything goes back to the primary. Before,
// settle waited for the primary with the traffic on it (campaign seed 1004506: a promotion
// whose primary never became Ready left the traffic on the canary, the router object was
// deleted behind the release, and the next run rebuilt it at 100/0 onto the pod-less primary).
func TestSettleLendsALostPrimarysTrafficToThePromotedCanary(t *testing.T) {
	rel := testRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setup(t, rel, newCountingQuerier(100), "podinfo:2")
	if st, err := e.Apply(context.Background(), rel, nil, prior); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("podinfo:2 = %s, %v, want promoted", st.Phase, err)
	}
	// The canary serves the promoted template; the primary lost its pods; the router sends
	// everything to the primary.
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	obj, err := cs.Tracker().Get(gvr, "test", "podinfo")
	if err != nil {
		t.Fatal(err)
	}
	canary := obj.(*appsv1.Deployment).DeepCopy()
	two := int32(2)
	canary.Spec.Replicas = &two
	if err := cs.Tracker().Update(gvr, canary, "test"); err != nil {
		t.Fatal(err)
	}
	setPods(t, cs, "podinfo", true)
	setPods(t, cs, "podinfo-primary", false)
	rt.mu.Lock()
	rt.w, rt.history = router.Weights{Primary: 100}, nil
	rt.mu.Unlock()

	// The primary's pods stay unready, whatever the run writes to it, for 500 ms.
	var restored atomic.Bool
	cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d, ok := a.(k8stesting.UpdateAction).GetObject().(*appsv1.Deployment)
		if !ok || a.GetSubresource() != "" || d.Name != "podinfo-primary" || restored.Load() {
			return false, nil, nil
		}
		old, err := cs.Tracker().Get(gvr, "test", d.Name)
		if err != nil {
			return true, nil, err
		}
		d = d.DeepCopy()
		d.Generation, d.Status = old.(*appsv1.Deployment).Generation, old.(*appsv1.Deployment).Status
		return true, d, cs.Tracker().Update(gvr, d, "test")
	})
	var leftOnPrimary atomic.Int64
	time.AfterFunc(500*time.Millisecond, func() {
		live, _ := rt.weights()
		leftOnPrimary.Store(int64(live.Primary))
		restored.Store(true)
		setPods(t, cs, "podinfo-primary", true)
	})
	st, err := e.Apply(context.Background(), rel, nil, recorded(t, e))
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("settle = %s, %v, want Succeeded", st.Phase, err)
	}
	if w := leftOnPrimary.Load(); w > 0 {
		t.Errorf("%d%% of traffic stayed on the primary while it had no Ready pods, although the canary ran the promoted template and served", w)
	}
	if live, _ := rt.weights(); live.Canary != 0 || !primaryServes(cs) {
		t.Errorf("live weights %+v, primary serves %v; want all traffic on a serving primary", live, primaryServes(cs))
	}
}

// Campaign seed 2036: the primary loses its Ready pods while the analysis runs, and the
// operator asks promote-now. The canary's template has not passed analysis: only the record
// of the promote-now makes it promotable, so the canary takes the pod-less primary's traffic
// only once the record holds it; before, it took all traffic and the record followed.
func TestPromoteNowWithALostPrimaryMovesTrafficOnlyOnceRecorded(t *testing.T) {
	rel := testRelease(Analysis{StepWeights: []int{20, 40}, Interval: 20 * time.Millisecond, Metrics: []Metric{successRate(99)}})
	q := querierFunc(func(context.Context, string) (float64, error) { return 100, nil })
	e, cs, rt, prior := setup(t, rel, q, "podinfo:2")
	versioned(cs)
	var asked, unrecorded atomic.Bool
	rt.onSet = func(w router.Weights) {
		if w.Canary == 20 && asked.CompareAndSwap(false, true) {
			setPods(t, cs, "podinfo-primary", false)
			annotate(t, cs, controls.PromoteNow, "true")
		}
		if w.Canary == 100 {
			cm, err := cs.CoreV1().ConfigMaps("test").Get(context.Background(), StateConfigMapName("podinfo"), metav1.GetOptions{})
			if err != nil {
				t.Error(err)
				return
			}
			var st Status
			if err := json.Unmarshal([]byte(cm.Data[stateKeyStatus]), &st); err != nil || st.PromoteNow == nil {
				unrecorded.Store(true)
			}
		}
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want the promotion finished", st.Phase, err)
	}
	_, history := rt.weights()
	if !slices.Contains(history, 100) {
		t.Fatalf("weights written %v: the canary never took the pod-less primary's traffic", history)
	}
	if unrecorded.Load() {
		t.Errorf("weights written %v: the unanalysed canary took 100%% before the record held the operator's promote-now", history)
	}
}
