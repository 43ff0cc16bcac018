package workload

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The shape of a release's workloads in the Deployment-shaped view: the target's identity
// label, and the primary copy that the engine promotes into.

// selectorLabels are the labels Flagger accepts as the workload's identity, in order.
var selectorLabels = []string{"app", "name", "app.kubernetes.io/name"}

// Selector returns the identity label of a release's target, e.g. app=podinfo.
func Selector(d *appsv1.Deployment) (string, string, error) {
	if d.Spec.Selector != nil {
		for _, k := range selectorLabels {
			if v, ok := d.Spec.Selector.MatchLabels[k]; ok {
				return k, v, nil
			}
		}
	}
	return "", "", fmt.Errorf("the spec.selector.matchLabels of Deployment %s/%s must contain one of %v", d.Namespace, d.Name, selectorLabels)
}

// Primary is the "-primary" copy of target that a release runs: named and labelled by meta,
// with replicas pods of tmpl, selected by selector. It keeps what the target says of how its
// pods start (minReadySeconds, progressDeadlineSeconds, revisionHistoryLimit), and rolls
// without losing Ready pods (primaryStrategy).
func Primary(target *appsv1.Deployment, meta metav1.ObjectMeta, replicas int32, selector map[string]string, tmpl corev1.PodTemplateSpec) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: meta,
		Spec: appsv1.DeploymentSpec{
			Replicas:                &replicas,
			Selector:                &metav1.LabelSelector{MatchLabels: selector},
			Template:                tmpl,
			Strategy:                primaryStrategy(target.Spec.Strategy),
			MinReadySeconds:         target.Spec.MinReadySeconds,
			RevisionHistoryLimit:    target.Spec.RevisionHistoryLimit,
			ProgressDeadlineSeconds: target.Spec.ProgressDeadlineSeconds,
		},
	}
}

// primaryStrategy rolls the primary without ever going below its Ready replicas. The primary
// keeps its share of traffic while it rolls to a promoted template, so the target's Recreate,
// or a maxUnavailable above zero, would leave that share without Ready pods for a moment.
// The target's maxSurge is kept when it allows a rollout at all.
func primaryStrategy(s appsv1.DeploymentStrategy) appsv1.DeploymentStrategy {
	surge := intstr.FromString("25%")
	if s.Type != appsv1.RecreateDeploymentStrategyType && s.RollingUpdate != nil && s.RollingUpdate.MaxSurge != nil {
		if n, err := intstr.GetScaledValueFromIntOrPercent(s.RollingUpdate.MaxSurge, 100, true); err == nil && n > 0 {
			surge = *s.RollingUpdate.MaxSurge
		}
	}
	unavailable := intstr.FromInt32(0)
	return appsv1.DeploymentStrategy{
		Type:          appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &unavailable, MaxSurge: &surge},
	}
}

// SelectorKey is the identity label of a primary that Primary built.
func SelectorKey(primary *appsv1.Deployment) string {
	for k := range primary.Spec.Selector.MatchLabels {
		return k
	}
	return ""
}
