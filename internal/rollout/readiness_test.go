package rollout

import (
	"context"
	"errors"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
