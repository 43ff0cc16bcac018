package rollout

import (
	"context"
	"errors"
	"testing"
	"time"

	kinds "github.com/canary-release/terraform-provider-canary/internal/workload"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestWaitReadyIgnoresStaleCache: a list served from a lagging watch cache
// (resourceVersion "0") returns the Deployment as it was before the scale-up, with 0
// replicas, which looks ready. waitReady must not believe it.
func TestWaitReadyIgnoresStaleCache(t *testing.T) {
	two, zero := int32(2), int32(0)
	current := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test", Generation: 2},
		Spec:       appsv1.DeploymentSpec{Replicas: &two},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 2, UpdatedReplicas: 2},
	}
	stale := current.DeepCopy()
	stale.Generation, stale.Spec.Replicas = 1, &zero
	stale.Status = appsv1.DeploymentStatus{ObservedGeneration: 1}

	kube := fake.NewClientset(current)
	kube.PrependReactor("list", "deployments", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if l, ok := a.(k8stesting.ListActionImpl); ok && l.ListOptions.ResourceVersion == "0" {
			return true, &appsv1.DeploymentList{Items: []appsv1.Deployment{*stale}}, nil
		}
		return false, nil, nil
	})
	w := workload{kube: kube, rel: Release{Namespace: "test", Target: "podinfo"}}
	err := w.waitReady(context.Background(), "podinfo", 300*time.Millisecond)
	if !errors.Is(err, ErrProgressDeadline) {
		t.Fatalf("waitReady on a Deployment with 0 of 2 replicas available returned %v, want %v", err, ErrProgressDeadline)
	}
}

// TestCanaryWatchIgnoresCopiesOlderThanTheScaleUp: the canary is watched from before its
// scale-up, so the watch holds the Deployment as it was before the write, with 0 replicas,
// which looks ready. Only a copy of a later generation may count.
func TestCanaryWatchIgnoresCopiesOlderThanTheScaleUp(t *testing.T) {
	zero, two := int32(0), int32(2)
	scaledDown := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: "test", Generation: 3},
		Spec:       appsv1.DeploymentSpec{Replicas: &zero},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 3},
	}
	if ready, _, _ := kinds.Readiness(scaledDown, 100); !ready {
		t.Fatal("the test needs a scaled-down copy that readiness alone accepts")
	}
	kube := fake.NewClientset(scaledDown)
	w := workload{kube: kube, rel: Release{Namespace: "test", Target: "podinfo"}}
	ctx := context.Background()
	c := w.followCanary(ctx, "podinfo", TemplateHash(scaledDown), nil)
	defer c.Stop()
	before, err := c.scaledDown(ctx, time.Second)
	if err != nil || before.Generation != 3 {
		t.Fatalf("scaledDown = %v, %v", before, err)
	}
	if err := c.readyAfter(ctx, before.Generation, 300*time.Millisecond); !errors.Is(err, ErrProgressDeadline) {
		t.Fatalf("readyAfter with only the copy from before the scale-up = %v, want %v", err, ErrProgressDeadline)
	}

	scaledUp := scaledDown.DeepCopy()
	scaledUp.Generation, scaledUp.Spec.Replicas = 4, &two
	scaledUp.Status = appsv1.DeploymentStatus{ObservedGeneration: 4, Replicas: 2, UpdatedReplicas: 2, ReadyReplicas: 2, AvailableReplicas: 2}
	go func() {
		time.Sleep(50 * time.Millisecond)
		_, _ = kube.AppsV1().Deployments("test").Update(ctx, scaledUp, metav1.UpdateOptions{})
	}()
	if err := c.readyAfter(ctx, before.Generation, 5*time.Second); err != nil {
		t.Fatalf("readyAfter with the scaled-up copy: %v", err)
	}
	if !c.serving() {
		t.Error("the watch does not report the Ready canary as serving")
	}
}

// A wait that starts from the copy this run's write returned costs no list: it judges that
// copy (here, not yet observed by the controller) and watches from its resourceVersion.
func TestWaitReadyFromTheWrittenCopyDoesNotList(t *testing.T) {
	two := int32(2)
	written := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo-primary", Namespace: "test", Generation: 4, ResourceVersion: "41"},
		Spec:       appsv1.DeploymentSpec{Replicas: &two},
		Status:     appsv1.DeploymentStatus{ObservedGeneration: 3, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2},
	}
	kube := fake.NewClientset(written)
	lists := 0
	kube.PrependReactor("list", "deployments", func(k8stesting.Action) (bool, runtime.Object, error) {
		lists++
		return false, nil, nil
	})
	watchedFrom := make(chan string, 1)
	kube.PrependWatchReactor("deployments", func(a k8stesting.Action) (bool, watch.Interface, error) {
		watchedFrom <- a.(k8stesting.WatchActionImpl).WatchRestrictions.ResourceVersion
		return false, nil, nil
	})
	w := workload{kube: kube, rel: Release{Namespace: "test", Target: "podinfo"}}
	go func() {
		<-watchedFrom
		ready := written.DeepCopy()
		ready.Status.ObservedGeneration = 4
		_, _ = kube.AppsV1().Deployments("test").UpdateStatus(context.Background(), ready, metav1.UpdateOptions{})
	}()
	if err := w.waitReadyFrom(context.Background(), "podinfo-primary", 5*time.Second, written); err != nil {
		t.Fatalf("waitReadyFrom: %v", err)
	}
	if lists != 0 {
		t.Errorf("%d lists, want none: the wait starts from the written copy", lists)
	}
}
