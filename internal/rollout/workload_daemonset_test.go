package rollout

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/workload/daemonset"
)

// clusterNodes is how many nodes the fake DaemonSet controller runs a pod on.
const clusterNodes = 3

// newDaemonCluster is newCluster whose DaemonSets run a Ready pod on each of clusterNodes
// nodes as soon as they are written, and none while a node selector matches no node.
func newDaemonCluster() *fake.Clientset {
	cs := newCluster()
	gvr := appsv1.SchemeGroupVersion.WithResource("daemonsets")
	for _, verb := range []string{"create", "update"} {
		cs.PrependReactor(verb, "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
			ds, ok := a.(interface{ GetObject() runtime.Object }).GetObject().(*appsv1.DaemonSet)
			if !ok || a.GetSubresource() != "" {
				return false, nil, nil
			}
			ds.Generation = 1
			if old, err := cs.Tracker().Get(gvr, a.GetNamespace(), ds.Name); err == nil {
				o := old.(*appsv1.DaemonSet)
				ds.Generation = o.Generation
				if !equality.Semantic.DeepEqual(o.Spec, ds.Spec) {
					ds.Generation++
				}
			}
			n := int32(clusterNodes)
			ready := n
			if ds.Spec.Template.Annotations["unready"] == "true" {
				ready = 0 // its pods run, and never pass their readiness probe
			}
			for k, v := range ds.Spec.Template.Spec.NodeSelector {
				if k != "disk" || v != "ssd" {
					n = 0 // the nodes carry disk=ssd and nothing else
				}
			}
			ds.Status = appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, DesiredNumberScheduled: n, CurrentNumberScheduled: n,
				UpdatedNumberScheduled: n, NumberReady: min(n, ready), NumberAvailable: min(n, ready)}
			return false, nil, nil
		})
	}
	return cs
}

func podinfoDaemonSet(image string) *appsv1.DaemonSet {
	labels := map[string]string{"app": "podinfo"}
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test"},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"disk": "ssd"},
					Containers:   []corev1.Container{{Name: "podinfo", Image: image}},
				},
			},
		},
	}
}

func daemonSetRelease(a Analysis) Release {
	rel := testRelease(a)
	rel.TargetKind = daemonset.Kind
	return rel
}

// setupDaemonSet creates the podinfo DaemonSet at podinfo:1, initialises the release and
// switches the target to image.
func setupDaemonSet(t *testing.T, rel Release, q MetricQuerier, image string) (*Engine, *fake.Clientset, *fakeRouter, Status) {
	t.Helper()
	ctx := context.Background()
	cs := newDaemonCluster()
	if _, err := cs.AppsV1().DaemonSets("test").Create(ctx, podinfoDaemonSet("podinfo:1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rt := &fakeRouter{}
	e := &Engine{Kube: cs, Router: rt, Metrics: q, HTTP: http.DefaultClient, DrainDelay: time.Millisecond}
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	if image != "podinfo:1" {
		target := daemonSet(t, cs, "podinfo")
		target.Spec.Template.Spec.Containers[0].Image = image
		if _, err := cs.AppsV1().DaemonSets("test").Update(ctx, target, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rt.history = nil
	return e, cs, rt, st
}

func daemonSet(t *testing.T, cs *fake.Clientset, name string) *appsv1.DaemonSet {
	t.Helper()
	ds, err := cs.AppsV1().DaemonSets("test").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// assertEmptied checks that the canary DaemonSet runs no pod through the node selector that
// matches no node, beside the user's own.
func assertEmptied(t *testing.T, ds *appsv1.DaemonSet) {
	t.Helper()
	if sel := ds.Spec.Template.Spec.NodeSelector; sel[daemonset.NodeSelectorEmptied] != "true" || sel["disk"] != "ssd" {
		t.Errorf("canary DaemonSet node selector = %v, want disk=ssd and %s=true", sel, daemonset.NodeSelectorEmptied)
	}
	if n := ds.Status.DesiredNumberScheduled; n != 0 {
		t.Errorf("canary DaemonSet is scheduled on %d nodes, want none", n)
	}
}

func TestDaemonSetInitializeMakesAPrimaryAndEmptiesTheCanary(t *testing.T) {
	_, cs, rt, st := setupDaemonSet(t, daemonSetRelease(Analysis{StepWeight: 10, MaxWeight: 50}), nil, "podinfo:1")
	primary := daemonSet(t, cs, "podinfo-primary")
	if got := primary.Spec.Template.Labels["app"]; got != "podinfo-primary" {
		t.Errorf("primary pod label app = %q, want podinfo-primary", got)
	}
	if sel := primary.Spec.Template.Spec.NodeSelector; len(sel) != 1 || sel["disk"] != "ssd" {
		t.Errorf("primary node selector = %v, want the target's disk=ssd alone", sel)
	}
	if n := primary.Status.NumberReady; n != clusterNodes {
		t.Errorf("primary Ready pods = %d, want %d", n, clusterNodes)
	}
	if u := primary.Spec.UpdateStrategy.RollingUpdate; primary.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType || u == nil || u.MaxUnavailable.IntValue() != 0 {
		t.Errorf("primary update strategy = %+v, want a rolling update that keeps every Ready pod", primary.Spec.UpdateStrategy)
	}
	assertEmptied(t, daemonSet(t, cs, "podinfo"))
	if w, _ := rt.weights(); w != (router.Weights{Primary: 100}) {
		t.Errorf("weights after Initialize = %+v, want 100/0", w)
	}
	if st.Phase != PhaseInitialized {
		t.Errorf("phase = %s", st.Phase)
	}
	// Deployments are untouched: the release's workloads are DaemonSets.
	if list, _ := cs.AppsV1().Deployments("test").List(context.Background(), metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("the release made %d Deployments", len(list.Items))
	}
}

// The node selector the release injects is not part of the revision: emptying the canary
// is no template change, and an apply after the initialisation has nothing to release.
func TestDaemonSetEmptyingSelectorIsNotARevision(t *testing.T) {
	ds := podinfoDaemonSet("podinfo:1")
	before := TemplateHash(daemonset.View(ds))
	daemonset.SetEmptied(&ds.Spec.Template, true)
	if after := TemplateHash(daemonset.View(ds)); after != before {
		t.Fatalf("the emptied DaemonSet hashes to %s, the running one to %s", after, before)
	}
	rel := daemonSetRelease(Analysis{StepWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	e, _, rt, st := setupDaemonSet(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 100, nil }), "podinfo:1")
	st, err := e.Apply(context.Background(), rel, nil, st)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if _, history := rt.weights(); len(history) != 0 || !strings.Contains(st.Message, "nothing to release") {
		t.Errorf("an unchanged DaemonSet ran a rollout: weights %v, message %q", history, st.Message)
	}
}

func TestDaemonSetHealthyCanaryIsPromoted(t *testing.T) {
	rel := daemonSetRelease(Analysis{StepWeight: 10, MaxWeight: 50, Threshold: 2, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setupDaemonSet(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 99.5, nil }), "podinfo:2")
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if st.Phase != PhaseSucceeded {
		t.Fatalf("phase = %s, want Succeeded", st.Phase)
	}
	w, history := rt.weights()
	if fmt.Sprint(history) != "[10 20 30 40 50 0]" || w != (router.Weights{Primary: 100}) {
		t.Errorf("canary weights = %v, final %+v; want [10 20 30 40 50 0], 100/0", history, w)
	}
	if img := daemonSet(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2", img)
	}
	assertEmptied(t, daemonSet(t, cs, "podinfo"))
	// `kubectl describe daemonset podinfo` tells the story.
	events, _ := cs.CoreV1().Events("test").List(context.Background(), metav1.ListOptions{})
	for _, ev := range events.Items {
		if ev.InvolvedObject.Kind != daemonset.Kind {
			t.Errorf("Event %s is recorded on a %s, want the target DaemonSet", ev.Reason, ev.InvolvedObject.Kind)
		}
	}
	if len(events.Items) == 0 {
		t.Error("no Events recorded")
	}
}

func TestDaemonSetFailingCanaryRollsBackAndNamesTheCheck(t *testing.T) {
	rel := daemonSetRelease(Analysis{StepWeight: 10, MaxWeight: 50, Threshold: 2, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setupDaemonSet(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 50, nil }), "podinfo:2")
	st, err := e.Apply(context.Background(), rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "request-success-rate") {
		t.Fatalf("Apply error = %v, want a *Failure naming request-success-rate", err)
	}
	if st.Phase != PhaseFailed {
		t.Errorf("phase = %s, want Failed", st.Phase)
	}
	if w, history := rt.weights(); w != (router.Weights{Primary: 100}) || fmt.Sprint(history) != "[10 0]" {
		t.Errorf("weights = %+v after %v, want 100/0 after [10 0]", w, history)
	}
	if img := daemonSet(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Errorf("primary image = %s, want podinfo:1 kept", img)
	}
	assertEmptied(t, daemonSet(t, cs, "podinfo"))
}

// Blue/green (iterations) of a DaemonSet: the canary runs on every node for the analysis,
// then is emptied again.
func TestDaemonSetBlueGreenIsPromoted(t *testing.T) {
	rel := daemonSetRelease(Analysis{Iterations: 2, Threshold: 1, Metrics: []Metric{successRate(99)}})
	e, cs, _, prior := setupDaemonSet(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 100, nil }), "podinfo:2")
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply: %v, phase %s", err, st.Phase)
	}
	if img := daemonSet(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2", img)
	}
	assertEmptied(t, daemonSet(t, cs, "podinfo"))
}

// A DaemonSet's readiness is its pods: every node it is scheduled on runs an updated,
// available pod, at the generation it was last written.
func TestDaemonSetReadinessIsItsPods(t *testing.T) {
	ds := podinfoDaemonSet("podinfo:1")
	ds.Generation = 2
	ready := appsv1.DaemonSetStatus{ObservedGeneration: 2, DesiredNumberScheduled: 3, CurrentNumberScheduled: 3, UpdatedNumberScheduled: 3, NumberReady: 3, NumberAvailable: 3}
	for _, c := range []struct {
		name   string
		status func(*appsv1.DaemonSetStatus)
		want   bool
	}{
		{"all pods updated and available", func(*appsv1.DaemonSetStatus) {}, true},
		{"generation not observed", func(s *appsv1.DaemonSetStatus) { s.ObservedGeneration = 1 }, false},
		{"one node runs the old pod", func(s *appsv1.DaemonSetStatus) { s.UpdatedNumberScheduled = 2 }, false},
		{"one updated pod not available", func(s *appsv1.DaemonSetStatus) { s.NumberAvailable, s.NumberReady = 2, 2 }, false},
		{"scheduled on no node", func(s *appsv1.DaemonSetStatus) { *s = appsv1.DaemonSetStatus{ObservedGeneration: 2} }, false},
	} {
		d := ds.DeepCopy()
		d.Status = ready
		c.status(&d.Status)
		if got, msg, _ := kinds.Readiness(daemonset.View(d), 100); got != c.want {
			t.Errorf("%s: ready = %v (%s), want %v", c.name, got, msg, c.want)
		}
	}
	d := ds.DeepCopy()
	d.Status = ready
	if !kinds.HasReadyPods(daemonset.View(d)) {
		t.Errorf("a DaemonSet with Ready pods does not serve")
	}
	daemonset.SetEmptied(&d.Spec.Template, true)
	if kinds.HasReadyPods(daemonset.View(d)) {
		t.Errorf("an emptied DaemonSet serves")
	}
}

// A DaemonSet given as the manifest is applied as a DaemonSet, emptied, and released.
func TestDaemonSetManifestIsReleased(t *testing.T) {
	ctx := context.Background()
	cs := newDaemonCluster()
	rt := &fakeRouter{}
	e := &Engine{Kube: cs, Router: rt, Metrics: querierFunc(func(context.Context, string) (float64, error) { return 100, nil }), DrainDelay: time.Millisecond}
	rel := daemonSetRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
	manifest := func(image string) *appsv1.Deployment {
		ds := podinfoDaemonSet(image)
		ds.Namespace = ""
		return daemonset.View(ds)
	}
	rel.Manifest = manifest("podinfo:1")
	st, err := e.Initialize(ctx, rel, nil)
	if err != nil {
		t.Fatalf("Initialize: %v", err)
	}
	target := daemonSet(t, cs, "podinfo")
	if sel := target.Spec.Template.Spec.NodeSelector; sel[daemonset.NodeSelectorEmptied] != "true" {
		t.Errorf("the manifest's DaemonSet node selector = %v, want it emptied", sel)
	}
	rel.Manifest = manifest("podinfo:2")
	if st, err = e.Apply(ctx, rel, nil, st); err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply: %v, phase %s", err, st.Phase)
	}
	if img := daemonSet(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2", img)
	}
	if _, history := rt.weights(); fmt.Sprint(history) != "[50 0]" {
		t.Errorf("weights = %v, want [50 0]", history)
	}
	if err := e.Delete(ctx, rel, false); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if list, _ := cs.AppsV1().DaemonSets("test").List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Errorf("%d DaemonSets left after the delete of a manifest release", len(list.Items))
	}
}

// The built-in queries of a DaemonSet release select its pods by their DaemonSet.
func TestDaemonSetBuiltinQueriesSelectTheDaemonSet(t *testing.T) {
	for _, provider := range []string{"osm", "linkerd", "istio"} {
		rel := daemonSetRelease(Analysis{StepWeights: []int{50}, Threshold: 1, Metrics: []Metric{successRate(99)}})
		rel.Provider = provider
		var queries []string
		e, _, _, prior := setupDaemonSet(t, rel, querierFunc(func(_ context.Context, q string) (float64, error) {
			queries = append(queries, q)
			return 100, nil
		}), "podinfo:2")
		if _, err := e.Apply(context.Background(), rel, nil, prior); err != nil {
			t.Fatalf("%s: Apply: %v", provider, err)
		}
		if len(queries) == 0 {
			t.Fatalf("%s: no query ran", provider)
		}
		q := queries[0]
		if strings.Contains(q, `"Deployment"`) || strings.Contains(q, "deployment=") {
			t.Errorf("%s: the built-in query of a DaemonSet selects Deployments: %s", provider, q)
		}
		if want := map[string]string{"osm": `destination_kind="DaemonSet",destination_name="podinfo"`, "linkerd": `daemonset=~"podinfo"`,
			"istio": `destination_workload=~"podinfo"`}[provider]; !strings.Contains(q, want) {
			t.Errorf("%s: query %s does not select %s", provider, q, want)
		}
	}
}

// A run killed mid-analysis leaves the canary DaemonSet running with weight: the next apply
// takes the traffic back, empties it, and analyses the template again from the start.
func TestDaemonSetKilledRunIsRolledBackThenAnalysedAgain(t *testing.T) {
	rel := daemonSetRelease(Analysis{StepWeight: 25, MaxWeight: 50, Metrics: []Metric{successRate(99)}})
	e, cs, rt, prior := setupDaemonSet(t, rel, passing(), "podinfo:2")
	killAt(t, e, rt, rel, prior, 25)
	if ds := daemonSet(t, cs, "podinfo"); daemonset.Emptied(ds.Spec.Template) || ds.Status.NumberReady == 0 {
		t.Fatalf("the killed run's canary DaemonSet runs no pods: %+v", ds.Status)
	}
	st, err := e.Apply(context.Background(), rel, nil, prior)
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply after the kill = %s, %v; want Succeeded", st.Phase, err)
	}
	if _, history := rt.weights(); fmt.Sprint(history) != "[0 25 50 0]" {
		t.Errorf("canary weights = %v, want the recovery's 0, then a fresh analysis [25 50] and 0", history)
	}
	if img := daemonSet(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:2" {
		t.Errorf("primary image = %s, want podinfo:2 after its analysis", img)
	}
	assertEmptied(t, daemonSet(t, cs, "podinfo"))
}

// Losing the state ConfigMap after a rollback must not promote the rejected template: the
// primary DaemonSet's annotation says what was promoted.
func TestDaemonSetLostConfigMapNeverPromotesTheRejectedTemplate(t *testing.T) {
	rel := daemonSetRelease(Analysis{StepWeight: 50, Metrics: []Metric{successRate(99)}})
	failing := querierFunc(func(context.Context, string) (float64, error) { return 50, nil })
	e, cs, _, prior := setupDaemonSet(t, rel, failing, "podinfo:2")
	if _, err := e.Apply(context.Background(), rel, nil, prior); err == nil {
		t.Fatal("the failing release went through")
	}
	if err := cs.CoreV1().ConfigMaps("test").Delete(context.Background(), StateConfigMapName("podinfo"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Apply(context.Background(), rel, nil, Status{}); err == nil {
		t.Error("a run without the ConfigMap went through; want the analysis to fail again")
	}
	if img := daemonSet(t, cs, "podinfo-primary").Spec.Template.Spec.Containers[0].Image; img != "podinfo:1" {
		t.Fatalf("primary image = %s, want podinfo:1", img)
	}
	assertEmptied(t, daemonSet(t, cs, "podinfo"))
}

// A destroy with revert hands the traffic back to the target DaemonSet: it runs its pods
// again (the node selector that emptied it is gone) before the apex selects it.
func TestDaemonSetDeleteWithRevertRunsTheTargetAgain(t *testing.T) {
	rel := daemonSetRelease(Analysis{StepWeight: 50})
	e, cs, _, _ := setupDaemonSet(t, rel, nil, "podinfo:1")
	if err := e.Delete(context.Background(), rel, true); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	target := daemonSet(t, cs, "podinfo")
	if sel := target.Spec.Template.Spec.NodeSelector; len(sel) != 1 || sel["disk"] != "ssd" || target.Status.NumberReady != clusterNodes {
		t.Errorf("the reverted target has node selector %v and %d Ready pods, want disk=ssd alone and %d", sel, target.Status.NumberReady, clusterNodes)
	}
	if apex := service(t, cs, "podinfo"); apex.Spec.Selector["app"] != "podinfo" {
		t.Errorf("the apex Service selects %v, want the target's pods", apex.Spec.Selector)
	}
	if _, err := cs.AppsV1().DaemonSets("test").Get(context.Background(), "podinfo-primary", metav1.GetOptions{}); err == nil {
		t.Errorf("the primary DaemonSet is left after the destroy")
	}
}

// A canary DaemonSet whose pods never become Ready gets no traffic: the readiness wait ends
// at progress_deadline_seconds, and the rollback names the DaemonSet.
func TestDaemonSetCanaryNeverReadyGetsNoTraffic(t *testing.T) {
	rel := daemonSetRelease(Analysis{StepWeight: 50, Metrics: []Metric{successRate(99)}})
	rel.ProgressDeadline = 300 * time.Millisecond
	e, cs, rt, prior := setupDaemonSet(t, rel, passing(), "podinfo:1")
	target := daemonSet(t, cs, "podinfo")
	target.Spec.Template.Spec.Containers[0].Image = "podinfo:2"
	target.Spec.Template.Annotations = map[string]string{"unready": "true"}
	if _, err := cs.AppsV1().DaemonSets("test").Update(context.Background(), target, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := e.Apply(context.Background(), rel, nil, prior)
	var f *Failure
	if !errors.As(err, &f) || !strings.Contains(f.Reason, "canary DaemonSet test/podinfo") || !strings.Contains(f.Reason, "DaemonSet test/podinfo not ready after") {
		t.Fatalf("Apply error = %v, want a rollback naming the canary DaemonSet that is not ready", err)
	}
	if _, history := rt.weights(); len(history) > 0 && history[0] > 0 {
		t.Errorf("the unready canary got weights %v", history)
	}
	assertEmptied(t, daemonSet(t, cs, "podinfo"))
}

// What a DaemonSet release tells the user names a DaemonSet, not the Deployment shape the
// engine reads it through: the drift of a changed target and of a lost state ConfigMap.
func TestDaemonSetMessagesNameADaemonSet(t *testing.T) {
	rel := daemonSetRelease(Analysis{StepWeight: 50, Threshold: 1, Metrics: []Metric{successRate(99)}})
	e, cs, _, st := setupDaemonSet(t, rel, passing(), "podinfo:2")
	ctx := context.Background()
	if err := cs.CoreV1().ConfigMaps("test").Delete(ctx, StateConfigMapName(rel.Name), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	drift, err := e.Drift(ctx, rel, st)
	if err != nil {
		t.Fatalf("Drift: %v", err)
	}
	text := strings.Join(drift, "\n")
	for _, want := range []string{"target DaemonSet test/podinfo:", "rebuilds it from the primary DaemonSet"} {
		if !strings.Contains(text, want) {
			t.Errorf("drift does not say %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "Deployment") {
		t.Errorf("a DaemonSet release's drift speaks of a Deployment:\n%s", text)
	}
}
