package workload

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The primary keeps its Ready replicas while it rolls, whatever the target's strategy says.
func TestPrimaryRollsWithoutLosingReadyReplicas(t *testing.T) {
	for _, s := range []appsv1.DeploymentStrategy{
		{Type: appsv1.RecreateDeploymentStrategyType},
		{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{
			MaxUnavailable: ptrTo(intstr.FromString("100%")), MaxSurge: ptrTo(intstr.FromInt32(0))}},
	} {
		got := primaryStrategy(s)
		if got.Type != appsv1.RollingUpdateDeploymentStrategyType || got.RollingUpdate.MaxUnavailable.IntValue() != 0 ||
			got.RollingUpdate.MaxSurge.String() != "25%" {
			t.Errorf("primary strategy for %+v = %+v, want RollingUpdate with maxUnavailable 0 and maxSurge 25%%", s, got)
		}
	}
	keep := appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType, RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: ptrTo(intstr.FromInt32(3))}}
	if got := primaryStrategy(keep); got.RollingUpdate.MaxSurge.IntValue() != 3 {
		t.Errorf("maxSurge = %s, want the target's 3", got.RollingUpdate.MaxSurge.String())
	}
}

func ptrTo[T any](v T) *T { return &v }
