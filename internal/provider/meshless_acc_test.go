package provider

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// meshlessConfig is a weighted release without a mesh: 4 primary pods, steps of 20 and 50%
// (1 canary pod, then 4), the simulator's un-meshed clients calling the apex Service, and the
// load tester sending test traffic to the canary Service so the first check finds values.
func (c *testCluster) meshlessConfig(ns, image, errorRate string) string {
	analysis := fmt.Sprintf(`
    interval     = "2s"
    threshold    = 3
    step_weights = [20, 50]
    metrics = [
      { name = "request-success-rate", interval = "10s", threshold_range = { min = 99 } },
    ]
    webhooks = [{
      name     = "load-test"
      url      = "%s/loadtest"
      timeout  = "5s"
      metadata = { cmd = "hey -z 1m -q 10 -c 2 http://podinfo-canary.%s:9898/" }
    }]`, c.env.SimulatorURL, ns)
	config := releaseConfig(ns, strings.Replace(manifestWorkload(image, errorRate), "replicas = 2", "replicas = 4", 1), analysis, "")
	config = strings.Replace(config, `mesh_provider = "osm"`, `mesh_provider = "kubernetes"`, 1)
	return strings.Replace(config, `target_port = "9898"`, fmt.Sprintf(`target_port = "9898"
    apex        = { annotations = { %q = %q } }`, meshsim.AnnotationClients, meshsim.ClientsDirect), 1)
}

// ratioRecorder notes, while the apex Service selects both sides, the canary's Ready pods (and
// the primary's) each time they change, polling the live objects: the state ConfigMap is
// written once per phase, not per step.
type ratioRecorder struct {
	mu    sync.Mutex
	steps []string
}

func (c *testCluster) recordRatio(t *testing.T, ns string) *ratioRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &ratioRecorder{}
	go func() {
		last := ""
		for ctx.Err() == nil {
			apex, err1 := c.kube.CoreV1().Services(ns).Get(ctx, "podinfo", metav1.GetOptions{})
			canary, err2 := c.deployment(ns, "podinfo")
			primary, err3 := c.deployment(ns, "podinfo-primary")
			if err1 == nil && err2 == nil && err3 == nil {
				step := "apex selects the primary"
				if maps.Equal(apex.Spec.Selector, map[string]string{router.LabelApex: "podinfo"}) {
					step = fmt.Sprintf("apex selects both sides, %d Ready canary pods", canary.Status.ReadyReplicas)
					if canary.Status.ReadyReplicas == 0 || primary.Status.ReadyReplicas == 0 {
						// The simulator's log judges the endpoints; this names the side.
						step += fmt.Sprintf(" and %d Ready primary pods", primary.Status.ReadyReplicas)
					}
				}
				if step != last {
					last = step
					r.mu.Lock()
					r.steps = append(r.steps, step)
					r.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(cancel)
	return r
}

// check compares the distinct states seen, collapsing the moments a scale-up passes through
// (2 and 3 Ready canary pods on the way from 1 to 4).
func (r *ratioRecorder) check(want ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		var got []string
		for _, s := range r.steps {
			if strings.HasSuffix(s, ", 2 Ready canary pods") || strings.HasSuffix(s, ", 3 Ready canary pods") {
				continue
			}
			if len(got) == 0 || got[len(got)-1] != s {
				got = append(got, s)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			return fmt.Errorf("the apex and the canary went through %q (all: %q), want %q", got, r.steps, want)
		}
		return nil
	}
}

// TestAccRelease_meshlessWeighted: without a mesh, a weighted release shares the apex Service by
// replica ratio. A good revision is promoted with the canary's Ready pods following the steps
// (1 beside 4 is 20%, 4 beside 4 is 50%); a bad one rolls back naming the failed metric. The
// namespace's cleanup asserts an empty invariant log.
func TestAccRelease_meshlessWeighted(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	var rec *ratioRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:            c.meshlessConfig(ns, "podinfo:6.0.0", "0"),
				Check:             c.checkApexSelects(ns, 100, 0),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() { rec = c.recordRatio(t, ns) },
				Config:    c.meshlessConfig(ns, "podinfo:6.0.1", "0"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					func(s *terraform.State) error {
						return rec.check("apex selects the primary", "apex selects both sides, 1 Ready canary pods",
							"apex selects both sides, 4 Ready canary pods", "apex selects the primary")(s)
					},
					c.checkApexSelects(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					resource.TestCheckResourceAttr(addr, "status.canary_weight", "0"),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
			{
				PreConfig: func() { rec = c.recordRatio(t, ns) },
				Config:    c.meshlessConfig(ns, "podinfo:6.0.2", "1"),
				// The window may still hold the good revision's canary pods' last requests (the
				// pod name pattern takes every canary pod): any value below the range fails.
				ExpectError: wrappedPattern(`Canary analysis failed at canary weight 20%: metric request-success-rate returned [0-9.]+, outside threshold_range \[min 99\]`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					// The bad canary got its first step's pod, then nothing.
					func(s *terraform.State) error {
						return rec.check("apex selects the primary", "apex selects both sides, 1 Ready canary pods", "apex selects the primary")(s)
					},
					resource.TestCheckResourceAttr(addr, "status.canary_weight", "0"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkApexSelects(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
			},
		},
	})
}
