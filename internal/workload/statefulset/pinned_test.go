package statefulset

import (
	"context"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// TestPinnedAfterAnUnheldRoll: a run stopped while PinPrimary's roll had the partition at 0,
// and the user's next template rolled every pod onto a revision no release pinned (seeds
// 1003266, 1006372, 1007577). The set's current revision is then that unanalysed one; the
// revision the release pinned is the annotation's. During a promotion's roll (the template
// makes the annotation's revision) and between releases the current revision stays the answer.
func TestPinnedAfterAnUnheldRoll(t *testing.T) {
	for _, c := range []struct {
		name                    string
		annotation              string
		partition               int32
		current, update, pinned string
	}{
		{"rolled behind a lowered partition", "web-a", 0, "web-b", "web-b", "web-a"},
		{"rolling behind a lowered partition", "web-a", 0, "web-a", "web-b", "web-a"},
		{"a promotion's roll", "web-b", 0, "web-a", "web-b", "web-a"},
		{"held between releases", "web-a", HoldPartitionMax, "web-a", "web-a", "web-a"},
		{"a template waiting behind the hold", "web-a", HoldPartitionMax, "web-a", "web-b", "web-a"},
		{"not held", "", 0, "web-a", "web-a", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			partition := c.partition
			set := &appsv1.StatefulSet{
				ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "test"},
				Spec: appsv1.StatefulSetSpec{UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
					RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: &partition}}},
				Status: appsv1.StatefulSetStatus{CurrentRevision: c.current, UpdateRevision: c.update},
			}
			if c.annotation != "" {
				set.Annotations = map[string]string{AnnotationPinned: c.annotation}
			}
			got, err := New(fake.NewClientset(set), "test", "web", Options{}).Pinned(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if got != c.pinned {
				t.Errorf("Pinned() = %q, want %q", got, c.pinned)
			}
		})
	}
}
