package provider

import (
	"regexp"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/knownvalue"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"github.com/hashicorp/terraform-plugin-testing/tfjsonpath"
)

// TestAccRelease_rollbackWindow: with rollback_window = { revisions = 1 }, going back to the
// template promoted just before the current one is promoted at once (the plan says so; no
// analysis step, no canary weight), and going back two promotions runs the whole analysis.
func TestAccRelease_rollbackWindow(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	const window = "rollback_window = { revisions = 1 }"
	config := func(image string) string {
		return releaseConfig(ns, manifestWorkload(image, "0"), healthyAnalysis, window)
	}
	var rec *weightRecorder
	record := func() { rec = c.recordWeights(t, ns, "podinfo") }
	analysed := func(s *terraform.State) error { return c.checkWeights(rec, 10, 20, 30, 40, 50, 0)(s) }
	revertPlan := plancheck.ExpectKnownValue(addr, tfjsonpath.New("rollout_plan"),
		knownvalue.StringRegexp(regexp.MustCompile(`^rollback_window: the target returns to revision \S+, which this release promoted 1 promotion\(s\) ago`)))
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: config("podinfo:6.0.0")},
			{
				PreConfig: record,
				Config:    config("podinfo:6.0.1"),
				Check:     resource.ComposeAggregateTestCheckFunc(analysed, c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1")),
			},
			{
				// One promotion back: promoted without analysis.
				PreConfig:        record,
				Config:           config("podinfo:6.0.0"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{revertPlan}},
				Check: resource.ComposeAggregateTestCheckFunc(
					func(s *terraform.State) error { return c.checkWeights(rec)(s) },
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					checkCluster(func() error { return c.checkEvents(ns, "RollbackWindow", "Promoting", "Finalising", "Succeeded") }),
					// The revert moved no traffic to a side without Ready pods (the cleanup
					// checks the whole test again).
					func(*terraform.State) error { c.assertNoViolations(t, ns); return nil },
				),
				ConfigStateChecks: []statecheck.StateCheck{
					statusPhase("Succeeded"),
					statecheck.ExpectKnownValue(addr, tfjsonpath.New("status").AtMapKey("message"), knownvalue.StringRegexp(regexp.MustCompile("Promotion completed"))),
				},
			},
			{
				PreConfig: record,
				Config:    config("podinfo:6.0.2"),
				Check:     resource.ComposeAggregateTestCheckFunc(analysed, c.checkImage(ns, "podinfo-primary", "podinfo:6.0.2")),
			},
			{
				// podinfo:6.0.1 is two promotions back, outside a window of 1: analysed.
				PreConfig: record,
				Config:    config("podinfo:6.0.1"),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectKnownValue(addr, tfjsonpath.New("rollout_plan"), knownvalue.StringRegexp(regexp.MustCompile(`^weights: 10 → 20`))),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(analysed, c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					func(*terraform.State) error { c.judge(t, ns, "podinfo:6.0.1"); return nil }),
			},
		},
	})
}
