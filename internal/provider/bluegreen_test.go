package provider

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// blueGreenAnalysis is Flagger's blue/green analysis on OSM: iterations without weights, with
// the load tester (here the simulator's /loadtest) sending test traffic straight to the
// canary Service. The first checks may find no values yet (the load test starts with the
// first interval's webhook), so threshold 3 leaves room for two of them.
func (c *testCluster) blueGreenAnalysis(ns string) string {
	return fmt.Sprintf(`
    interval   = "2s"
    threshold  = 3
    iterations = 3
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]
    webhooks = [{
      name     = "load-test"
      url      = "%s/loadtest"
      timeout  = "5s"
      metadata = { cmd = "hey -z 1m -q 10 -c 2 http://podinfo-canary.%s:9898/" }
    }]`, c.env.SimulatorURL, ns)
}

// canaryRequests counts the requests the canary's pods answered in the last 10 minutes, from
// the simulator's load generator (user traffic) or its load tester (test traffic). Series that
// never existed count 0.
func (c *testCluster) canaryRequests(ns, source string) (float64, error) {
	v, err := c.prom.Query(context.Background(), fmt.Sprintf(
		`sum(max_over_time(osm_request_total{destination_namespace=%q,destination_kind="Deployment",destination_name="podinfo",source_name=%q}[10m]))`, ns, source))
	if errors.Is(err, metrics.ErrNoValues) {
		return 0, nil
	}
	return v, err
}

// blueGreenConfig is the blue/green release of image, whose pods fail errorRate of requests.
func (c *testCluster) blueGreenConfig(ns, image, errorRate string) string {
	return releaseConfig(ns, manifestWorkload(image, errorRate), c.blueGreenAnalysis(ns), "")
}

// TestAccRelease_blueGreen: the TrafficSplit keeps all traffic on the primary while the
// iterations analyse the load tester's traffic, then switches it to the canary and promotes.
func TestAccRelease_blueGreen(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: c.blueGreenConfig(ns, "podinfo:6.0.0", "0")},
			{
				PreConfig: func() { rec = c.recordWeights(t, ns, "podinfo") },
				Config:    c.blueGreenConfig(ns, "podinfo:6.0.1", "0"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					// 100/0 through the iterations, 0/100 for the switch, back to the new primary.
					func(s *terraform.State) error { return c.checkWeights(rec, 100, 0)(s) },
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					checkCluster(func() error {
						return c.checkEvents(ns, "Progressing", "Promoting", "Finalising", "Succeeded")
					}),
					checkCluster(func() error { c.judge(t, ns, "podinfo:6.0.1"); return nil }),
					checkCluster(func() error {
						// The analysis read real test traffic on the canary's pods.
						if n, err := c.canaryRequests(ns, meshsim.LoadTesterName); err != nil || n == 0 {
							return fmt.Errorf("the load tester's requests to the canary: %v, %v; want some", n, err)
						}
						return nil
					}),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}

// TestAccRelease_blueGreenFails: a canary failing every request rolls back on the load
// tester's traffic alone, and no user request ever reaches it.
func TestAccRelease_blueGreenFails(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: c.blueGreenConfig(ns, "podinfo:6.0.0", "0")},
			{
				PreConfig:   func() { rec = c.recordWeights(t, ns, "podinfo") },
				Config:      c.blueGreenConfig(ns, "podinfo:6.0.1", "1"),
				ExpectError: wrappedPattern(`metric request-success-rate returned 0\.00, outside threshold_range \[min 99\]`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkSplit(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					// The TrafficSplit never gave the canary any weight…
					func(s *terraform.State) error { return c.checkWeights(rec)(s) },
					checkCluster(func() error { c.judge(t, ns, "podinfo:6.0.0"); return nil }),
					checkCluster(func() error {
						// …so the canary's pods answered the load tester and no one else.
						users, err := c.canaryRequests(ns, meshsim.SourceName)
						if err != nil || users != 0 {
							return fmt.Errorf("user requests answered by the canary: %v, %v; want 0", users, err)
						}
						tests, err := c.canaryRequests(ns, meshsim.LoadTesterName)
						if err != nil || tests == 0 {
							return fmt.Errorf("test requests answered by the canary: %v, %v; want some", tests, err)
						}
						return nil
					}),
				),
			},
		},
	})
}
