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

var httpProxies = schema.GroupVersionResource{Group: "projectcontour.io", Version: "v1", Resource: "httpproxies"}

// contourConfig is a release of podinfo through Contour, as in Flagger's Contour tutorial.
func contourConfig(ns, image, analysis string) string {
	return fmt.Sprintf(`
resource "canary_release" "test" {
  name          = "podinfo"
  namespace     = %[1]q
  mesh_provider = "contour"
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

// createRootProxy makes the user's root HTTPProxy for app.example.com, which includes the
// HTTPProxy podinfo the release generates, and returns it as stored.
func (c *testCluster) createRootProxy(t *testing.T, ns string) []byte {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
		"metadata": map[string]any{"name": "root", "namespace": ns},
		"spec": map[string]any{
			"virtualhost": map[string]any{"fqdn": "app.example.com"},
			"includes":    []any{map[string]any{"name": "podinfo", "namespace": ns}},
		},
	}}
	created, err := c.dyn.Resource(httpProxies).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(created.Object)
	return raw
}

// checkRootProxyUnchanged: the user's root HTTPProxy is the object created, byte for byte.
func (c *testCluster) checkRootProxyUnchanged(ns string, before *[]byte) resource.TestCheckFunc {
	return checkCluster(func() error {
		u, err := c.dyn.Resource(httpProxies).Namespace(ns).Get(context.Background(), "root", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if now, _ := json.Marshal(u.Object); string(now) != string(*before) {
			return fmt.Errorf("the user's HTTPProxy root changed:\n%s\nwas\n%s", now, *before)
		}
		return nil
	})
}

// contourWeights reads the split route of the generated HTTPProxy and whether an A/B route
// (the header x-canary: insider, all to the canary) is ahead of it.
func contourWeights(u *unstructured.Unstructured) (int64, int64, error) {
	routes, _, _ := unstructured.NestedSlice(u.Object, "spec", "routes")
	matched := len(routes) == 2
	if matched {
		ab, _ := routes[0].(map[string]any)
		conds, _ := ab["conditions"].([]any)
		want := []any{map[string]any{"prefix": "/"}, map[string]any{"header": map[string]any{"name": "x-canary", "exact": "insider"}}}
		abRoute := &unstructured.Unstructured{Object: map[string]any{"rules": []any{ab}}}
		p, cw, err := sideWeights(abRoute, []string{"rules"}, "services", "name")
		if fmt.Sprint(conds) != fmt.Sprint(want) || err != nil || p != 0 || cw != 100 {
			return 0, 0, fmt.Errorf("A/B route %v, want conditions %v and the canary at 100", ab, want)
		}
		routes = routes[1:]
	}
	p, cw, err := sideWeights(&unstructured.Unstructured{Object: map[string]any{"rules": routes}}, []string{"rules"}, "services", "name")
	if err != nil {
		return 0, 0, err
	}
	return abState(p, cw, matched)
}

// checkHTTPProxy compares the live HTTPProxy's split route.
func (c *testCluster) checkHTTPProxy(ns string, primary, canary int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		u, err := c.dyn.Resource(httpProxies).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p, cw, err := contourWeights(u)
		if err != nil {
			return err
		}
		if p != primary || cw != canary {
			return fmt.Errorf("HTTPProxy podinfo holds primary=%d canary=%d, want %d/%d", p, cw, primary, canary)
		}
		return nil
	})
}

// TestAccContour promotes a new image in one namespace, rolls a failing one back in another
// and runs an A/B test in a third, through Envoy's cluster stats; the user's root HTTPProxy is
// never written and the simulator, which routes through it, logs nothing.
func TestAccContour(t *testing.T) {
	c := testAccStack(t)
	t.Run("promotion", func(t *testing.T) {
		ns := c.namespace(t)
		analysis := httpRouteAnalysis("2s", 5)
		var root []byte
		var rec *weightRecorder
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() {
						root = c.createRootProxy(t, ns)
						c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					},
					Config: contourConfig(ns, "podinfo:6.0.0", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
						c.checkHTTPProxy(ns, 100, 0),
						c.checkRootProxyUnchanged(ns, &root),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				},
				{
					PreConfig: func() {
						rec = c.recordObjectWeights(t, httpProxies, ns, "podinfo", contourWeights)
						c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
					},
					Config: contourConfig(ns, "podinfo:6.0.1", analysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
						checkRecorded(&rec, 10, 40, 80, 0),
						c.checkHTTPProxy(ns, 100, 0),
						c.checkReplicas(ns, "podinfo", 0),
						c.checkRootProxyUnchanged(ns, &root),
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
		var root []byte
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() {
						root = c.createRootProxy(t, ns)
						c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					},
					Config: contourConfig(ns, "podinfo:6.0.0", analysis),
				},
				{
					PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", failing) },
					Config:    contourConfig(ns, "podinfo:6.0.1", analysis),
					ExpectError: wrappedPattern(`Canary analysis failed at canary weight 10%: metric request-success-rate returned \d+\.\d\d, ` +
						`outside threshold_range \[min 99\] \(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%`),
				},
				{
					RefreshState:       true,
					ExpectNonEmptyPlan: true,
					Check: resource.ComposeAggregateTestCheckFunc(
						resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
						c.checkHTTPProxy(ns, 100, 0),
						c.checkReplicas(ns, "podinfo", 0),
						c.checkRootProxyUnchanged(ns, &root),
					),
				},
				{
					// The promoted template again, so that the destroy may revert to it.
					PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.0", nil) },
					Config:    contourConfig(ns, "podinfo:6.0.0", analysis),
				},
			},
		})
	})
	t.Run("abtest", func(t *testing.T) {
		ns := c.namespace(t)
		var root []byte
		var rec *weightRecorder
		resource.ParallelTest(t, resource.TestCase{
			ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
			Steps: []resource.TestStep{
				{
					PreConfig: func() {
						root = c.createRootProxy(t, ns)
						c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					},
					Config:            contourConfig(ns, "podinfo:6.0.0", abAnalysis),
					Check:             c.checkHTTPProxy(ns, 100, 0),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
				},
				{
					PreConfig: func() {
						c.tagTraffic(t, ns)
						rec = c.recordObjectWeights(t, httpProxies, ns, "podinfo", contourWeights)
						c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
					},
					Config: contourConfig(ns, "podinfo:6.0.1", abAnalysis),
					Check: resource.ComposeAggregateTestCheckFunc(
						c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
						checkSeen("HTTPProxy podinfo", &rec, abMarked, 0),
						c.checkHTTPProxy(ns, 100, 0),
						c.checkReplicas(ns, "podinfo", 0),
						c.checkRootProxyUnchanged(ns, &root),
					),
					ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
				},
			},
		})
	})
}
