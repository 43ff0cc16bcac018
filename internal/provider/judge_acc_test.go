package provider

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
)

// latencyWorkload is manifestWorkload with the simulator's per-pod latency (ms).
func latencyWorkload(image string, latencyMs int) string {
	return strings.Replace(manifestWorkload(image, "0"), `annotations = { "sim.canary-release.dev/error-rate" = "0" }`,
		fmt.Sprintf(`annotations = { "sim.canary-release.dev/error-rate" = "0", "sim.canary-release.dev/latency-ms" = "%d" }`, latencyMs), 1)
}

// judgeWindow is the judged metric's interval: 5 samples of 3 s for mann-whitney.
const judgeWindow = 15 * time.Second

// judgeRPS is the load the simulator sends to the apex. Every request's latency is drawn from
// a lognormal around the pod's p99, so a window's p99 is only as good as the requests in it:
// at the default 20 req/s a 10 % canary gets 30 requests in 15 s, whose p99 is noise for
// any judge. 1000 req/s give the canary 1 500 a window at 10 %, a p99 a real proxy would
// report as steadily.
const judgeRPS = "1000"

// twiceAsSlow is the ratio a judge reads for a canary at twice the primary's latency: each
// window's p99 is drawn from requests, so it reads around 2, never at or below max_ratio 1.5.
const twiceAsSlow = `(1\.[5-9]\d*|[2-3](\.\d+)?)`

// judgedConfig is releaseConfig with the apex under judgeRPS.
func judgedConfig(ns, workload, analysis string) string {
	return strings.Replace(releaseConfig(ns, workload, analysis, ""), `target_port = "9898"`,
		`target_port = "9898"
    apex        = { annotations = { "sim.canary-release.dev/rps" = "`+judgeRPS+`" } }`, 1)
}

func judgedAnalysis(method string, dryRun bool) string {
	return fmt.Sprintf(`
    interval         = "3s"
    threshold        = 2
    max_weight       = 30
    step_weight      = 10
    max_query_errors = 10
    metrics = [
      { name = "request-duration", interval = "15s", threshold_range = { max = 500 },
        judge = { method = %q, max_ratio = 1.5, samples = 5 }, dry_run = %t },
    ]`, method, dryRun)
}

// A latency judge rolls back a canary twice as slow as the primary, though its fixed range
// passes it, with the judge's verdict in the error; it promotes a canary as fast as the primary.
func TestAccRelease_judgeLatency(t *testing.T) {
	for _, method := range []string{"ratio", "mann-whitney"} {
		t.Run(method, func(t *testing.T) {
			c := testAccStack(t)
			ns := c.namespace(t)
			verdict := map[string]string{
				"ratio":        `metric request-duration failed its judge ratio: canary [\d.]+ / primary [\d.]+ = ` + twiceAsSlow + `, beyond max_ratio 1.5 \(direction increase\)`,
				"mann-whitney": `metric request-duration failed its judge mann-whitney: canary median [\d.]+ / primary median [\d.]+ = ` + twiceAsSlow + ` over \d+\+\d+ samples, p = \S+ \(significant at confidence 0.95\), beyond max_ratio 1.5`,
			}[method]
			resource.ParallelTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{
					{Config: judgedConfig(ns, latencyWorkload("podinfo:6.0.0", 50), judgedAnalysis(method, false))},
					{
						Config: judgedConfig(ns, latencyWorkload("podinfo:6.0.1", 100), judgedAnalysis(method, false)),
						// Within two intervals in at least 95 seeds of 100 (the judge's measured power),
						// so the rollback is at the first step's weight or, rarely, the second's.
						ExpectError: wrappedPattern(verdict + `.*Rolled back at canary weight (10|20)%`),
					},
					{
						PreConfig: func() { time.Sleep(judgeWindow + 2*time.Second) },
						Config:    judgedConfig(ns, latencyWorkload("podinfo:6.0.2", 50), judgedAnalysis(method, false)),
						Check: resource.ComposeAggregateTestCheckFunc(
							resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
							c.checkImage(ns, "podinfo-primary", "podinfo:6.0.2"),
							c.checkSplit(ns, 100, 0),
						),
					},
				},
			})
		})
	}
}

// A dry_run judge that would fail does not fail the release: the slow canary is promoted.
func TestAccRelease_judgeDryRun(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: judgedConfig(ns, latencyWorkload("podinfo:6.0.0", 50), judgedAnalysis("ratio", true))},
			{
				Config: judgedConfig(ns, latencyWorkload("podinfo:6.0.1", 100), judgedAnalysis("ratio", true)),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Succeeded"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
				),
			},
		},
	})
}
