package meshsim

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// statefulSetView holds n pods of StatefulSet web, the first updated of them on revision
// "new", the others on "old".
func statefulSetView(t *testing.T, n, updated int) *view {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	controller := true
	for i := range n {
		rev := "old"
		if i >= n-updated {
			rev = "new"
		}
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-%d", i), Namespace: "test",
			Labels:          map[string]string{revisionHashKey: rev},
			OwnerReferences: []metav1.OwnerReference{{Kind: "StatefulSet", Name: "web", Controller: &controller}}}}
		if err := idx.Add(pod); err != nil {
			t.Fatal(err)
		}
	}
	return &view{pods: corelisters.NewPodLister(idx)}
}

func TestPartitionViolation(t *testing.T) {
	s := &Simulator{}
	for _, c := range []struct {
		name      string
		updated   int
		rec       releaseRecord
		violation bool
	}{
		{"first step, one pod", 1, releaseRecord{Phase: "Progressing", CanaryWeight: 20, LastPromoted: "old", Target: "web"}, false},
		{"two pods at the first step", 2, releaseRecord{Phase: "Progressing", CanaryWeight: 20, LastPromoted: "old", Target: "web"}, true},
		{"second step", 2, releaseRecord{Phase: "Progressing", CanaryWeight: 40, LastPromoted: "old", Target: "web"}, false},
		{"promotion of the passed revision", 5, releaseRecord{Phase: "Promoting", CanaryWeight: 60, LastPromoted: "old", Passed: "new", Target: "web"}, false},
		{"settled release with an unanalysed pod", 1, releaseRecord{Phase: "Succeeded", LastPromoted: "old", Target: "web"}, true},
	} {
		got := s.partitionViolation(statefulSetView(t, 5, c.updated), "test", c.rec)
		if (got != "") != c.violation || (c.violation && !strings.Contains(got, "has not passed analysis")) {
			t.Errorf("%s: violation %q, want one: %v", c.name, got, c.violation)
		}
	}
}
