package main

import (
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
)

// podinfoDeployment is the Deployment the release's manifest describes, for Flagger's side.
func podinfoDeployment(ns string, replicas int, tag string) *appsv1.Deployment {
	labels := map[string]string{"app": "podinfo"}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To(int32(replicas)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name:  "podinfo",
					Image: podinfoImage + tag,
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9898}},
				}}},
			},
		},
	}
}

// flaggerCanary is spec as a Flagger Canary: the same analysis, checks and webhook as the
// canary_release the bench renders from it.
func flaggerCanary(ns string, spec releaseSpec) *unstructured.Unstructured {
	analysis := map[string]any{
		"interval":   spec.Interval,
		"threshold":  int64(spec.Threshold),
		"maxWeight":  int64(spec.MaxWeight),
		"stepWeight": int64(spec.StepWeight),
	}
	if spec.Metrics {
		analysis["metrics"] = []any{
			map[string]any{"name": "request-success-rate", "interval": "30s", "thresholdRange": map[string]any{"min": int64(99)}},
			map[string]any{"name": "request-duration", "interval": "30s", "thresholdRange": map[string]any{"max": int64(500)}},
		}
	}
	if spec.WebhookURL != "" {
		analysis["webhooks"] = []any{map[string]any{"name": "load-test", "type": "rollout", "url": spec.WebhookURL, "timeout": "5s"}}
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "flagger.app/v1beta1",
		"kind":       "Canary",
		"metadata":   map[string]any{"name": "podinfo", "namespace": ns},
		"spec": map[string]any{
			"provider":  "osm",
			"targetRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "podinfo"},
			"service":   map[string]any{"port": int64(9898)},
			"analysis":  analysis,
		},
	}}
}

// canaryPhase reads status.phase of a Canary.
func canaryPhase(u *unstructured.Unstructured) string {
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	return phase
}
