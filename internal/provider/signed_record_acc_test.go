package provider

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
)

// Issue 32, hole 5, on the local stack with the real CLI: after podinfo:6.0.1 was rejected,
// its revision written into the record's lastPromotedSpec (and its rejection removed) does not
// promote it: the next apply analyses it, and it fails again; the primary keeps 6.0.0.
func TestAccRelease_rewrittenRecordIsNotTrusted(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	bad := releaseConfig(ns, manifestWorkload("podinfo:6.0.1", "0.5"), healthyAnalysis, "")
	failed := wrappedPattern(`metric request-success-rate returned (4[5-9]|5[0-5])\.\d\d, outside threshold_range \[min 99\] ` +
		`\(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%: 100% of traffic is back on the primary podinfo-primary`)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: releaseConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis, "")},
			{
				PreConfig:   func() { c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "200") },
				Config:      bad,
				ExpectError: failed,
			},
			{
				PreConfig:   func() { c.rewriteRecord(t, ns) },
				Config:      bad,
				ExpectError: failed,
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkSplit(ns, 100, 0),
				),
			},
		},
	})
}

// rewriteRecord makes the release's record say that the revision it rejected was promoted,
// as someone who may edit ConfigMaps could.
func (c *testCluster) rewriteRecord(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	cms := c.kube.CoreV1().ConfigMaps(ns)
	cm, err := cms.Get(ctx, rollout.StateConfigMapName("podinfo"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var st rollout.Status
	if err := json.Unmarshal([]byte(cm.Data["status.json"]), &st); err != nil || st.Rejected == nil {
		t.Fatalf("the record holds no rejection: %v", err)
	}
	st.LastPromotedSpec, st.Rejected = st.Rejected.Revision, nil
	b, _ := json.Marshal(st)
	cm.Data["status.json"] = string(b)
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
}
