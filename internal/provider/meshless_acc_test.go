package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/canary-release/terraform-provider-canary/internal/rollout"
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

// ratioRecorder notes, at each canary weight the state ConfigMap records, the canary's Ready
// replicas and the apex Service's selector then.
type ratioRecorder struct {
	mu    sync.Mutex
	steps []string
}

func (c *testCluster) recordRatio(t *testing.T, ns string) *ratioRecorder {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := c.kube.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + rollout.StateConfigMapName("podinfo")})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	r := &ratioRecorder{}
	go func() {
		last := 0 // the state before the rollout
		for ev := range w.ResultChan() {
			cm, ok := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			var rec struct {
				CanaryWeight int `json:"canaryWeight"`
			}
			if json.Unmarshal([]byte(cm.Data["status.json"]), &rec) != nil || rec.CanaryWeight == last {
				continue
			}
			last = rec.CanaryWeight
			canary, err1 := c.deployment(ns, "podinfo")
			apex, err2 := c.kube.CoreV1().Services(ns).Get(ctx, "podinfo", metav1.GetOptions{})
			if err1 != nil || err2 != nil {
				continue
			}
			selects := "primary"
			if maps.Equal(apex.Spec.Selector, map[string]string{router.LabelApex: "podinfo"}) {
				selects = "both"
			}
			r.mu.Lock()
			step := fmt.Sprintf("%d%%: apex selects %s", rec.CanaryWeight, selects)
			if rec.CanaryWeight > 0 {
				// The weight is recorded once the step's canary pods are Ready.
				step = fmt.Sprintf("%d%%: %d Ready canary pods, apex selects %s", rec.CanaryWeight, canary.Status.ReadyReplicas, selects)
			}
			r.steps = append(r.steps, step)
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop() })
	return r
}

func (r *ratioRecorder) check(want ...string) resource.TestCheckFunc {
	return func(*terraform.State) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		if fmt.Sprint(r.steps) != fmt.Sprint(want) {
			return fmt.Errorf("recorded steps %q, want %q", r.steps, want)
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
						return rec.check("20%: 1 Ready canary pods, apex selects both", "50%: 4 Ready canary pods, apex selects both", "0%: apex selects primary")(s)
					},
					c.checkApexSelects(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					resource.TestCheckResourceAttr(addr, "status.canary_weight", "0"),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
			{
				PreConfig:   func() { rec = c.recordRatio(t, ns) },
				Config:      c.meshlessConfig(ns, "podinfo:6.0.2", "1"),
				ExpectError: wrappedPattern(`metric request-success-rate returned 0\.00, outside threshold_range \[min 99\]`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					// The bad canary got its first step's pod, then nothing.
					func(s *terraform.State) error {
						return rec.check("20%: 1 Ready canary pods, apex selects both", "0%: apex selects primary")(s)
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
