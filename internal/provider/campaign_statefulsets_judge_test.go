package provider

import (
	"context"
	"encoding/json"
	"testing"
	"testing/synctest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// The first initialisation of a StatefulSet release pins the revision it read (v1); an edit of
// the template behind its back, before it holds the set's partition, rolls every pod to v2
// before its record says it is initialised. The judge allows the revision the initialisation
// pinned, as the record names it, not the one the pods run at that write: the run that then
// restores v1 on every pod breaks nothing, and v2, which no initialisation pinned and no
// analysis passed, is not allowed (seed 1876).
func TestCampaignJudgeStatefulSetFirstInitialisationPinsItsRevision(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := statefulSetSchedule(t)
		c := newCampaign(s)
		ctx := context.Background()
		if err := c.setUpCluster(ctx); err != nil {
			t.Fatal(err)
		}
		settle := func() {
			time.Sleep(10 * time.Minute)
			synctest.Wait()
		}
		settle()
		v := c.statefulSetView()
		v1, v1Runs := v.current, v.currentRuns
		if v.onCurrent != statefulSetReplicas || v1Runs == "" {
			t.Fatalf("after the set's creation: %+v, want %d pods on its revision", v, statefulSetReplicas)
		}
		engine := c.server.newProcess("command 1", c.newProcessFaults("command 1", faultPlan{}))
		cms := engine.kube.CoreV1().ConfigMaps(campaignNamespace)
		record := func(st rollout.Status, create bool) {
			t.Helper()
			raw, err := json.Marshal(st)
			if err != nil {
				t.Fatal(err)
			}
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: rollout.StateConfigMapName(campaignRelease), Namespace: campaignNamespace},
				Data: map[string]string{"status.json": string(raw)}}
			if create {
				_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			} else {
				_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		record(rollout.Status{Phase: rollout.PhaseInitializing, Message: "pinning revision " + v1 + " as the primary"}, true)

		v2Template := c.shape.statefulSetObject(revisionSpec{image: "podinfo:v2-good"}).Spec.Template
		if err := c.updateStatefulSet(ctx, func(set *appsv1.StatefulSet) { set.Spec.Template = v2Template }); err != nil {
			t.Fatal(err)
		}
		settle()
		if v = c.statefulSetView(); v.currentRuns != "podinfo:v2-good" || v.onCurrent != statefulSetReplicas {
			t.Fatalf("after the edit behind the release's back: %+v, want every pod on podinfo:v2-good", v)
		}

		record(rollout.Status{Phase: rollout.PhaseInitialized, Initialized: true, LastPromotedSpec: v1, PrimarySpec: v1, LastAppliedSpec: v1}, false)
		if !c.judge.isAllowed(v1Runs) || c.judge.isAllowed("podinfo:v2-good") {
			t.Fatalf("after the first initialisation of %s (%s): allowed %s, want %s and not podinfo:v2-good", v1, v1Runs, c.judge.allowedText(), v1Runs)
		}

		// The run holds the partition, restores v1's template and rolls every pod back to it.
		sets := engine.kube.AppsV1().StatefulSets(campaignNamespace)
		write := func(change func(set *appsv1.StatefulSet)) {
			t.Helper()
			set, err := sets.Get(ctx, campaignTarget, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			change(set)
			if _, err := sets.Update(ctx, set, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			settle()
		}
		partition := func(p int32) func(set *appsv1.StatefulSet) {
			return func(set *appsv1.StatefulSet) {
				set.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: &p}
			}
		}
		write(partition(statefulset.HoldPartitionMax))
		v1Template := c.shape.statefulSetObject(revisionSpec{image: v1Runs}).Spec.Template
		write(func(set *appsv1.StatefulSet) { set.Spec.Template = v1Template })
		write(partition(0))
		if v = c.statefulSetView(); v.currentRuns != v1Runs || v.onCurrent != statefulSetReplicas {
			t.Fatalf("after the run restored %s: %+v, want every pod on %s", v1, v, v1Runs)
		}
		c.judge.mu.Lock()
		defer c.judge.mu.Unlock()
		if len(c.judge.violations) != 0 {
			t.Errorf("the run that restored the revision the first initialisation pinned: violations %v, want none", c.judge.violations)
		}
	})
}

// statefulSetSchedule is the first schedule that releases a StatefulSet.
func statefulSetSchedule(t *testing.T) campaignSchedule {
	t.Helper()
	for seed := int64(1); seed < 1000; seed++ {
		if s := newCampaignSchedule(seed); s.shape.statefulSet {
			return s
		}
	}
	t.Fatal("no StatefulSet schedule")
	return campaignSchedule{}
}
