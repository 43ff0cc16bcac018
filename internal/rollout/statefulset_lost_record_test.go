package rollout

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/canary-release/terraform-provider-canary/internal/mesh"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/workload/statefulset"
)

// A StatefulSet release whose first initialisation pinned a revision (the set held, its pods on
// that revision) is not initialised for the first time again when its record is gone or cannot
// be verified (campaign seeds 4763 and 5092: the state ConfigMap deleted, then a create or an
// update with a new template rolled it onto every pod as a "first initialisation"), nor while a
// step has lowered the partition (a run stopped with a pod on its canary; seed 3735). Without a
// record, the revision the set shows was pinned is the last promoted one and the template
// pending behind the partition goes through the analysis; an unverifiable record of a first
// initialisation is refused, as for a Deployment, since the set shows the release got further.
func TestStatefulSetLostRecordIsNoFirstInitialisation(t *testing.T) {
	type lossCase struct {
		name string
		// lose takes the record away, or makes it one that cannot be verified.
		lose func(t *testing.T, cs *fake.Clientset)
		// refused: the run refuses and writes no partition; else it analyses and rolls back.
		refused bool
		// midRun: a run left one pod on the pending template (its first step) before the loss.
		midRun bool
	}
	var cases []lossCase
	for _, c := range []lossCase{
		{name: "state ConfigMap deleted", lose: func(t *testing.T, cs *fake.Clientset) {
			if err := cs.CoreV1().ConfigMaps("test").Delete(context.Background(), StateConfigMapName("web"), metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "an unverifiable record of an unfinished first initialisation", refused: true, lose: func(t *testing.T, cs *fake.Clientset) {
			ctx := context.Background()
			cm, err := cs.CoreV1().ConfigMaps("test").Get(ctx, StateConfigMapName("web"), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			first, _ := json.Marshal(Status{Phase: PhaseInitializing, Target: "web", Message: "pinning revision as the primary"})
			cm.Data[stateKeyStatus] = string(first)
			if _, err := cs.CoreV1().ConfigMaps("test").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		mid := c
		mid.name, mid.midRun = c.name+", a step left a pod on the canary", true
		cases = append(cases, c, mid)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			rel := statefulSetRelease(Analysis{StepWeight: 20, MaxWeight: 60, Threshold: 1})
			var q MetricQuerier
			e, cs, f, _ := initStatefulSet(t, rel, querierFunc(func(ctx context.Context, s string) (float64, error) { return q.Query(ctx, s) }))
			q = badRevisionQuerier(t, cs, "web:bad")
			setStatefulSetImage(t, cs, "web:bad")
			bad := updateRevision(t, cs)
			if c.midRun {
				e.bindTarget(rel)
				set := e.Owned.(mesh.InPlace)
				if err := set.PinCanary(ctx, bad); err != nil {
					t.Fatal(err)
				}
				if err := set.SetRoutes(ctx, router.Weights{Primary: 80, Canary: 20}); err != nil {
					t.Fatal(err)
				}
			}
			c.lose(t, cs)
			before := len(f.written())
			// A create after terraform state rm: no Terraform state, and a key of its own.
			rel.Seal = &Seal{Key: []byte(strings.Repeat("k", 32))}
			st, err := e.Initialize(ctx, rel, nil)
			var failure *Failure
			switch {
			case c.refused && (!errors.As(err, &failure) || !strings.Contains(err.Error(), "which never passed analysis, so it is not made the primary")):
				t.Errorf("Initialize = %s, %v; want a refusal to make the pending template the primary", st.Phase, err)
			case c.refused && len(f.written()) > before:
				t.Errorf("partitions written = %v, want none after the %d before the refusal", f.written(), before)
			case !c.refused && (!errors.As(err, &failure) || st.Phase != PhaseFailed):
				t.Errorf("Initialize = %s, %v; want the bad template analysed and rolled back", st.Phase, err)
			}
			if n := f.most(bad); n > 1 {
				t.Errorf("%d pods ran the unanalysed revision at once, want at most 1 (the first step, 20%% of 5)", n)
			}
			if got := fmt.Sprint(f.written()); strings.Contains(got, " 0 ") || strings.HasSuffix(got, " 0]") {
				t.Errorf("partitions written = %s: a partition of 0 rolled every pod", got)
			}
			if c.refused {
				return
			}
			if got := podImages(t, cs, 5); strings.Join(got, ",") != "web:1,web:1,web:1,web:1,web:1" {
				t.Errorf("pods run %v, want web:1, the pinned revision, on all five", got)
			}
			set, err := cs.AppsV1().StatefulSets("test").Get(ctx, "web", metav1.GetOptions{})
			if err != nil || statefulset.Partition(set) != statefulset.HoldPartitionMax {
				t.Errorf("after the rollback the set's partition is %v (%v), want it held at %d", statefulset.Partition(set), err, statefulset.HoldPartitionMax)
			}
		})
	}
}
