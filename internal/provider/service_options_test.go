package provider

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// serviceOptionsConfig releases podinfo behind an apex Service named web, with the user's
// labels, annotations and appProtocol on the generated Services.
func serviceOptionsConfig(ns, image, apexName string) string {
	return fmt.Sprintf(`
resource "canary_release" "test" {
  name          = "podinfo"
  namespace     = %[1]q
  mesh_provider = "osm"
  %[2]s
  service = {
    name         = %[3]q
    port         = 9898
    target_port  = "9898"
    app_protocol = "http"
    apex    = { labels = { team = "shop" }, annotations = { "example.com/owner" = "shop" } }
    canary  = { labels = { tier = "canary" } }
  }
  analysis = {%[4]s
  }
  progress_deadline_seconds = 60
}
`, ns, manifestWorkload(image, "0"), apexName, healthyAnalysis)
}

// service.name gives the apex another name than the target's, and the user's metadata and
// appProtocol reach the Services; the release promotes through them, and a rename is refused.
func TestAccRelease_serviceOptions(t *testing.T) {
	c := testAccStack(t)
	t.Parallel()
	ns := c.namespace(t)
	checkServices := checkCluster(func() error {
		ctx := context.Background()
		for _, name := range []string{"web", "web-primary", "web-canary"} {
			svc, err := c.kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if p := svc.Spec.Ports[0].AppProtocol; p == nil || *p != "http" {
				return fmt.Errorf("Service %s has appProtocol %v, want http", name, p)
			}
			switch name {
			case "web":
				if svc.Labels["team"] != "shop" || svc.Annotations["example.com/owner"] != "shop" || svc.Spec.Selector["app"] != "podinfo-primary" {
					return fmt.Errorf("apex Service %s: labels %v, annotations %v, selector %v", name, svc.Labels, svc.Annotations, svc.Spec.Selector)
				}
			case "web-canary":
				if svc.Labels["tier"] != "canary" || svc.Labels["team"] != "" {
					return fmt.Errorf("canary Service labels %v", svc.Labels)
				}
			}
		}
		if _, err := c.kube.CoreV1().Services(ns).Get(ctx, "podinfo", metav1.GetOptions{}); err == nil {
			return fmt.Errorf("a Service named after the target exists besides the apex web")
		}
		return nil
	})
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: serviceOptionsConfig(ns, "podinfo:6.0.0", "web"), Check: checkServices},
			{
				Config: serviceOptionsConfig(ns, "podinfo:6.0.1", "web"),
				Check: resource.ComposeAggregateTestCheckFunc(checkServices,
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					checkCluster(func() error {
						p, cw, err := c.splitWeights(ns, "web")
						if err != nil || p != 100 || cw != 0 {
							return fmt.Errorf("TrafficSplit web is %d/%d (%v), want 100/0", p, cw, err)
						}
						return nil
					})),
			},
			{
				Config:      serviceOptionsConfig(ns, "podinfo:6.0.1", "shop"),
				PlanOnly:    true,
				ExpectError: wrapped(`service.name cannot change in place`),
			},
		},
	})
}
