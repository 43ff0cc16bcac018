package meshsim

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A DaemonSet's pod is labelled with its DaemonSet, as a mesh labels it (OSM's
// destination_kind and destination_name, Istio's destination_workload): the built-in queries
// of a DaemonSet release select it by name, as they select a Deployment's pods.
func TestDaemonSetPodsAreNamedByTheirDaemonSet(t *testing.T) {
	controller := true
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "podinfo-x7k2q", Namespace: "test",
		OwnerReferences: []metav1.OwnerReference{{Kind: "DaemonSet", Name: "podinfo", Controller: &controller}}}}
	p := (&Simulator{}).podInfo(statefulSetView(t, 0, 0), pod)
	if p.workloadKind != "DaemonSet" || p.workload != "podinfo" {
		t.Fatalf("a DaemonSet's pod is labelled %s %s, want DaemonSet podinfo", p.workloadKind, p.workload)
	}
	if got := osmValues(&route{}, p); got[5] != "DaemonSet" || got[6] != "podinfo" {
		t.Errorf("OSM labels its requests destination_kind=%s destination_name=%s, want DaemonSet podinfo", got[5], got[6])
	}
}
