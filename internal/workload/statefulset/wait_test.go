package statefulset

import (
	"context"
	"fmt"
	"strings"
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

// admitted is a proof that admits one revision (the engine's promotion.Proof, for the driver).
type admitted string

func (a admitted) Revision() string       { return string(a) }
func (a admitted) Admits(rev string) bool { return rev == string(a) }

// rollingSet is a set of replicas pods on revision "web-old" whose template makes "web-new",
// its partition held, on a fake clientset that plays the StatefulSet controller's ordered roll:
// once the partition is lowered, one more pod, from the highest ordinal, runs the new revision
// and is Ready every podEvery, up to stallAt pods (all of them when stallAt is replicas).
func rollingSet(t *testing.T, replicas, stallAt int32, podEvery time.Duration) *fake.Clientset {
	t.Helper()
	hold := HoldPartitionMax
	labels := map[string]string{"app": "web"}
	set := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "test"},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: &hold}}},
		Status: appsv1.StatefulSetStatus{CurrentRevision: "web-old", UpdateRevision: "web-new"},
	}
	cs := fake.NewClientset(set)
	var mu sync.Mutex
	var lowered time.Time
	cs.PrependReactor("update", "statefulsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if Partition(a.(k8stesting.UpdateAction).GetObject().(*appsv1.StatefulSet)) < replicas {
			mu.Lock()
			if lowered.IsZero() {
				lowered = time.Now()
			}
			mu.Unlock()
		}
		return false, nil, nil
	})
	cs.PrependReactor("list", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		rolled := int32(0)
		if !lowered.IsZero() {
			rolled = min(stallAt, int32(time.Since(lowered)/podEvery))
		}
		mu.Unlock()
		list := &corev1.PodList{}
		for ord := range replicas {
			revision := "web-old"
			if ord >= replicas-rolled {
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
	return cs
}

// A promotion rolls the pods one at a time, as the StatefulSet controller does: a roll of 8
// pods, each Ready 600 ms after the one before, takes 4.8 s, longer than a progress deadline of
// 1 s, and still completes, since every pod made progress within it (campaign seed 2745: 8 pods
// Ready 5 s apart never finished their promotion within progress_deadline_seconds of 30 s, and
// a revision that passed its analysis was rolled back). A roll that stops making progress
// still fails within the deadline of its last progress.
func TestPinPrimaryWaitsForProgressNotForAllPodsWithinTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := New(rollingSet(t, 8, 8, 600*time.Millisecond), "test", "web", Options{Deadline: time.Second})
		start := time.Now()
		if err := s.PinPrimary(context.Background(), admitted("web-new")); err != nil {
			t.Errorf("PinPrimary of a roll that makes progress every 600 ms, deadline 1 s = %v, want it done", err)
		}
		if took := time.Since(start); took < 4800*time.Millisecond {
			t.Errorf("PinPrimary returned after %s, before the 8th pod was Ready (4.8 s)", took)
		}
	})
	synctest.Test(t, func(t *testing.T) {
		s := New(rollingSet(t, 8, 3, 600*time.Millisecond), "test", "web", Options{Deadline: time.Second})
		start := time.Now()
		err := s.PinPrimary(context.Background(), admitted("web-new"))
		if err == nil || !strings.Contains(err.Error(), "3 of the 8 pods wanted on revision web-new are Ready") {
			t.Errorf("PinPrimary of a roll stalled at 3 pods = %v, want it failed at the deadline", err)
		}
		if took := time.Since(start); took > 1800*time.Millisecond+time.Second+2*poll {
			t.Errorf("the stalled roll failed after %s, want within the deadline of its last progress (1.8 s + 1 s)", took)
		}
	})
}

// A roll that fails (a pod never Ready within the deadline) leaves the partition held again,
// not lowered: else the next template written onto the set, by its owner or a pipeline,
// rolls every pod onto a revision no analysis saw before any apply runs (make chaos seed
// 16910610146578515558: a rollback's roll stalled on an unready pod, left partition 0, and the
// next template went to 3 of 3 pods).
func TestFailedRollHoldsThePartitionAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := rollingSet(t, 8, 3, 600*time.Millisecond)
		s := New(cs, "test", "web", Options{Deadline: time.Second})
		if err := s.PinPrimary(context.Background(), admitted("web-new")); err == nil {
			t.Fatal("PinPrimary of a roll stalled at 3 pods succeeded")
		}
		set, err := cs.AppsV1().StatefulSets("test").Get(context.Background(), "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := Partition(set); got != HoldPartitionMax {
			t.Errorf("after the failed roll the partition is %d, want it held at %d", got, HoldPartitionMax)
		}
	})
}
