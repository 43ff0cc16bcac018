package provider

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

var (
	httpRoutes     = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}
	gateways       = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}
	gatewayClasses = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gatewayclasses"}
)

// httpRouteConfig is a release of podinfo through an HTTPRoute; extra goes into the resource
// (service is given whole, since gateway_refs live there).
func httpRouteConfig(ns, provider, image, service, extra, analysis string) string {
	return fmt.Sprintf(`
resource "canary_release" "test" {
  name          = "podinfo"
  namespace     = %[1]q
  mesh_provider = %[2]q
  target_ref    = { name = "podinfo" }
  triggers      = { image = %[3]q }
  progress_deadline_seconds = 60
  service = %[4]s
  %[5]s
  analysis = {%[6]s
  }
}
`, ns, provider, image, service, extra, analysis)
}

const gatewayService = `{
    port         = 80
    target_port  = "9898"
    hosts        = ["app.example.com"]
    gateway_refs = [{ name = "public", section_name = "http" }]
  }`

const linkerdService = `{
    port        = 80
    target_port = "9898"
  }`

func httpRouteAnalysis(interval string, threshold int) string {
	return fmt.Sprintf(`
    interval     = %q
    threshold    = %d
    step_weights = [10, 40, 80]
    metrics = [%s
    ]`, interval, threshold, flaggerMetrics)
}

// createGateway makes the user's Gateway "public", of a GatewayClass of its own whose
// controller decides what the simulator exports (Envoy Gateway here).
func (c *testCluster) createGateway(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
		"metadata": map[string]any{"name": "eg-" + ns},
		"spec":     map[string]any{"controllerName": meshsim.EnvoyGatewayController},
	}}
	if _, err := c.dyn.Resource(gatewayClasses).Create(ctx, class, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.dyn.Resource(gatewayClasses).Delete(context.Background(), "eg-"+ns, metav1.DeleteOptions{})
	})
	gw := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
		"metadata": map[string]any{"name": "public", "namespace": ns},
		"spec": map[string]any{"gatewayClassName": "eg-" + ns, "listeners": []any{
			map[string]any{"name": "http", "protocol": "HTTP", "port": int64(80)},
		}},
	}}
	if _, err := c.dyn.Resource(gateways).Namespace(ns).Create(ctx, gw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// httpRouteWeights reads the weights of the podinfo backendRefs.
func httpRouteWeights(u *unstructured.Unstructured) (primary, canary int64, err error) {
	return sideWeights(u, []string{"spec", "rules"}, "backendRefs", "name")
}

// checkHTTPRoute compares the live HTTPRoute's parents, hostnames and weights.
func (c *testCluster) checkHTTPRoute(ns string, parents, hostnames []any, primary, canary int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		u, err := c.dyn.Resource(httpRoutes).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		gotParents, _, _ := unstructured.NestedSlice(u.Object, "spec", "parentRefs")
		gotHosts, _, _ := unstructured.NestedSlice(u.Object, "spec", "hostnames")
		if !reflect.DeepEqual(gotParents, parents) || !reflect.DeepEqual(gotHosts, hostnames) {
			return fmt.Errorf("HTTPRoute podinfo has parentRefs %v and hostnames %v, want %v and %v", gotParents, gotHosts, parents, hostnames)
		}
		p, cw, err := httpRouteWeights(u)
		if err != nil {
			return err
		}
		if p != primary || cw != canary {
			return fmt.Errorf("HTTPRoute podinfo holds primary=%d canary=%d, want %d/%d", p, cw, primary, canary)
		}
		return nil
	})
}

func checkRecorded(r **weightRecorder, want ...int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		if got := (*r).seen(); !slices.Equal(got, want) {
			return fmt.Errorf("HTTPRoute canary weights were %v, want %v", got, want)
		}
		return nil
	})
}

var (
	gatewayParents = []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public", "sectionName": "http"}}
	gatewayHosts   = []any{"app.example.com"}
	linkerdParents = []any{map[string]any{"group": "", "kind": "Service", "name": "podinfo", "port": int64(80)}}
)

// httpRouteCase is what differs between the two HTTPRoute routers in the tests below.
type httpRouteCase struct {
	provider, service, extra string
	parents, hosts           []any
	gateway                  bool
}

var (
	gatewayCase = httpRouteCase{provider: "gatewayapi", service: gatewayService, extra: `gateway_api = { metrics = "envoy" }`,
		parents: gatewayParents, hosts: gatewayHosts, gateway: true}
	linkerdCase = httpRouteCase{provider: "linkerd", service: linkerdService, parents: linkerdParents}
)

// testHTTPRoutePromotion: initialise, then promote a new image through every step weight;
// the HTTPRoute keeps its parents and hostnames as configured and ends at 100/0.
func testHTTPRoutePromotion(t *testing.T, tc httpRouteCase) {
	c := testAccStack(t)
	ns := c.namespace(t)
	analysis := httpRouteAnalysis("2s", 5)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					if tc.gateway {
						c.createGateway(t, ns)
					}
					c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
				},
				Config: httpRouteConfig(ns, tc.provider, "podinfo:6.0.0", tc.service, tc.extra, analysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkHTTPRoute(ns, tc.parents, tc.hosts, 100, 0),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() {
					rec = c.recordObjectWeights(t, httpRoutes, ns, "podinfo", httpRouteWeights)
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
				},
				Config: httpRouteConfig(ns, tc.provider, "podinfo:6.0.1", tc.service, tc.extra, analysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					checkRecorded(&rec, 10, 40, 80, 0),
					c.checkHTTPRoute(ns, tc.parents, tc.hosts, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}

// testHTTPRouteRollback: a canary failing every request fails the built-in success rate at
// the first step and the release rolls back, naming the metric.
func testHTTPRouteRollback(t *testing.T, tc httpRouteCase) {
	c := testAccStack(t)
	ns := c.namespace(t)
	analysis := httpRouteAnalysis("3s", 2)
	failing := map[string]string{meshsim.AnnotationErrorRate: "1"}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					if tc.gateway {
						c.createGateway(t, ns)
					}
					c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
				},
				Config: httpRouteConfig(ns, tc.provider, "podinfo:6.0.0", tc.service, tc.extra, analysis),
			},
			{
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", failing) },
				Config:    httpRouteConfig(ns, tc.provider, "podinfo:6.0.1", tc.service, tc.extra, analysis),
				ExpectError: wrappedPattern(`Canary analysis failed at canary weight 10%: metric request-success-rate returned \d+\.\d\d, ` +
					`outside threshold_range \[min 99\] \(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkHTTPRoute(ns, tc.parents, tc.hosts, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
			},
			{
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.0", nil) },
				Config:    httpRouteConfig(ns, tc.provider, "podinfo:6.0.0", tc.service, tc.extra, analysis),
			},
		},
	})
}

// TestAccGatewayAPI_promotion reads Envoy Gateway's cluster metrics (gateway_api.metrics envoy).
func TestAccGatewayAPI_promotion(t *testing.T) { testHTTPRoutePromotion(t, gatewayCase) }

// TestAccGatewayAPI_rollback reads the application's own metrics (generic, the default).
func TestAccGatewayAPI_rollback(t *testing.T) {
	tc := gatewayCase
	tc.extra = ""
	testHTTPRouteRollback(t, tc)
}

func TestAccLinkerd_promotion(t *testing.T) { testHTTPRoutePromotion(t, linkerdCase) }

func TestAccLinkerd_rollback(t *testing.T) { testHTTPRouteRollback(t, linkerdCase) }

// TestAccGatewayAPI_planErrors: gateway_refs is required with gatewayapi and refused elsewhere.
func TestAccGatewayAPI_planErrors(t *testing.T) {
	testAccStack(t)
	analysis := httpRouteAnalysis("2s", 2)
	for name, tc := range map[string]struct{ provider, service, extra, want string }{
		"missing":   {"gatewayapi", linkerdService, "", `service.gateway_refs is required when mesh_provider = "gatewayapi"`},
		"misplaced": {"linkerd", gatewayService, "", `service.gateway_refs is only used with mesh_provider = "gatewayapi", not "linkerd"`},
		"block":     {"linkerd", linkerdService, `gateway_api = { metrics = "envoy" }`, `gateway_api is only used with mesh_provider = "gatewayapi"`},
	} {
		t.Run(name, func(t *testing.T) {
			resource.ParallelTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{{
					Config:      httpRouteConfig("default", tc.provider, "podinfo:6.0.0", tc.service, tc.extra, analysis),
					PlanOnly:    true,
					ExpectError: wrapped(tc.want),
				}},
			})
		})
	}
}

// TestAccGatewayAPI_chartPodLabels: the stack's Prometheus relabels the application's series of
// this namespace as kube-prometheus-stack's and prometheus-community/prometheus's default pod
// scraping does (namespace, pod; no kubernetes_namespace). With no label setting, the built-in
// checks find them, the release promotes, and the run's story says which labels it read.
func TestAccGatewayAPI_chartPodLabels(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespaceNamed(t, "chartlabels-")
	analysis := httpRouteAnalysis("2s", 5)
	config := func(image string) string {
		return httpRouteConfig(ns, "gatewayapi", image, gatewayService, "", analysis)
	}
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					c.createGateway(t, ns)
					c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
				},
				Config: config("podinfo:6.0.0"),
			},
			{
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil) },
				Config:    config("podinfo:6.0.1"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					c.checkHTTPRoute(ns, gatewayParents, gatewayHosts, 100, 0),
					resource.TestMatchResourceAttr(addr, "last_run", regexp.MustCompile(`by the labels namespace and pod`)),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}
