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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	meshk8s "github.com/canary-release/terraform-provider-canary/internal/mesh/kubernetes"
	"github.com/canary-release/terraform-provider-canary/internal/router"

	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// ratioStep is what one write of the replica-ratio router left: the weight asked, the
// canary's replicas, the apex's selector and the weight the engine recorded.
type ratioStep struct {
	asked, recorded int
	replicas        int32
	selector        map[string]string
}

// recordingRatioRouter is the kubernetes router, noting the canary's replicas after each write.
type recordingRatioRouter struct {
	router.Router
	cs    *fake.Clientset
	mu    sync.Mutex
	steps []ratioStep
}

func (r *recordingRatioRouter) SetRoutes(ctx context.Context, w router.Weights) error {
	if err := r.Router.SetRoutes(ctx, w); err != nil {
		return err
	}
	canary, err := r.cs.AppsV1().Deployments("test").Get(ctx, "podinfo", metav1.GetOptions{})
	if err != nil {
		return err
	}
	apex, err := r.cs.CoreV1().Services("test").Get(ctx, "podinfo", metav1.GetOptions{})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = append(r.steps, ratioStep{asked: w.Canary, replicas: *canary.Spec.Replicas, selector: apex.Spec.Selector})
	return nil
}

func (r *recordingRatioRouter) Written(asked router.Weights) router.Weights {
	w := r.Router.(router.Rounding).Written(asked)
	r.mu.Lock()
	r.steps[len(r.steps)-1].recorded = w.Canary
	r.mu.Unlock()
	return w
}

func (r *recordingRatioRouter) SizedBeside() int32 { return r.Router.(router.Sizing).SizedBeside() }

func ratioRelease(weights ...int) Release {
	rel := testRelease(Analysis{StepWeights: weights, Threshold: 1})
	rel.Provider, rel.Service.SelectorRouted = "kubernetes", true
	return rel
}

// A weighted release without a mesh: each step scales the canary to its share of the
// primary's 4 Ready pods (rounded down, at least one), the apex selects both sides by the
// shared label only then, and the weight recorded is the pods' share, not the step's. The
// label is on both templates and is no new revision.
func TestReplicaRatioFollowsTheSteps(t *testing.T) {
	ctx := context.Background()
	rel := ratioRelease(10, 25, 50)
	cs := newCluster()
	endpointsFollowReadiness(cs) // the router reads the split back from them
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := &recordingRatioRouter{Router: meshk8s.Driver{}.NewRouter(router.Clients{Kube: cs}, rel.RouterSpec()), cs: cs}
	var weights []int
	e := &Engine{Kube: cs, Router: rt, HTTP: http.DefaultClient, DrainDelay: time.Millisecond, Progress: func(p Progress) {
		if p.Kind == ProgressWeight {
			weights = append(weights, p.Weight)
		}
	}}
	prior, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	primary := deployment(t, cs, "podinfo-primary")
	if got := primary.Spec.Template.Labels[router.LabelApex]; got != "podinfo" {
		t.Fatalf("the primary's pods carry %s=%q, want podinfo", router.LabelApex, got)
	}
	if primary.Spec.Selector.MatchLabels[router.LabelApex] != "" {
		t.Fatalf("the primary's selector %v has the apex's label: it would overlap the canary's", primary.Spec.Selector.MatchLabels)
	}
	target := deployment(t, cs, "podinfo")
	target.Spec.Template.Spec.Containers[0].Image = "podinfo:2"
	if _, err := cs.AppsV1().Deployments("test").Update(ctx, target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := e.Apply(ctx, rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v; want Succeeded", st.Phase, err)
	}
	both := map[string]string{router.LabelApex: "podinfo"}
	want := []ratioStep{
		{asked: 10, recorded: 20, replicas: 1, selector: both},
		{asked: 25, recorded: 20, replicas: 1, selector: both},
		{asked: 50, recorded: 50, replicas: 4, selector: both},
		{asked: 0, recorded: 0, replicas: 4, selector: map[string]string{"app": "podinfo-primary"}},
	}
	if fmt.Sprint(rt.steps) != fmt.Sprint(want) {
		t.Errorf("router writes (asked, recorded, canary replicas, apex selector) = %v, want %v", rt.steps, want)
	}
	if fmt.Sprint(weights) != "[20 20 50 0]" {
		t.Errorf("weights reported = %v, want the pods' shares [20 20 50 0]", weights)
	}
	target = deployment(t, cs, "podinfo")
	if got := target.Spec.Template.Labels[router.LabelApex]; got != "podinfo" {
		t.Errorf("the canary's pods carry %s=%q, want podinfo", router.LabelApex, got)
	}
	if *target.Spec.Replicas != 0 {
		t.Errorf("the canary has %d replicas after the promotion, want 0", *target.Spec.Replicas)
	}
	if got := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; got != "podinfo:2" {
		t.Errorf("the primary runs %s, want podinfo:2", got)
	}
	without := target.DeepCopy()
	delete(without.Spec.Template.Labels, router.LabelApex)
	if TemplateHash(target) != TemplateHash(without) || st.LastPromotedSpec != TemplateHash(without) {
		t.Errorf("the apex's label changed the revision: %s with it, %s without, %s promoted", TemplateHash(target), TemplateHash(without), st.LastPromotedSpec)
	}
}

// A run that starts while the apex selects both sides (an earlier run was killed mid-step)
// keeps that selector: only the traffic gate moves the apex, and ensureServices would
// otherwise send the canary's share to the primary behind the gate's back.
func TestReplicaRatioSelectorSurvivesReconciliation(t *testing.T) {
	ctx := context.Background()
	rel := ratioRelease(20)
	cs := newCluster()
	endpointsFollowReadiness(cs) // the router reads the split back from them
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w := workload{kube: cs, rel: rel}
	target := deployment(t, cs, "podinfo")
	if err := w.ensureServices(ctx, target, "app", "podinfo", nil); err != nil {
		t.Fatal(err)
	}
	apex, _ := cs.CoreV1().Services("test").Get(ctx, "podinfo", metav1.GetOptions{})
	apex.Spec.Selector = ratioSelector(rel)
	if _, err := cs.CoreV1().Services("test").Update(ctx, apex, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.ensureServices(ctx, target, "app", "podinfo", nil); err != nil {
		t.Fatal(err)
	}
	apex, _ = cs.CoreV1().Services("test").Get(ctx, "podinfo", metav1.GetOptions{})
	if !maps.Equal(apex.Spec.Selector, ratioSelector(rel)) {
		t.Errorf("the apex selects %v after reconciling, want %v kept", apex.Spec.Selector, ratioSelector(rel))
	}
	// A user's selector is still put back.
	apex.Spec.Selector = map[string]string{"app": "other"}
	if _, err := cs.CoreV1().Services("test").Update(ctx, apex, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.ensureServices(ctx, target, "app", "podinfo", nil); err != nil {
		t.Fatal(err)
	}
	apex, _ = cs.CoreV1().Services("test").Get(ctx, "podinfo", metav1.GetOptions{})
	if apex.Spec.Selector["app"] != "podinfo-primary" {
		t.Errorf("the apex selects %v after reconciling an edit, want the primary", apex.Spec.Selector)
	}
}

// Blue/green without a mesh is the selector switch it was: no label on any template; a
// StatefulSet is released by partition.
func TestBlueGreenWithoutMeshAddsNoLabel(t *testing.T) {
	rel := testRelease(Analysis{Iterations: 2})
	rel.Provider, rel.Service.SelectorRouted = "kubernetes", true
	w := workload{rel: rel}
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "podinfo"}}}
	w.labelForRatio(&tmpl)
	if _, ok := tmpl.Labels[router.LabelApex]; ok || rel.RatioRouted() {
		t.Errorf("a blue/green release labels its pods for a ratio: %v", tmpl.Labels)
	}
	// A StatefulSet's weights are its partition.
	set := ratioRelease(20)
	set.TargetKind = statefulset.Kind
	if set.RatioRouted() || !ratioRelease(20).RatioRouted() {
		t.Error("RatioRouted is not for a Deployment's weights alone")
	}
}

// A blue/green release switched to weights with its template unchanged settles: the primary is
// written again, now with the apex's label, so that the next rollout's first step finds it.
func TestReplicaRatioSettleLabelsThePrimary(t *testing.T) {
	ctx := context.Background()
	blueGreen := testRelease(Analysis{Iterations: 2})
	blueGreen.Provider, blueGreen.Service.SelectorRouted = "kubernetes", true
	cs := newCluster()
	endpointsFollowReadiness(cs) // the router reads the split back from them
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", 2), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Kube: cs, Router: meshk8s.Driver{}.NewRouter(router.Clients{Kube: cs}, blueGreen.RouterSpec()), HTTP: http.DefaultClient, DrainDelay: time.Millisecond}
	st, err := e.Initialize(ctx, blueGreen, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	if _, ok := deployment(t, cs, "podinfo-primary").Spec.Template.Labels[router.LabelApex]; ok {
		t.Fatal("a blue/green primary carries the apex's label")
	}
	weighted := ratioRelease(20)
	st, err = e.Apply(ctx, weighted, nil, st)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if got := deployment(t, cs, "podinfo-primary").Spec.Template.Labels[router.LabelApex]; got != "podinfo" {
		t.Errorf("after settling as a weighted release the primary's pods carry %s=%q, want podinfo (phase %s)", router.LabelApex, got, st.Phase)
	}
}

// A canary whose step's pods are not Ready within progress_deadline_seconds gets no share: the
// router leaves the apex on the primary, the step fails, and the release rolls back with the
// apex never having selected both sides.
func TestReplicaRatioCanaryNotReadyRollsBack(t *testing.T) {
	ctx := context.Background()
	rel := ratioRelease(20)
	rel.ProgressDeadline = 300 * time.Millisecond
	cs := newCluster()
	endpointsFollowReadiness(cs) // the router reads the split back from them
	if _, err := cs.AppsV1().Deployments("test").Create(ctx, podinfo("podinfo:1", 4), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := &recordingRatioRouter{Router: meshk8s.Driver{}.NewRouter(router.Clients{Kube: cs}, rel.RouterSpec()), cs: cs}
	e := &Engine{Kube: cs, Router: rt, HTTP: http.DefaultClient, DrainDelay: time.Millisecond}
	prior, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	// The router reads the canary by name: at its step's single replica, it never turns Ready.
	cs.PrependReactor("get", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "" || a.(k8stesting.GetAction).GetName() != "podinfo" {
			return false, nil, nil
		}
		obj, err := cs.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("deployments"), "test", "podinfo")
		if err != nil {
			return true, nil, err
		}
		d := obj.(*appsv1.Deployment).DeepCopy()
		if d.Spec.Replicas != nil && *d.Spec.Replicas == 1 {
			d.Status.ReadyReplicas = 0
		}
		return true, d, nil
	})
	target := deployment(t, cs, "podinfo")
	target.Spec.Template.Spec.Containers[0].Image = "podinfo:2"
	if _, err := cs.AppsV1().Deployments("test").Update(ctx, target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	st, err := e.Apply(ctx, rel, nil, prior)
	if err == nil || st.Phase != PhaseFailed || !strings.Contains(err.Error(), "not Ready within progress_deadline_seconds") {
		t.Fatalf("Apply = %s, %v; want Failed, naming the canary's readiness deadline", st.Phase, err)
	}
	for _, s := range rt.steps {
		if maps.Equal(s.selector, ratioSelector(rel)) {
			t.Errorf("the apex selected both sides (%v) although the canary's pod was never Ready", rt.steps)
		}
	}
	if st.CanaryWeight != 0 {
		t.Errorf("recorded canary weight %d, want 0", st.CanaryWeight)
	}
	if got := deployment(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; got != "podinfo:1" {
		t.Errorf("the primary runs %s, want podinfo:1", got)
	}
}
