package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
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

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"

	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// fakeStatefulSets plays kube-controller-manager's StatefulSet controller on a fake clientset:
// whenever the set or its pods are read, it names the template's revision, keeps its
// ControllerRevision, and (re)creates, Ready at once as kwok makes them, every pod whose
// ordinal is at or above the partition on the update revision, the others on the current one.
type fakeStatefulSets struct {
	mu sync.Mutex
	// partitions are the partitions written, in order.
	partitions []int32
	// mostOn is the largest count of pods seen at once on each revision.
	mostOn map[string]int
}

var (
	stsGVR = appsv1.SchemeGroupVersion.WithResource("statefulsets")
	podGVR = corev1.SchemeGroupVersion.WithResource("pods")
	crGVR  = appsv1.SchemeGroupVersion.WithResource("controllerrevisions")
)

func revisionName(set *appsv1.StatefulSet) string {
	raw, _ := json.Marshal(set.Spec.Template)
	h := fnv.New32a()
	_, _ = h.Write(raw)
	return fmt.Sprintf("%s-%08x", set.Name, h.Sum32())
}

func newStatefulSetCluster(t *testing.T) (*fake.Clientset, *fakeStatefulSets) {
	t.Helper()
	cs := fake.NewClientset()
	f := &fakeStatefulSets{mostOn: map[string]int{}}
	tr := cs.Tracker()
	reconcile := func(ns string) {
		list, err := tr.List(stsGVR, appsv1.SchemeGroupVersion.WithKind("StatefulSet"), ns)
		if err != nil {
			return
		}
		for i := range list.(*appsv1.StatefulSetList).Items {
			f.reconcile(t, tr, list.(*appsv1.StatefulSetList).Items[i].DeepCopy())
		}
	}
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		switch {
		case a.GetVerb() == "update" && a.GetResource().Resource == "statefulsets":
			set := a.(k8stesting.UpdateAction).GetObject().(*appsv1.StatefulSet)
			if old, err := tr.Get(stsGVR, set.Namespace, set.Name); err == nil && statefulset.Partition(old.(*appsv1.StatefulSet)) == statefulset.Partition(set) {
				break // a template change, not a partition write
			}
			f.mu.Lock()
			f.partitions = append(f.partitions, statefulset.Partition(set))
			f.mu.Unlock()
		case (a.GetVerb() == "get" || a.GetVerb() == "list") && (a.GetResource().Resource == "statefulsets" || a.GetResource().Resource == "pods"):
			reconcile(a.GetNamespace())
		}
		return false, nil, nil
	})
	return cs, f
}

func (f *fakeStatefulSets) reconcile(t *testing.T, tr k8stesting.ObjectTracker, set *appsv1.StatefulSet) {
	rev := revisionName(set)
	if _, err := tr.Get(crGVR, set.Namespace, rev); err != nil {
		raw, _ := json.Marshal(map[string]any{"spec": map[string]any{"template": set.Spec.Template}})
		_ = tr.Create(crGVR, &appsv1.ControllerRevision{ObjectMeta: metav1.ObjectMeta{Name: rev, Namespace: set.Namespace}, Data: runtime.RawExtension{Raw: raw}}, set.Namespace)
	}
	if set.Status.CurrentRevision == "" {
		set.Status.CurrentRevision = rev
	}
	set.Status.UpdateRevision, set.Status.ObservedGeneration = rev, set.Generation
	n, partition := statefulset.Replicas(set), statefulset.Partition(set)
	on := map[string]int{}
	updated := int32(0)
	for i := range n {
		want := set.Status.CurrentRevision
		if i >= partition {
			want = rev
		}
		name := fmt.Sprintf("%s-%d", set.Name, i)
		if obj, err := tr.Get(podGVR, set.Namespace, name); err == nil {
			have := obj.(*corev1.Pod).Labels[appsv1.ControllerRevisionHashLabelKey]
			if i < partition || have == want {
				on[have]++
				if have == rev {
					updated++
				}
				continue
			}
			_ = tr.Delete(podGVR, set.Namespace, name)
		}
		cr, err := tr.Get(crGVR, set.Namespace, want)
		if err != nil {
			t.Errorf("revision %s of pod %s has no ControllerRevision", want, name)
			continue
		}
		template, err := statefulset.TemplateOfRevision(cr.(*appsv1.ControllerRevision).Data.Raw)
		if err != nil {
			t.Error(err)
			continue
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: set.Namespace, Labels: map[string]string{appsv1.ControllerRevisionHashLabelKey: want}},
			Spec:   template.Spec,
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
		for k, v := range template.Labels {
			pod.Labels[k] = v
		}
		_ = tr.Create(podGVR, pod, set.Namespace)
		on[want]++
		if want == rev {
			updated++
		}
	}
	if updated == n {
		set.Status.CurrentRevision = rev
	}
	set.Status.Replicas, set.Status.ReadyReplicas, set.Status.UpdatedReplicas = n, n, updated
	_ = tr.Update(stsGVR, set, set.Namespace)
	f.mu.Lock()
	for r, c := range on {
		f.mostOn[r] = max(f.mostOn[r], c)
	}
	f.mu.Unlock()
}

func (f *fakeStatefulSets) written() []int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int32(nil), f.partitions...)
}

func (f *fakeStatefulSets) most(revision string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mostOn[revision]
}

func webSet(image string, replicas int32) *appsv1.StatefulSet {
	labels := map[string]string{"app": "web"}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "test"},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, ServiceName: "web", Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: image}}}},
		},
	}
}

func statefulSetRelease(a Analysis) Release {
	if a.Interval == 0 {
		a.Interval = 5 * time.Millisecond
	}
	a.Metrics = []Metric{{Name: mesh.MetricSuccessRate, Min: ptr(99.0)}}
	return Release{Namespace: "test", Name: "web", Provider: "kubernetes", Target: "web", TargetKind: statefulset.Kind,
		Service: Service{Port: 80}, Analysis: a, ProgressDeadline: 5 * time.Second, Seal: testSeal()}
}

func ptr[T any](v T) *T { return &v }

// badRevisionQuerier answers 100 for every revision but the one running image bad.
func badRevisionQuerier(t *testing.T, cs *fake.Clientset, bad string) MetricQuerier {
	return querierFunc(func(ctx context.Context, q string) (float64, error) {
		list, err := cs.AppsV1().ControllerRevisions("test").List(ctx, metav1.ListOptions{})
		if err != nil {
			return 0, err
		}
		for _, cr := range list.Items {
			if tpl, err := statefulset.TemplateOfRevision(cr.Data.Raw); err == nil && tpl.Spec.Containers[0].Image == bad && strings.Contains(q, `controller_revision_hash="`+cr.Name+`"`) {
				return 50, nil
			}
		}
		return 100, nil
	})
}

func setStatefulSetImage(t *testing.T, cs *fake.Clientset, image string) {
	t.Helper()
	ctx := context.Background()
	set, err := cs.AppsV1().StatefulSets("test").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set.Spec.Template.Spec.Containers[0].Image = image
	if _, err := cs.AppsV1().StatefulSets("test").Update(ctx, set, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// podImages are the images the set's pods run, by ordinal.
func podImages(t *testing.T, cs *fake.Clientset, n int) []string {
	t.Helper()
	var out []string
	for i := range n {
		pod, err := cs.CoreV1().Pods("test").Get(context.Background(), fmt.Sprintf("web-%d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pod.Spec.Containers[0].Image)
	}
	return out
}

// initStatefulSet initialises rel on a set "web" of 5 pods running web:1, beside objects.
func initStatefulSet(t *testing.T, rel Release, q MetricQuerier, objects ...runtime.Object) (*Engine, *fake.Clientset, *fakeStatefulSets, []string) {
	t.Helper()
	cs, f := newStatefulSetCluster(t)
	if _, err := cs.AppsV1().StatefulSets("test").Create(context.Background(), webSet("web:1", 5), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, o := range objects {
		if err := cs.Tracker().Add(o); err != nil {
			t.Fatal(err)
		}
	}
	var warnings []string
	e := &Engine{Kube: cs, Metrics: q, Warn: func(summary, detail string) { warnings = append(warnings, summary+": "+detail) }}
	st, err := e.Initialize(context.Background(), rel, nil)
	if err != nil || st.Phase != PhaseInitialized {
		t.Fatalf("Initialize = %s, %v", st.Phase, err)
	}
	return e, cs, f, warnings
}

func TestStatefulSetPromotesByPartition(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Threshold: 1})
	e, cs, f, warnings := initStatefulSet(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 100, nil }))
	if len(warnings) != 1 || !strings.Contains(warnings[0], "partition of StatefulSet test/web to 2147483647") {
		t.Errorf("first apply's warnings = %q, want one that says the partition is held at 2147483647", warnings)
	}
	setStatefulSetImage(t, cs, "web:2")
	st, err := e.Apply(context.Background(), rel, nil, recorded2(t, e, "web"))
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v", st.Phase, err)
	}
	if got := podImages(t, cs, 5); strings.Join(got, ",") != "web:2,web:2,web:2,web:2,web:2" {
		t.Errorf("pods run %v, want web:2 on all five", got)
	}
	// 20, 40, 60 % of 5 pods: 1, 2, 3 updated; then all; then held again.
	want := "[2147483647 4 3 2 0 2147483647]"
	if got := fmt.Sprint(f.written()); got != want {
		t.Errorf("partitions written = %s, want %s", got, want)
	}
}

func TestStatefulSetRollsBackABadRevision(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Threshold: 1})
	var q MetricQuerier
	e, cs, f, _ := initStatefulSet(t, rel, querierFunc(func(ctx context.Context, s string) (float64, error) { return q.Query(ctx, s) }))
	q = badRevisionQuerier(t, cs, "web:bad")
	setStatefulSetImage(t, cs, "web:bad")
	set, _ := cs.AppsV1().StatefulSets("test").Get(context.Background(), "web", metav1.GetOptions{})
	bad := set.Status.UpdateRevision
	st, err := e.Apply(context.Background(), rel, nil, recorded2(t, e, "web"))
	var failure *Failure
	if !errors.As(err, &failure) || st.Phase != PhaseFailed || !strings.Contains(err.Error(), "rolled back") {
		t.Fatalf("Apply = %s, %v; want a rollback", st.Phase, err)
	}
	if got := podImages(t, cs, 5); strings.Join(got, ",") != "web:1,web:1,web:1,web:1,web:1" {
		t.Errorf("pods run %v, want web:1 on all five", got)
	}
	set, _ = cs.AppsV1().StatefulSets("test").Get(context.Background(), "web", metav1.GetOptions{})
	if img := set.Spec.Template.Spec.Containers[0].Image; img != "web:1" || statefulset.Partition(set) != statefulset.HoldPartitionMax {
		t.Errorf("after the rollback the set has template %s and partition %d, want web:1 held at %d", img, statefulset.Partition(set), statefulset.HoldPartitionMax)
	}
	if n := f.most(bad); n != 1 {
		t.Errorf("at most %d pods ran the bad revision, want 1 (the first step, 20%% of 5)", n)
	}
	// The same template again is refused until retry_rejected changes; the plan warns of it.
	setStatefulSetImage(t, cs, "web:bad")
	if j, err := e.Rejection(context.Background(), rel); err != nil || j == nil || j.Revision != bad {
		t.Errorf("Rejection = %+v, %v; want the rejected revision %s, for the plan's warning", j, err, bad)
	}
	if _, err := e.Apply(context.Background(), rel, nil, recorded2(t, e, "web")); err == nil || !strings.Contains(err.Error(), "failed its analysis before") {
		t.Errorf("second Apply of the rejected revision = %v, want a refusal", err)
	}
}

// The traffic gate refuses a split that would put more pods on the revision under analysis
// than the recorded step allows, and any pod for a revision that is not under analysis.
func TestStatefulSetPartitionGate(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60})
	e, cs, f, _ := initStatefulSet(t, rel, nil)
	setStatefulSetImage(t, cs, "web:2")
	candidate := updateRevision(t, cs)
	e.bindTarget(rel)
	r := e.newRun(rel, recorded2(t, e, "web"), nil)
	ctx := context.Background()
	if err := e.Owned.PinCanary(ctx, candidate); err != nil {
		t.Fatal(err)
	}
	split := func(canary int) router.Weights { return router.Weights{Primary: 100 - canary, Canary: canary} }
	if err := r.setSplit(ctx, split(40)); !errors.Is(err, errStepExceeded) {
		t.Errorf("pods for a revision not under analysis = %v, want refused", err)
	}
	r.st.Phase, r.st.CanarySpec, r.st.Step = PhaseProgressing, candidate, 0
	if err := r.setSplit(ctx, split(40)); !errors.Is(err, errStepExceeded) {
		t.Errorf("2 pods at the 20%% step of 5 = %v, want refused", err)
	}
	if err := r.setSplit(ctx, split(20)); err != nil {
		t.Errorf("1 pod at the 20%% step of 5 = %v, want admitted", err)
	}
	if err := r.setSplit(ctx, split(100)); !errors.Is(err, errStepExceeded) {
		t.Errorf("every pod at the 20%% step = %v, want refused", err)
	}
	if got := fmt.Sprint(f.written()); got != "[2147483647 4]" {
		t.Errorf("partitions written = %s, want [2147483647 4]: only the admitted step", got)
	}
}

func recorded2(t *testing.T, e *Engine, name string) Status {
	t.Helper()
	cs, ok, err := LoadState(context.Background(), e.Kube, "test", name)
	if err != nil || !ok {
		t.Fatalf("state ConfigMap: %v, %v", ok, err)
	}
	return cs.Status
}

// A failed check holds the step, as in Flagger: a bad revision with fewer steps than the
// threshold is judged again until the threshold is reached, never promoted.
func TestStatefulSetFailedCheckHoldsTheStep(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 50, MaxWeight: 50, Threshold: 3})
	var q MetricQuerier
	e, cs, _, _ := initStatefulSet(t, rel, querierFunc(func(ctx context.Context, s string) (float64, error) { return q.Query(ctx, s) }))
	q = badRevisionQuerier(t, cs, "web:bad")
	setStatefulSetImage(t, cs, "web:bad")
	st, err := e.Apply(context.Background(), rel, nil, recorded2(t, e, "web"))
	if err == nil || st.Phase != PhaseFailed || st.FailedChecks != 3 {
		t.Fatalf("Apply = %s (failed checks %d), %v; want a rollback after 3 failed checks", st.Phase, st.FailedChecks, err)
	}
	if got := podImages(t, cs, 5); strings.Join(got, ",") != "web:1,web:1,web:1,web:1,web:1" {
		t.Errorf("pods run %v, want web:1 on all five", got)
	}
}

// The set's record is the only place that tells the step reached (the simulator's invariant
// reads it): each partition that gives the revision under analysis more pods is written after
// a record whose canary weight allows them.
func TestStatefulSetRecordsTheStepAheadOfThePods(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Threshold: 1})
	e, cs, _, _ := initStatefulSet(t, rel, querierFunc(func(context.Context, string) (float64, error) { return 100, nil }))
	var mu sync.Mutex
	var behind []string
	cs.PrependReactor("update", "statefulsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		set := a.(k8stesting.UpdateAction).GetObject().(*appsv1.StatefulSet)
		p, n := statefulset.Partition(set), statefulset.Replicas(set)
		if p == 0 || p >= n {
			return false, nil, nil // every pod (a promotion's, with its proof) or none
		}
		var st Status
		if obj, err := cs.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), "test", StateConfigMapName("web")); err == nil {
			_ = json.Unmarshal([]byte(obj.(*corev1.ConfigMap).Data[stateKeyStatus]), &st)
		}
		if allowed := (st.CanaryWeight*int(n) + 99) / 100; int(n-p) > max(1, allowed) {
			mu.Lock()
			behind = append(behind, fmt.Sprintf("partition %d (%d of %d pods) written with the record at %d%%", p, n-p, n, st.CanaryWeight))
			mu.Unlock()
		}
		return false, nil, nil
	})
	setStatefulSetImage(t, cs, "web:2")
	st, err := e.Apply(context.Background(), rel, nil, recorded2(t, e, "web"))
	if err != nil || st.Phase != PhaseSucceeded {
		t.Fatalf("Apply = %s, %v", st.Phase, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(behind) > 0 {
		t.Errorf("pods moved ahead of the record: %v", behind)
	}
}
