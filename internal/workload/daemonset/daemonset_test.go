package daemonset

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// An emptied DaemonSet reads as zero replicas and its view carries no trace of the selector that
// empties it, so the engine's template hash is the user's; writing the view back empties it
// again and keeps the user's own node selector.
func TestViewRoundTripKeepsTheUsersNodeSelector(t *testing.T) {
	ds := &appsv1.DaemonSet{Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{NodeSelector: map[string]string{"disk": "ssd"}}}}}
	ds.Status.DesiredNumberScheduled = 3
	SetEmptied(&ds.Spec.Template, true)

	v := View(ds)
	if *v.Spec.Replicas != 0 {
		t.Errorf("view of an emptied DaemonSet has %d replicas, want 0", *v.Spec.Replicas)
	}
	if _, ok := v.Spec.Template.Spec.NodeSelector[NodeSelectorEmptied]; ok {
		t.Errorf("view's node selector %v carries %s", v.Spec.Template.Spec.NodeSelector, NodeSelectorEmptied)
	}
	back := Of(v)
	if sel := back.Spec.Template.Spec.NodeSelector; sel[NodeSelectorEmptied] != "true" || sel["disk"] != "ssd" {
		t.Errorf("DaemonSet written from the view has node selector %v, want disk=ssd and %s=true", sel, NodeSelectorEmptied)
	}
	SetEmptied(&back.Spec.Template, false)
	if sel := back.Spec.Template.Spec.NodeSelector; len(sel) != 1 || sel["disk"] != "ssd" {
		t.Errorf("after SetEmptied(false) the node selector is %v, want only disk=ssd", sel)
	}
	if sel := ds.Spec.Template.Spec.NodeSelector; sel[NodeSelectorEmptied] != "true" {
		t.Errorf("View changed the DaemonSet it read: node selector %v", sel)
	}
}
