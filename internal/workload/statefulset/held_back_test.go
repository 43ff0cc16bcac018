package statefulset

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// A promotion whose partition is raised by hand while it rolls, and whose set an autoscaler
// scales up meanwhile, ends only once every pod runs the promoted revision: the pods the
// scale-up adds behind the raised partition start the old one, and the pin lowers the partition
// again (campaign seed 7798: PinPrimary waited for the 4 pods the set had when it wrote partition
// 0, the set scaled to 8 and its partition went back to 2147483647, and the apply succeeded with
// 4 pods, the controller's current revision, still on the old template).
func TestPinPrimaryLowersAPartitionRaisedDuringTheRoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hold, four := HoldPartitionMax, int32(4)
		labels := map[string]string{"app": "web"}
		cs := fake.NewClientset(&appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "test"},
			Spec: appsv1.StatefulSetSpec{Replicas: &four, Selector: &metav1.LabelSelector{MatchLabels: labels},
				UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: &hold}}},
			Status: appsv1.StatefulSetStatus{CurrentRevision: "web-old", UpdateRevision: "web-new"},
		})
		gvr := appsv1.SchemeGroupVersion.WithResource("statefulsets")
		var mu sync.Mutex
		updated := map[int32]bool{}
		raised := false
		// The controller, at each list of the pods: every pod at or above the partition runs
		// the update revision. The first time the pods roll, the user raises the partition back
		// and the autoscaler doubles the set.
		cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
			mu.Lock()
			defer mu.Unlock()
			obj, err := cs.Tracker().Get(gvr, "test", "web")
			if err != nil {
				return true, nil, err
			}
			set := obj.(*appsv1.StatefulSet).DeepCopy()
			for ord := range Replicas(set) {
				if ord >= Partition(set) {
					updated[ord] = true
				}
			}
			if len(updated) > 0 && !raised {
				raised = true
				eight := int32(8)
				set.Spec.Replicas = &eight
				set.Spec.UpdateStrategy.RollingUpdate.Partition = &hold
				if err := cs.Tracker().Update(gvr, set, "test"); err != nil {
					return true, nil, err
				}
			}
			list := &corev1.PodList{}
			for ord := range Replicas(set) {
				revision := "web-old"
				if updated[ord] {
					revision = "web-new"
				}
				list.Items = append(list.Items, corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", ord), Namespace: "test",
						Labels: map[string]string{"app": "web", appsv1.ControllerRevisionHashLabelKey: revision}},
					Status: corev1.PodStatus{Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
				})
			}
			return true, list, nil
		})
		s := New(cs, "test", "web", Options{Deadline: time.Second})
		if err := s.PinPrimary(context.Background(), admitted("web-new")); err != nil {
			t.Fatalf("PinPrimary = %v, want the roll done", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if !raised {
			t.Fatal("the partition was never raised by hand: the test tests nothing")
		}
		for ord := range int32(8) {
			if !updated[ord] {
				t.Errorf("PinPrimary returned with pod web-%d on web-old; want every pod of the scaled set on web-new", ord)
			}
		}
	})
}
