package workload

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Flagger's readiness rule: the threshold of the updated replicas available, never none; a
// progress deadline Kubernetes reports is fatal.
func TestReadiness(t *testing.T) {
	two := int32(2)
	for _, tc := range []struct {
		name      string
		status    appsv1.DeploymentStatus
		gen       int64
		ready     bool
		fatal     bool
		threshold int
	}{
		{"half available at 50%", appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 1}, 1, true, false, 50},
		{"none available at 10%", appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 0}, 1, false, false, 10},
		{"ready", appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}, 1, true, false, 100},
		{"old generation", appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 2}, 2, false, false, 100},
		{"updating", appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 1, AvailableReplicas: 2}, 1, false, false, 100},
		{"unavailable", appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 2, UpdatedReplicas: 2, AvailableReplicas: 1}, 1, false, false, 100},
		{"deadline", appsv1.DeploymentStatus{ObservedGeneration: 1, Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentProgressing, Reason: "ProgressDeadlineExceeded"}}}, 1, false, true, 100},
	} {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: tc.gen}, Spec: appsv1.DeploymentSpec{Replicas: &two}, Status: tc.status}
		ready, _, fatal := Readiness(d, tc.threshold)
		if ready != tc.ready || fatal != tc.fatal {
			t.Errorf("%s: ready=%v fatal=%v, want %v %v", tc.name, ready, fatal, tc.ready, tc.fatal)
		}
	}
}
