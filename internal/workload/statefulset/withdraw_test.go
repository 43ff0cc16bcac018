package statefulset

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// splitSet is a set of three pods, web-0 on "web-old" and web-1, web-2 on "web-new" (a run
// stopped at 2 of 3 pods), its template making "web-new", its controller's current revision
// current and the revision a release pinned pinned. A deleted pod comes back at once, Ready, on
// the current revision, as the controller recreates a pod below the partition. It returns the
// clientset and the pods deleted, in order.
func splitSet(t *testing.T, current, pinned string) (*fake.Clientset, *[]string) {
	t.Helper()
	three, partition := int32(3), int32(1)
	labels := map[string]string{"app": "web"}
	objects := []runtime.Object{&appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "test", Annotations: map[string]string{AnnotationPinned: pinned}},
		Spec: appsv1.StatefulSetSpec{Replicas: &three, Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: &partition}}},
		Status: appsv1.StatefulSetStatus{CurrentRevision: current, UpdateRevision: "web-new"},
	}}
	pod := func(ord int, revision string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", ord), Namespace: "test",
				Labels: map[string]string{"app": "web", appsv1.ControllerRevisionHashLabelKey: revision}},
			Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
		}
	}
	for ord, revision := range []string{"web-old", "web-new", "web-new"} {
		objects = append(objects, pod(ord, revision))
	}
	cs := fake.NewClientset(objects...)
	var deleted []string
	cs.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.DeleteAction).GetName()
		deleted = append(deleted, name)
		var ord int
		_, _ = fmt.Sscanf(name, "web-%d", &ord)
		return true, nil, cs.Tracker().Update(corev1.SchemeGroupVersion.WithResource("pods"), pod(ord, current), "test")
	})
	return cs, &deleted
}

func podsOn(t *testing.T, cs *fake.Clientset) []string {
	t.Helper()
	var out []string
	for ord := range 3 {
		pod, err := cs.CoreV1().Pods("test").Get(context.Background(), fmt.Sprintf("web-%d", ord), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, pod.Labels[appsv1.ControllerRevisionHashLabelKey])
	}
	return out
}

// No weight gives the pinned revision back the pods a stopped run left on a revision this run
// did not pin as its canary, one at a time from the highest ordinal; the pods of the canary
// this run pinned stay (they go back only by PinPrimary, a rollback's), and so does every pod
// while the controller's current revision is not the pinned one.
func TestNoWeightWithdrawsThePodsOfARevisionNotPinned(t *testing.T) {
	ctx := context.Background()
	cs, deleted := splitSet(t, "web-old", "web-old")
	s := New(cs, "test", "web", Options{Deadline: time.Second})
	if err := s.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"web-2", "web-1"}; !slices.Equal(*deleted, want) {
		t.Errorf("pods deleted %v, want %v", *deleted, want)
	}
	if got := podsOn(t, cs); !slices.Equal(got, []string{"web-old", "web-old", "web-old"}) {
		t.Errorf("pods run %v, want web-old on all three", got)
	}
	if w, err := s.GetRoutes(ctx); err != nil || w != (router.Weights{Primary: 100}) {
		t.Errorf("GetRoutes = %v, %v; want 100/0", w, err)
	}
	set, _ := cs.AppsV1().StatefulSets("test").Get(ctx, "web", metav1.GetOptions{})
	if Partition(set) != HoldPartitionMax {
		t.Errorf("partition %d, want held at %d", Partition(set), HoldPartitionMax)
	}

	cs, deleted = splitSet(t, "web-old", "web-old")
	s = New(cs, "test", "web", Options{Deadline: time.Second})
	if err := s.PinCanary(ctx, "web-new"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil || len(*deleted) > 0 {
		t.Errorf("no weight for the pinned canary = %v, deleted %v; want no pod deleted", err, *deleted)
	}

	cs, deleted = splitSet(t, "web-old", "web-new")
	s = New(cs, "test", "web", Options{Deadline: time.Second})
	if err := s.SetRoutes(ctx, router.Weights{Primary: 100}); err != nil || len(*deleted) > 0 {
		t.Errorf("no weight while the controller's current revision is not the pinned one = %v, deleted %v; want no pod deleted", err, *deleted)
	}
}
