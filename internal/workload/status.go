package workload

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
)

// How a workload stands, read from its Deployment-shaped view (API): every kind's driver
// fills the view's status so that these rules hold for it, and the engine asks them rather
// than reading the status itself.

// Readiness is Flagger's deployment readiness rule: threshold percent of the updated replicas
// available, but never none. fatal is set when waiting longer is useless.
func Readiness(d *appsv1.Deployment, threshold int) (ready bool, msg string, fatal bool) {
	if d.Generation > d.Status.ObservedGeneration {
		return false, "observed deployment generation less than desired", false
	}
	for _, c := range d.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return false, fmt.Sprintf("Deployment %s exceeded its progress deadline", d.Name), true
		}
	}
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	switch {
	case d.Status.UpdatedReplicas < want:
		return false, fmt.Sprintf("%d out of %d new replicas have been updated", d.Status.UpdatedReplicas, want), false
	case d.Status.Replicas > d.Status.UpdatedReplicas:
		return false, fmt.Sprintf("%d old replicas are pending termination", d.Status.Replicas-d.Status.UpdatedReplicas), false
	case d.Status.TerminatingReplicas != nil && *d.Status.TerminatingReplicas > 0:
		return false, fmt.Sprintf("%d replicas are terminating", *d.Status.TerminatingReplicas), false
	case d.Status.AvailableReplicas < readyNeeded(d.Status.UpdatedReplicas, threshold):
		return false, fmt.Sprintf("%d of %d updated replicas are available, %d needed (%d%%)", d.Status.AvailableReplicas, d.Status.UpdatedReplicas,
			readyNeeded(d.Status.UpdatedReplicas, threshold), threshold), false
	}
	return true, "", false
}

// readyNeeded is how many of the updated replicas must be available. A side that may get
// traffic always needs one, whatever the threshold.
func readyNeeded(updated int32, threshold int) int32 {
	if threshold <= 0 || threshold > 100 {
		threshold = 100
	}
	return max(int32(float64(updated)*float64(threshold)/100), min(updated, 1))
}

// ScaledDown reports that a Deployment has no pods left of a scale to zero, or that its spec
// asks for replicas (then there is no scale-down to wait for).
func ScaledDown(d *appsv1.Deployment) bool {
	if d.Spec.Replicas == nil || *d.Spec.Replicas > 0 {
		return true
	}
	terminating := d.Status.TerminatingReplicas != nil && *d.Status.TerminatingReplicas > 0
	return d.Status.ObservedGeneration >= d.Generation && d.Status.Replicas == 0 && !terminating
}

// HasReadyPods reports whether the Deployment has a Ready pod of its current spec.
func HasReadyPods(d *appsv1.Deployment) bool {
	return d != nil && d.Status.ReadyReplicas > 0 && (d.Spec.Replicas == nil || *d.Spec.Replicas > 0)
}
