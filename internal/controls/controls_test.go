package controls

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A control names the field manager that set it and when, from the ConfigMap's managedFields;
// annotations that are no control are left out.
func TestControlsName(t *testing.T) {
	at := time.Date(2026, 12, 4, 1, 2, 3, 0, time.UTC)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{Pause: "true", "other": "x"},
		ManagedFields: []metav1.ManagedFieldsEntry{
			{Manager: "terraform-provider-canary", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{}}`)}},
			{Manager: "kubectl-annotate", Time: &metav1.Time{Time: at}, FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{"f:canary-release.dev/pause":{}}}}`)}},
		}}}
	set := Of(cm)
	if len(set) != 1 || set[Pause].By() != "canary-release.dev/pause=true (set by kubectl-annotate at 2026-12-04T01:02:03Z)" {
		t.Errorf("controls = %+v", set)
	}
}
