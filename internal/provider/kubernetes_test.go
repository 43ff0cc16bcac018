package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

var services = schema.GroupVersionResource{Version: "v1", Resource: "services"}

// kubernetesConfig is a blue/green release with mesh_provider kubernetes: no mesh, the apex
// Service's selector is the route. The simulator's un-meshed clients call the apex Service
// (the annotation), and the load tester sends test traffic to the canary Service.
func (c *testCluster) kubernetesConfig(ns, image, errorRate string) string {
	config := strings.Replace(c.blueGreenConfig(ns, image, errorRate), `mesh_provider = "osm"`, `mesh_provider = "kubernetes"`, 1)
	return strings.Replace(config, `target_port = "9898"`, fmt.Sprintf(`target_port = "9898"
    apex        = { annotations = { %q = %q } }`, meshsim.AnnotationClients, meshsim.ClientsDirect), 1)
}

// apexSelects reads which side the apex Service selects, as a split: the primary's pods are
// 100/0, the canary's 0/100.
func apexSelects(u *unstructured.Unstructured) (int64, int64, error) {
	app, _, _ := unstructured.NestedString(u.Object, "spec", "selector", "app")
	switch app {
	case "podinfo-primary":
		return 100, 0, nil
	case "podinfo":
		return 0, 100, nil
	}
	return 0, 0, fmt.Errorf("the apex Service selects app=%q", app)
}

func (c *testCluster) checkApexSelects(ns string, primary, canary int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		u, err := c.dyn.Resource(services).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p, cw, err := apexSelects(u)
		if err != nil || p != primary || cw != canary {
			return fmt.Errorf("apex Service selects %d/%d (%v), want %d/%d", p, cw, err, primary, canary)
		}
		return nil
	})
}

// TestAccKubernetes_blueGreen: the apex Service selects the primary through the iterations
// (the load tester's traffic is analysed), switches to the canary for one interval, and
// selects the new primary once promoted.
func TestAccKubernetes_blueGreen(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				Config:            c.kubernetesConfig(ns, "podinfo:6.0.0", "0"),
				Check:             c.checkApexSelects(ns, 100, 0),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() { rec = c.recordObjectWeights(t, services, ns, "podinfo", apexSelects) },
				Config:    c.kubernetesConfig(ns, "podinfo:6.0.1", "0"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					func(s *terraform.State) error { return checkRecorded(&rec, 100, 0)(s) },
					c.checkApexSelects(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}

// TestAccKubernetes_blueGreenFails: a canary failing the load tester's requests rolls back,
// naming the built-in metric, and the apex Service never selects it.
func TestAccKubernetes_blueGreenFails(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: c.kubernetesConfig(ns, "podinfo:6.0.0", "0")},
			{
				PreConfig:   func() { rec = c.recordObjectWeights(t, services, ns, "podinfo", apexSelects) },
				Config:      c.kubernetesConfig(ns, "podinfo:6.0.1", "1"),
				ExpectError: wrappedPattern(`metric request-success-rate returned 0\.00, outside threshold_range \[min 99\]`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkApexSelects(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					func(s *terraform.State) error { return checkRecorded(&rec)(s) },
				),
			},
		},
	})
}
