package meshsim

import (
	"encoding/json"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// StatefulSets released by partition (target_ref kind "StatefulSet") have no router: the
// share of pods on a revision is the share of the traffic, which the direct clients spread
// over the Ready pods (direct.go), and the application's metrics carry each pod's
// controller-revision-hash (podInfo.revision). The invariant here is the second clause for
// them: at most the reached share of a set's pods runs a revision that has not passed analysis,
// as the release's state ConfigMap records it (written before each step).

// releaseRecord is what the check reads of a release's state ConfigMap.
type releaseRecord struct {
	Phase        string `json:"phase"`
	CanaryWeight int    `json:"canaryWeight"`
	LastPromoted string `json:"lastPromotedSpec"`
	Passed       string `json:"passedSpec"`
	Target       string `json:"target"`
}

const (
	labelRelease    = "canary-release.dev/release"
	stateStatusKey  = "status.json"
	revisionHashKey = "controller-revision-hash"
)

// checkStatefulSets logs every StatefulSet with more pods on an unanalysed revision than
// the step its release has reached allows.
func (s *Simulator) checkStatefulSets(now time.Time, v *view) {
	if v.configMaps == nil {
		return
	}
	sel := labels.SelectorFromSet(nil)
	cms, err := v.configMaps.List(sel)
	if err != nil {
		return
	}
	sort.Slice(cms, func(i, j int) bool { return cms[i].Namespace+"/"+cms[i].Name < cms[j].Namespace+"/"+cms[j].Name })
	for _, cm := range cms {
		if cm.Labels[labelRelease] == "" || cm.Data[stateStatusKey] == "" {
			continue
		}
		var rec releaseRecord
		if json.Unmarshal([]byte(cm.Data[stateStatusKey]), &rec) != nil || rec.Target == "" || rec.LastPromoted == "" {
			continue
		}
		if msg := s.partitionViolation(v, cm.Namespace, rec); msg != "" {
			s.inv.report(now, objectRef{Kind: "StatefulSet", Namespace: cm.Namespace, Name: rec.Target}, msg)
		}
	}
}

// partitionViolation words a breach of the record's step by the set's pods, or returns "".
func (s *Simulator) partitionViolation(v *view, namespace string, rec releaseRecord) string {
	pods, err := v.pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return ""
	}
	var n, unanalysed int
	for _, pod := range pods {
		if !ownedByStatefulSet(pod, rec.Target) || pod.DeletionTimestamp != nil {
			continue
		}
		n++
		if r := pod.Labels[revisionHashKey]; r != rec.LastPromoted && r != rec.Passed {
			unanalysed++
		}
	}
	if n == 0 || unanalysed == 0 {
		return ""
	}
	allowed := 0
	switch rec.Phase {
	case "Initializing":
		return "" // a first initialisation promotes what it finds
	case "Progressing", "RollingBack", "WaitingPromotion":
		allowed = max(1, (rec.CanaryWeight*n+99)/100)
	}
	if unanalysed <= allowed {
		return ""
	}
	return fmt.Sprintf("%d of %d pods run a revision that has not passed analysis (neither %s nor the passed one), beyond the %d of the step reached (%d%%, phase %s)",
		unanalysed, n, rec.LastPromoted, allowed, rec.CanaryWeight, rec.Phase)
}

func ownedByStatefulSet(pod *corev1.Pod, name string) bool {
	owner := metav1.GetControllerOf(pod)
	return owner != nil && owner.Kind == "StatefulSet" && owner.Name == name
}
