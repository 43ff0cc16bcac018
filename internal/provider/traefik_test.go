package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

var (
	traefikServices = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "traefikservices"}
	ingressRoutes   = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "ingressroutes"}
)

// traefikConfig is a release of podinfo through Traefik, as in Flagger's Traefik tutorial.
func traefikConfig(ns, image, analysis string) string {
	return fmt.Sprintf(`
resource "canary_release" "test" {
  name          = "podinfo"
  namespace     = %[1]q
  mesh_provider = "traefik"
  target_ref    = { name = "podinfo" }
  triggers      = { image = %[2]q }
  progress_deadline_seconds = 60
  service = {
    port        = 80
    target_port = "9898"
  }
  analysis = {%[3]s
  }
}
`, ns, image, analysis)
}

// createIngressRoute makes the user's IngressRoute, which sends app.example.com to the
// TraefikService podinfo that the release generates, and returns it as stored.
func (c *testCluster) createIngressRoute(t *testing.T, ns string) []byte {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
		"metadata": map[string]any{"name": "podinfo", "namespace": ns, "labels": map[string]any{"team": "web"}},
		"spec": map[string]any{
			"entryPoints": []any{"web"},
			"routes": []any{map[string]any{
				"match": "Host(`app.example.com`)", "kind": "Rule",
				"services": []any{map[string]any{"name": "podinfo", "kind": "TraefikService"}},
			}},
		},
	}}
	created, err := c.dyn.Resource(ingressRoutes).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(created.Object)
	return raw
}

// checkIngressRouteUnchanged: the user's IngressRoute is the object created, byte for byte.
func (c *testCluster) checkIngressRouteUnchanged(ns string, before *[]byte) resource.TestCheckFunc {
	return checkCluster(func() error {
		u, err := c.dyn.Resource(ingressRoutes).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		now, _ := json.Marshal(u.Object)
		if string(now) != string(*before) {
			return fmt.Errorf("the user's IngressRoute changed:\n%s\nwas\n%s", now, *before)
		}
		return nil
	})
}

// traefikWeights reads the weights of the generated TraefikService's weighted services.
func traefikWeights(u *unstructured.Unstructured) (primary, canary int64, err error) {
	weighted, ok, _ := unstructured.NestedMap(u.Object, "spec", "weighted")
	if !ok {
		return 0, 0, fmt.Errorf("TraefikService %s has no spec.weighted: %v", u.GetName(), u.Object["spec"])
	}
	return sideWeights(&unstructured.Unstructured{Object: map[string]any{"rules": []any{weighted}}}, []string{"rules"}, "services", "name")
}

// checkTraefikService compares the live TraefikService's weights.
func (c *testCluster) checkTraefikService(ns string, primary, canary int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		u, err := c.dyn.Resource(traefikServices).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p, cw, err := traefikWeights(u)
		if err != nil {
			return err
		}
		if p != primary || cw != canary {
			return fmt.Errorf("TraefikService podinfo holds primary=%d canary=%d, want %d/%d", p, cw, primary, canary)
		}
		return nil
	})
}

// TestAccTraefik promotes a new image in one namespace and rolls a failing one back in
// another, through Traefik's built-in metrics; the user's IngressRoute is never written and
// the simulator, which routes through it, logs nothing.
func TestAccTraefik(t *testing.T) {
	c := testAccStack(t)
	t.Run("promotion", func(t *testing.T) {
		ns := c.namespace(t)
		analysis := httpRouteAnalysis("2s", 5)
		var userRoute []byte
		var rec *weightRecorder
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() {
						userRoute = c.createIngressRoute(t, ns)
						c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					},
					Config: traefikConfig(ns, "podinfo:6.0.0", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
						c.checkTraefikService(ns, 100, 0),
						c.checkIngressRouteUnchanged(ns, &userRoute),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				},
				{
					PreConfig: func() {
						rec = c.recordObjectWeights(t, traefikServices, ns, "podinfo", traefikWeights)
						c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
					},
					Config: traefikConfig(ns, "podinfo:6.0.1", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
						checkRecorded(&rec, 10, 40, 80, 0),
						c.checkTraefikService(ns, 100, 0),
						c.checkReplicas(ns, "podinfo", 0),
						c.checkIngressRouteUnchanged(ns, &userRoute),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
			},
		})
	})
	t.Run("rollback", func(t *testing.T) {
		ns := c.namespace(t)
		analysis := httpRouteAnalysis("3s", 2)
		failing := map[string]string{meshsim.AnnotationErrorRate: "1"}
		var userRoute []byte
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() {
						userRoute = c.createIngressRoute(t, ns)
						c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					},
					Config: traefikConfig(ns, "podinfo:6.0.0", analysis),
				},
				{
					PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", failing) },
					Config:    traefikConfig(ns, "podinfo:6.0.1", analysis),
					ExpectError: wrappedPattern(`Canary analysis failed at canary weight 10%: metric request-success-rate returned \d+\.\d\d, ` +
						`outside threshold_range \[min 99\] \(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%`),
				},
				{
					RefreshState:       true,
					ExpectNonEmptyPlan: true,
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
						c.checkTraefikService(ns, 100, 0),
						c.checkReplicas(ns, "podinfo", 0),
						c.checkIngressRouteUnchanged(ns, &userRoute),
					),
				},
				{
					// The promoted template again, so that the destroy may revert to it.
					PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.0", nil) },
					Config:    traefikConfig(ns, "podinfo:6.0.0", analysis),
				},
			},
		})
	})
}
