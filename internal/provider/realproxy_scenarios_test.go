package provider

import (
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// runRealProxy runs a router's release through the stack's real Traefik (skipped when the
// stack runs none): the simulator's client sends real requests for the route's host to
// Traefik's web entry point, Traefik picks the pod by what the release writes, and the pod's
// answer carries its image. A promotion shows both images answering and ends with the new one
// alone; a failing canary rolls back to the old one. Any answer no pod gave (a 502/503/504 or
// 404 of Traefik's, a refused or reset connection, a timeout) is an entry in the invariant
// log, which the checks and the namespace's cleanup require empty. caseFor gives the router
// case of a namespace (its host may be the namespace's own).
func runRealProxy(t *testing.T, caseFor func(ns string) routerCase) {
	c := testAccStack(t)
	if c.env.ProxyAddress == "" {
		t.Skip("the stack runs no real proxy (CANARY_PROXY_ADDRESS unset); make up starts Traefik")
	}
	t.Run("promotion", func(t *testing.T) {
		ns := c.namespace(t)
		rc := caseFor(ns)
		analysis := httpRouteAnalysis("2s", 5)
		var user userState
		var rec *weightRecorder
		var before map[string]int64
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() {
						rc.create(t, c, ns, &user)
						rc.createTarget(t, c, ns, "podinfo:6.0.0")
					},
					Config: rc.config(ns, "podinfo:6.0.0", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						rc.checkRoute(c, ns, 100, 0),
						c.checkClientAnswers(ns, "podinfo:6.0.0", nil),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				},
				{
					PreConfig: func() {
						before = c.clientAnswers(t, ns)
						rec = c.recordObjectWeights(t, rc.route, ns, rc.name(), rc.weights)
						rc.setTarget(t, c, ns, "podinfo:6.0.1", nil)
					},
					Config: rc.config(ns, "podinfo:6.0.1", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						rc.primaryRuns(c, ns, "podinfo:6.0.1"),
						checkRecorded(&rec, 10, 40, 80, 0),
						rc.checkRoute(c, ns, 100, 0),
						// The canary answered real requests during the analysis.
						checkCluster(func() error {
							if got := c.clientAnswersNow(ns)["podinfo:6.0.1"]; got == 0 {
								return fmt.Errorf("no request through Traefik reached podinfo:6.0.1 during the rollout (answers before: %v)", before)
							}
							return nil
						}),
						// Once promoted, the new image alone answers.
						c.checkClientAnswers(ns, "podinfo:6.0.1", []string{"podinfo:6.0.0"}),
						c.checkNoClientEntries(ns),
						user.checkUntouched(c, ns),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
			},
		})
	})
	t.Run("rollback", func(t *testing.T) {
		ns := c.namespace(t)
		rc := caseFor(ns)
		analysis := httpRouteAnalysis("3s", 2)
		failing := map[string]string{meshsim.AnnotationErrorRate: "1"}
		var user userState
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() {
						rc.create(t, c, ns, &user)
						rc.createTarget(t, c, ns, "podinfo:6.0.0")
					},
					Config: rc.config(ns, "podinfo:6.0.0", analysis),
					Check:  c.checkClientAnswers(ns, "podinfo:6.0.0", nil),
				},
				{
					PreConfig: func() { rc.setTarget(t, c, ns, "podinfo:6.0.1", failing) },
					Config:    rc.config(ns, "podinfo:6.0.1", analysis),
					ExpectError: wrappedPattern(`Canary analysis failed at canary weight 10%: metric request-success-rate returned \d+\.\d\d, ` +
						`outside threshold_range \[min 99\] \(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%`),
				},
				{
					RefreshState:       true,
					ExpectNonEmptyPlan: true,
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
						rc.primaryRuns(c, ns, "podinfo:6.0.0"),
						rc.checkRoute(c, ns, 100, 0),
						// Rolled back: the old image alone answers.
						c.checkClientAnswers(ns, "podinfo:6.0.0", []string{"podinfo:6.0.1"}),
						c.checkNoClientEntries(ns),
						user.checkUntouched(c, ns),
					),
				},
				{
					PreConfig: func() { rc.setTarget(t, c, ns, "podinfo:6.0.0", nil) },
					Config:    rc.config(ns, "podinfo:6.0.0", analysis),
				},
			},
		})
	})
}
