package rollout

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// A run killed at its second step, with 2 of 3 pods on the revision under analysis: the next
// apply's recovery gives the pinned revision back every pod before it analyses the revision
// again from its first step, as a Deployment's recovery scales the canary to zero. Before,
// raising the partition left both pods on the revision: the new analysis's first step (1 pod)
// had 2, no check counted, and a good revision was rolled back at progress_deadline_seconds
// (make chaos's statefulset schedules, seed 3324041952612016637).
func TestStatefulSetKilledMidAnalysisIsAnalysedAgainFromItsFirstPod(t *testing.T) {
	t.Run("record kept", func(t *testing.T) { killedMidAnalysisIsAnalysedAgain(t, false) })
	// The state ConfigMap deleted as well (make chaos's statefulset schedules, seed
	// 17498887759687839168): the record rebuilt from the set says nothing runs, and the live
	// pods are what the recovery reads.
	t.Run("record lost", func(t *testing.T) { killedMidAnalysisIsAnalysedAgain(t, true) })
}

func killedMidAnalysisIsAnalysedAgain(t *testing.T, lostRecord bool) {
	rel := statefulSetRelease(Analysis{StepWeight: 34, MaxWeight: 68, Threshold: 1})
	ctx := context.Background()
	cs, _ := newStatefulSetCluster(t)
	if _, err := cs.AppsV1().StatefulSets("test").Create(ctx, webSet("web:1", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Kube: cs, Metrics: passing()}
	initialised, err := e.Initialize(ctx, rel, nil)
	if err != nil || initialised.Phase != PhaseInitialized {
		t.Fatalf("Initialize = %s, %v", initialised.Phase, err)
	}
	setStatefulSetImage(t, cs, "web:2")
	candidate := updateRevision(t, cs)

	// The killed run: its record at the second step (68%: 2 of 3 pods), written ahead of the
	// partition that gave the revision its second pod; then nothing more.
	prior := recorded2(t, e, "web")
	e.bindTarget(rel)
	r := e.newRun(rel, prior, nil)
	r.st.LastAppliedSpec, r.st.CanarySpec, r.st.Step, r.st.CanaryWeight = candidate, candidate, 1, 68
	if err := r.record(ctx, PhaseProgressing, normalEvent, "killed at the second step"); err != nil {
		t.Fatal(err)
	}
	set, err := cs.AppsV1().StatefulSets("test").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	set.Spec.UpdateStrategy.RollingUpdate.Partition = ptr[int32](1)
	if _, err := cs.AppsV1().StatefulSets("test").Update(ctx, set, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := podImages(t, cs, 3); strings.Join(got, ",") != "web:1,web:2,web:2" {
		t.Fatalf("the killed run left pods on %v, want web:1,web:2,web:2", got)
	}
	prior = recorded2(t, e, "web")
	if lostRecord {
		if err := cs.CoreV1().ConfigMaps("test").Delete(ctx, StateConfigMapName("web"), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		prior = initialised // the killed apply saved no Terraform state
	}

	// The simulator's clause 2, at every read of the set or its pods: no more pods on a
	// revision that has not passed analysis than the recorded step allows.
	var mu sync.Mutex
	var over []string
	tr := cs.Tracker()
	check := func() {
		var st Status
		obj, err := tr.Get(corev1.SchemeGroupVersion.WithResource("configmaps"), "test", StateConfigMapName("web"))
		if err != nil {
			return // no record yet to judge against: the lost one is being rebuilt
		}
		_ = json.Unmarshal([]byte(obj.(*corev1.ConfigMap).Data[stateKeyStatus]), &st)
		list, err := tr.List(podGVR, corev1.SchemeGroupVersion.WithKind("Pod"), "test")
		if err != nil {
			return
		}
		pods := list.(*corev1.PodList).Items
		unanalysed := 0
		for _, pod := range pods {
			if rev := pod.Labels[appsv1.ControllerRevisionHashLabelKey]; rev != st.LastPromotedSpec && rev != st.PassedSpec {
				unanalysed++
			}
		}
		allowed := 0
		switch st.Phase {
		case PhaseProgressing, PhaseRollingBack, PhaseWaitingPromotion:
			allowed = max(1, (st.CanaryWeight*len(pods)+99)/100)
		}
		if unanalysed > allowed {
			mu.Lock()
			over = append(over, fmt.Sprintf("%d of %d pods unanalysed in phase %s at %d%%", unanalysed, len(pods), st.Phase, st.CanaryWeight))
			mu.Unlock()
		}
	}
	cs.PrependReactor("*", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if r := a.GetResource().Resource; r == "statefulsets" || r == "pods" {
			check()
		}
		return false, nil, nil
	})

	st, err := e.Apply(ctx, rel, nil, prior)
	check()
	if err != nil || st.Phase != PhaseSucceeded || st.LastPromotedSpec != candidate {
		t.Fatalf("Apply after the kill = %s (promoted %s), %v; want %s promoted", st.Phase, st.LastPromotedSpec, err, candidate)
	}
	if got := podImages(t, cs, 3); strings.Join(got, ",") != "web:2,web:2,web:2" {
		t.Errorf("pods run %v, want web:2 on all three", got)
	}
	set, _ = cs.AppsV1().StatefulSets("test").Get(ctx, "web", metav1.GetOptions{})
	if statefulset.Partition(set) != statefulset.HoldPartitionMax {
		t.Errorf("after the promotion the partition is %d, want held at %d", statefulset.Partition(set), statefulset.HoldPartitionMax)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(over) > 0 {
		t.Errorf("more pods on the revision under analysis than its step allows: %v", over[:min(len(over), 5)])
	}
}

// A run that stopped in RollingBack because its canary's pods were not Ready (no analysis
// failed, so no rejection): the next apply takes the pods back to the pinned revision and
// analyses the template the user applies again from its first step, as a Deployment's
// recovery does, instead of restoring the last promoted template over the user's (make chaos
// statefulset seed 16910610146578515558: a good template could not be released again).
func TestStatefulSetStoppedRollbackIsAnalysedAgain(t *testing.T) {
	rel := statefulSetRelease(Analysis{StepWeight: 34, MaxWeight: 68, Threshold: 1})
	ctx := context.Background()
	cs, _ := newStatefulSetCluster(t)
	if _, err := cs.AppsV1().StatefulSets("test").Create(ctx, webSet("web:1", 3), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e := &Engine{Kube: cs, Metrics: passing()}
	if _, err := e.Initialize(ctx, rel, nil); err != nil {
		t.Fatal(err)
	}
	setStatefulSetImage(t, cs, "web:2")
	candidate := updateRevision(t, cs)
	prior := recorded2(t, e, "web")
	e.bindTarget(rel)
	r := e.newRun(rel, prior, nil)
	r.st.LastAppliedSpec, r.st.CanarySpec = candidate, candidate
	if err := r.record(ctx, PhaseRollingBack, warningEvent, "the canary's pods were not Ready within progress_deadline_seconds"); err != nil {
		t.Fatal(err)
	}
	st, err := e.Apply(ctx, rel, nil, recorded2(t, e, "web"))
	if err != nil || st.Phase != PhaseSucceeded || st.LastPromotedSpec != candidate {
		t.Fatalf("Apply after a stopped rollback = %s (promoted %s), %v; want %s analysed again and promoted", st.Phase, st.LastPromotedSpec, err, candidate)
	}
	if got := podImages(t, cs, 3); strings.Join(got, ",") != "web:2,web:2,web:2" {
		t.Errorf("pods run %v, want web:2 on all three", got)
	}
}
