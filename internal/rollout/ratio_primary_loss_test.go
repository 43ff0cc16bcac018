package rollout

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	meshk8s "github.com/canary-release/terraform-provider-canary/internal/mesh/kubernetes"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// Issue 32, hole 3: a replica ratio is the canary's share of the Ready pods behind the apex, so
// a primary that loses pods hands its share to the canary without any write. These tests read
// what a user would: which pods the apex Service selects, how many of them are Ready, and the
// weight the run records.

// endpointsFollowReadiness makes the fake clientset list EndpointSlices as the endpoint
// controller writes them: a Service's Ready endpoints are the Ready pods of every Deployment
// whose pod template its selector matches (the pods are named <deployment>-<i>).
func endpointsFollowReadiness(cs *fake.Clientset) {
	services := corev1.SchemeGroupVersion.WithResource("services")
	cs.PrependReactor("list", "endpointslices", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name, ok := a.(k8stesting.ListAction).GetListRestrictions().Labels.RequiresExactMatch(discoveryv1.LabelServiceName)
		list := &discoveryv1.EndpointSliceList{}
		if !ok {
			return true, list, nil
		}
		obj, err := cs.Tracker().Get(services, a.GetNamespace(), name)
		if err != nil {
			return true, list, nil //nolint:nilerr // a missing Service has no endpoints
		}
		slice := discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name + "-sim", Namespace: a.GetNamespace(),
			Labels: map[string]string{discoveryv1.LabelServiceName: name}}}
		for _, d := range readyBehind(cs, obj.(*corev1.Service).Spec.Selector) {
			ready := true
			for i := range d.Status.ReadyReplicas {
				slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("%s-%d", d.Name, i)},
					Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
			}
		}
		list.Items = append(list.Items, slice)
		return true, list, nil
	})
}

// readyBehind lists the Deployments whose pods selector selects.
func readyBehind(cs *fake.Clientset, selector map[string]string) []*appsv1.Deployment {
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	obj, err := cs.Tracker().List(gvr, appsv1.SchemeGroupVersion.WithKind("Deployment"), "test")
	if err != nil || len(selector) == 0 {
		return nil
	}
	var out []*appsv1.Deployment
	for _, d := range obj.(*appsv1.DeploymentList).Items {
		matches := true
		for k, v := range selector {
			matches = matches && d.Spec.Template.Labels[k] == v
		}
		if matches {
			out = append(out, &d)
		}
	}
	return out
}

// apexShare is what the apex Service serves: the canary's Ready pods among all Ready pods it
// selects.
func apexShare(t *testing.T, cs *fake.Clientset) (canary, all int32) {
	t.Helper()
	apex, err := cs.CoreV1().Services("test").Get(context.Background(), "podinfo", metav1.GetOptions{})
	if err != nil {
		t.Error(err)
		return 0, 0
	}
	for _, d := range readyBehind(cs, apex.Spec.Selector) {
		all += d.Status.ReadyReplicas
		if d.Name == "podinfo" {
			canary += d.Status.ReadyReplicas
		}
	}
	return canary, all
}

// withinOnePodOf reports whether canary of all Ready pods is the share weight asks for, to one
// canary pod: one pod fewer would be at most weight percent, one more at least. A step with
// weight has at least one canary pod, or there is nothing to analyse.
func withinOnePodOf(canary, all int32, weight int) bool {
	primary := all - canary
	below := 100 * float64(max(canary-1, 0)) / float64(max(primary+canary-1, 1))
	above := 100 * float64(canary+1) / float64(primary+canary+1)
	return canary >= 1 && below <= float64(weight) && float64(weight) <= above
}

// livePercent is canary of all in whole percent, as the kubernetes router rounds it.
func livePercent(canary, all int32) int { return meshk8s.EffectivePercent(all-canary, canary) }

// losePrimaryPods leaves the primary ready Ready pods of its replicas, as evictions do.
func losePrimaryPods(t *testing.T, cs *fake.Clientset, ready int32) {
	t.Helper()
	gvr := appsv1.SchemeGroupVersion.WithResource("deployments")
	obj, err := cs.Tracker().Get(gvr, "test", "podinfo-primary")
	if err != nil {
		t.Error(err)
		return
	}
	d := obj.(*appsv1.Deployment).DeepCopy()
	d.Status.ReadyReplicas, d.Status.AvailableReplicas = ready, ready
	if err := cs.Tracker().Update(gvr, d, "test"); err != nil {
		t.Error(err)
	}
}

// ratioRun is a weighted release without a mesh on the fake cluster, the primary at replicas
// pods, the target switched to podinfo:2; onWrite runs after each write of the router, with
// the weight asked.
type ratioRun struct {
	cs  *fake.Clientset
	e   *Engine
	rel Release
	st  Status

	mu          sync.Mutex
	recorded    int // the weight of the run's latest report: what the status records
	onWrite     func(asked int)
	beforeWrite func(asked int)
}

func newRatioRun(t *testing.T, replicas int32, weights ...int) *ratioRun {
	t.Helper()
	ctx := context.Background()
	rel := ratioRelease(weights...)
	rel.Analysis.Interval = 40 * time.Millisecond
	cs := newCluster()
	endpointsFollowReadiness(cs)
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", replicas), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	run := &ratioRun{cs: cs, rel: rel}
	hook := func(pick func() func(int)) func(int) {
		return func(asked int) {
			run.mu.Lock()
			hook := pick()
			run.mu.Unlock()
			if hook != nil {
				hook(asked)
			}
		}
	}
	rt := &writeHook{Router: meshk8s.Driver{}.NewRouter(router.Clients{Kube: cs}, rel.RouterSpec()),
		before: hook(func() func(int) { return run.beforeWrite }), after: hook(func() func(int) { return run.onWrite })}
	run.e = &Engine{Kube: cs, Router: rt, HTTP: http.DefaultClient, DrainDelay: time.Millisecond, Progress: func(p Progress) {
		run.mu.Lock()
		run.recorded = p.Weight
		run.mu.Unlock()
	}}
	st, err := run.e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	run.st = st
	setImage(t, run.e, "podinfo", "podinfo:2")
	return run
}

func (r *ratioRun) recordedWeight() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.recorded
}

// writeHook is a router that calls before ahead of each write, and after once it succeeded.
type writeHook struct {
	router.Router
	before, after func(asked int)
}

func (h *writeHook) SetRoutes(ctx context.Context, w router.Weights) error {
	h.before(w.Canary)
	if err := h.Router.SetRoutes(ctx, w); err != nil {
		return err
	}
	h.after(w.Canary)
	return nil
}

func (h *writeHook) Written(asked router.Weights) router.Weights {
	return h.Router.(router.Rounding).Written(asked)
}

func (h *writeHook) SizedBeside() int32 { return h.Router.(router.Sizing).SizedBeside() }

// snapshot is what a user sees of a ratio release at one moment.
type snapshot struct {
	canary, all      int32 // Ready pods behind the apex, and the canary's among them
	recorded         int
	primaryImage     string
	highestAskedStep int
}

// Issue 32, hole 3 (a) and (c): the primary loses three quarters of its Ready pods at the 20%
// step. Within an interval the canary is scaled to its step's share of the primary's remaining
// Ready pods (to one pod), the status records the share the apex really serves, the step does
// not advance and nothing is promoted while the primary is short; once it is whole again the
// run resumes at the step's share of the whole primary and promotes. Before, the canary kept
// its pods and served 50% (or more) while the record said 20%, the next step was written
// beside the short primary, and the release was promoted.
func TestReplicaRatioKeepsTheStepWhileThePrimaryIsShort(t *testing.T) {
	for _, c := range []struct {
		replicas, left int32
	}{{4, 1}, {8, 2}} {
		t.Run(fmt.Sprintf("%d of %d left", c.left, c.replicas), func(t *testing.T) {
			run := newRatioRun(t, c.replicas, 20, 40)
			interval := run.rel.Analysis.Interval
			short := 12 * interval
			var (
				mu          sync.Mutex
				lostAt      time.Time
				keptAt      time.Time // the first moment after the loss that the share was within one pod of 20%
				highest     int       // the highest weight asked while the primary was short
				atRecovery  snapshot
				afterReturn []int    // the weights asked once the primary is whole again
				resumed     [2]int32 // the canary's and all Ready pods behind the apex at the first of them
				restored    bool
			)
			sample := func() snapshot {
				canary, all := apexShare(t, run.cs)
				s := snapshot{canary: canary, all: all, recorded: run.recordedWeight()}
				if p, err := run.cs.AppsV1().Deployments("test").Get(context.Background(), "podinfo-primary", metav1.GetOptions{}); err == nil {
					s.primaryImage = p.Spec.Template.Spec.Containers[0].Image
				}
				return s
			}
			run.onWrite = func(asked int) {
				mu.Lock()
				defer mu.Unlock()
				switch {
				case restored:
					if len(afterReturn) == 0 {
						resumed[0], resumed[1] = apexShare(t, run.cs)
					}
					afterReturn = append(afterReturn, asked)
				case lostAt.IsZero() && asked == 20:
					losePrimaryPods(t, run.cs, c.left)
					lostAt = time.Now()
					time.AfterFunc(short, func() {
						mu.Lock()
						defer mu.Unlock()
						atRecovery = sample()
						atRecovery.highestAskedStep = highest
						restored = true
						setPods(t, run.cs, "podinfo-primary", true)
					})
				case !lostAt.IsZero():
					highest = max(highest, asked)
					if canary, all := apexShare(t, run.cs); keptAt.IsZero() && withinOnePodOf(canary, all, 20) {
						keptAt = time.Now()
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			st, err := run.e.Apply(ctx, run.rel, nil, run.st)
			mu.Lock()
			defer mu.Unlock()
			if lostAt.IsZero() {
				t.Fatalf("Apply = %s, %v; the 20%% step was never written", st.Phase, err)
			}
			if !restored {
				t.Fatalf("Apply = %s, %v while the primary had %d of %d Ready pods: the run ended without waiting for it (weights asked after the loss up to %d%%)",
					st.Phase, err, c.left, c.replicas, highest)
			}
			if !withinOnePodOf(atRecovery.canary, atRecovery.all, 20) {
				t.Errorf("after %s with %d of %d primary pods Ready, the apex serves %d canary pods of %d Ready (%d%%), not the 20%% step to one pod",
					short, c.left, c.replicas, atRecovery.canary, atRecovery.all, livePercent(atRecovery.canary, atRecovery.all))
			}
			switch {
			case keptAt.IsZero():
				t.Errorf("no write after the primary's loss brought the canary's share within one pod of 20%%, want one within an interval (%s)", interval)
			case keptAt.Sub(lostAt) > 2*interval:
				t.Errorf("the canary's share was back within one pod of 20%% %s after the primary's loss, want within an interval (%s)", keptAt.Sub(lostAt), interval)
			}
			if live := livePercent(atRecovery.canary, atRecovery.all); atRecovery.recorded != live {
				t.Errorf("the status records %d%% while the apex serves the canary %d%% (%d of %d Ready pods)", atRecovery.recorded, live, atRecovery.canary, atRecovery.all)
			}
			if atRecovery.highestAskedStep > 20 {
				t.Errorf("the run asked for %d%% while the primary had %d of %d Ready pods: the step advanced", atRecovery.highestAskedStep, c.left, c.replicas)
			}
			if atRecovery.primaryImage != "podinfo:1" {
				t.Errorf("the primary runs %s while it was short: promoted without its pods", atRecovery.primaryImage)
			}
			// (c) The primary is whole again: the run resumes and promotes.
			if err != nil || st.Phase != PhaseSucceeded {
				t.Fatalf("Apply = %s, %v; want Succeeded once the primary is whole again", st.Phase, err)
			}
			if len(afterReturn) < 3 || afterReturn[0] != 20 || !containsInt(afterReturn, 40) || afterReturn[len(afterReturn)-1] != 0 {
				t.Errorf("weights asked after the primary was whole again = %v, want the 20%% step again, then 40%% and the promotion's 0", afterReturn)
			} else if !withinOnePodOf(resumed[0], resumed[1], 20) || resumed[1]-resumed[0] != c.replicas {
				t.Errorf("as the run resumed, the apex served %d canary pods of %d Ready, want the 20%% step's share of the primary's %d pods to one pod",
					resumed[0], resumed[1], c.replicas)
			}
			if img := deployment(t, run.cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
				t.Errorf("the primary runs %s after the promotion, want podinfo:2", img)
			}
			if canary, all := apexShare(t, run.cs); canary != 0 || all != c.replicas {
				t.Errorf("after the promotion the apex serves %d canary pods of %d Ready, want the primary's %d alone", canary, all, c.replicas)
			}
		})
	}
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// Issue 32, hole 3 (b): the primary loses every Ready pod at the 20% step. No share can be
// kept without an outage, so the canary serves, and the apply fails naming the primary, the
// status records where the traffic is, and so does the next plan's drift check. Before, the
// unanalysed canary served everything while the record kept 20%, and the error said neither
// which kind of workload lost its pods nor where the traffic was recorded.
func TestReplicaRatioPrimaryWithoutReadyPodsHoldsOnTheCanary(t *testing.T) {
	run := newRatioRun(t, 4, 20, 40)
	run.onWrite = func(asked int) {
		if asked == 20 {
			losePrimaryPods(t, run.cs, 0)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := run.e.Apply(ctx, run.rel, nil, run.st)
	if err == nil || !strings.Contains(err.Error(), "the primary Deployment test/podinfo-primary has no Ready pods") {
		t.Fatalf("Apply = %s, %v; want a failure naming the primary Deployment test/podinfo-primary without Ready pods", st.Phase, err)
	}
	canary, all := apexShare(t, run.cs)
	if canary == 0 || canary != all {
		t.Errorf("the apex serves %d canary pods of %d Ready, want the canary's Ready pods alone (no outage)", canary, all)
	}
	if !maps.Equal(deployment(t, run.cs, "podinfo").Spec.Template.Labels, map[string]string{"app": "podinfo", router.LabelApex: "podinfo"}) {
		t.Errorf("the canary's pods lost the apex's label: %v", deployment(t, run.cs, "podinfo").Spec.Template.Labels)
	}
	if st.CanaryWeight != 100 {
		t.Errorf("the status records %d%% on the canary, which serves all the traffic", st.CanaryWeight)
	}
	if live := WithLiveSplit(ctx, run.e.Router, st); live.CanaryWeight != 100 {
		t.Errorf("a refresh reads %d%% on the canary, which serves all the traffic", live.CanaryWeight)
	}
	drift, err := run.e.Drift(ctx, run.rel, st)
	if err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(drift, "\n"); !strings.Contains(text, "100% of traffic is on the canary podinfo") ||
		!strings.Contains(text, "Deployment test/podinfo-primary has no Ready pods") {
		t.Errorf("the next plan's drift check says %q; want where the traffic is and why", text)
	}
	if text := strings.Join(drift, "\n"); strings.Contains(text, "Service test/podinfo was edited") {
		t.Errorf("the next plan's drift check says %q: the apex selects both sides as the router left it, nobody edited it", text)
	}
}

// A primary that stays short of pods for progress_deadline_seconds rolls the release back: the
// canary was never analysed beside a whole primary, and all traffic returns to the primary's
// Ready pods. Before, the run advanced beside the short primary and promoted.
func TestReplicaRatioPrimaryShortPastTheDeadlineRollsBack(t *testing.T) {
	run := newRatioRun(t, 4, 20, 40)
	run.rel.ProgressDeadline = 10 * run.rel.Analysis.Interval
	run.onWrite = func(asked int) {
		if asked == 20 {
			losePrimaryPods(t, run.cs, 1)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := run.e.Apply(ctx, run.rel, nil, run.st)
	if err == nil || st.Phase != PhaseFailed || !strings.Contains(err.Error(), "the primary Deployment test/podinfo-primary had 1 of 4 Ready pods for progress_deadline_seconds") {
		t.Fatalf("Apply = %s, %v; want a rollback naming the primary Deployment test/podinfo-primary short of pods", st.Phase, err)
	}
	if canary, all := apexShare(t, run.cs); canary != 0 || all != 1 {
		t.Errorf("after the rollback the apex serves %d canary pods of %d Ready, want the primary's 1 Ready pod alone", canary, all)
	}
	if img := deployment(t, run.cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("the primary runs %s, want podinfo:1: nothing is promoted beside a short primary", img)
	}
	if st.CanaryWeight != 0 {
		t.Errorf("the status records %d%% on the canary after the rollback", st.CanaryWeight)
	}
}

// The primary loses pods as the 30% step is written and has them back before its check: the
// canary was sized beside the few that were left, so the check sees it at half its step's
// share of the whole primary. The run sizes it again and analyses it at its step before the
// promotion. Before, the engine never saw the primary short, took the check at the smaller
// share as the last step's, and promoted (campaign seed 3403).
func TestReplicaRatioPrimaryBackBeforeTheCheckIsSizedAgain(t *testing.T) {
	run := newRatioRun(t, 5, 30)
	var (
		mu         sync.Mutex
		lost       bool
		atStep     []snapshot // what the apex served after each write of the 30% step
		promotedAt = -1       // how many writes of the step came before the promotion's
	)
	run.beforeWrite = func(asked int) {
		mu.Lock()
		defer mu.Unlock()
		if asked == 30 && !lost {
			lost = true
			losePrimaryPods(t, run.cs, 2)
		}
	}
	run.onWrite = func(asked int) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case asked == 30:
			canary, all := apexShare(t, run.cs)
			atStep = append(atStep, snapshot{canary: canary, all: all})
			if len(atStep) == 1 {
				setPods(t, run.cs, "podinfo-primary", true) // back before the check
			}
		case asked == 0 && promotedAt < 0 && len(atStep) > 0:
			promotedAt = len(atStep)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := run.e.Apply(ctx, run.rel, nil, run.st)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want Succeeded", st.Phase, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(atStep) == 0 || atStep[0].all-atStep[0].canary != 2 {
		t.Fatalf("the 30%% step's first write served %v, want it beside the primary's 2 Ready pods left", atStep)
	}
	whole := false
	for _, s := range atStep[:max(promotedAt, 0)] {
		whole = whole || (s.all-s.canary == 5 && withinOnePodOf(s.canary, s.all, 30))
	}
	if !whole {
		t.Errorf("before the promotion the 30%% step served (canary, all Ready pods) %v: never its share of the whole primary's 5 pods, so no check analysed the canary at its step", atStep[:max(promotedAt, 0)])
	}
	if img := deployment(t, run.cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("the primary runs %s after the promotion, want podinfo:2", img)
	}
}

// A run that stopped with a canary of no Ready pods leaves the apex selecting both sides of
// the replica ratio: it serves the primary alone while the canary has no pods, so the
// recovery has no traffic to move. The next run must give the apex the primary's selector
// before the canary scales up for its analysis. Before, the canary's scale-up to its full
// size handed it 5 of 7 Ready pods behind the apex (71%) ahead of any step (campaign seed
// 5246).
func TestReplicaRatioApexLeftSharedIsUnsharedBeforeTheCanaryScalesUp(t *testing.T) {
	run := newRatioRun(t, 4, 20)
	ctx := context.Background()
	apex, err := run.cs.CoreV1().Services("test").Get(ctx, "podinfo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	apex.Spec.Selector = ratioSelector(run.rel)
	if _, err := run.cs.CoreV1().Services("test").Update(ctx, apex, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		worst string
	)
	run.cs.PrependReactor("update", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d, ok := a.(k8stesting.UpdateAction).GetObject().(*appsv1.Deployment)
		if !ok || d.Name != "podinfo" || a.GetSubresource() != "" || d.Spec.Replicas == nil {
			return false, nil, nil
		}
		obj, err := run.cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("services"), "test", "podinfo")
		if err != nil || !maps.Equal(obj.(*corev1.Service).Spec.Selector, ratioSelector(run.rel)) {
			return false, nil, nil //nolint:nilerr // an apex that is not read selects nothing here
		}
		// The apex selects both sides: the canary's new pods get their share of it.
		if share := livePercent(*d.Spec.Replicas, *d.Spec.Replicas+4); share > 20 {
			mu.Lock()
			worst = fmt.Sprintf("the canary scaled to %d pods beside the primary's 4 while the apex selects both sides: %d%%", *d.Spec.Replicas, share)
			mu.Unlock()
		}
		return false, nil, nil
	})
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	st, err := run.e.Apply(ctx, run.rel, nil, run.st)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want Succeeded", st.Phase, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if worst != "" {
		t.Errorf("%s, above the 20%% step before any analysis", worst)
	}
}
