package provider

import (
	"context"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

var (
	istioVirtualServices  = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1beta1", Resource: "virtualservices"}
	istioDestinationRules = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1beta1", Resource: "destinationrules"}
)

// istioServiceSettings are the Istio settings of the acceptance tests: Flagger's e2e Canary
// (test/istio) adds a public gateway next to the mesh, a host, a uri match, retries and a
// timeout.
const istioServiceSettings = `
    gateways    = ["istio-system/public-gateway", "mesh"]
    hosts       = ["app.example.com"]
    match       = [{ uri = { prefix = "/" } }]
    retries     = { attempts = 3, per_try_timeout = "1s", retry_on = "gateway-error,connect-failure,refused-stream" }
    timeout     = "30s"
    traffic_policy = { tls_mode = "ISTIO_MUTUAL" }`

func istioConfig(ns, workload, analysis string) string {
	return strings.Replace(strings.Replace(releaseConfig(ns, workload, analysis, ""),
		`mesh_provider = "osm"`, `mesh_provider = "istio"`, 1),
		`target_port = "9898"`, `target_port = "9898"`+istioServiceSettings, 1)
}

// istioWeights reads the primary and canary weights of the VirtualService's first route.
func istioWeights(u *unstructured.Unstructured) (primary, canary int64, err error) {
	routes, _, _ := unstructured.NestedSlice(u.Object, "spec", "http")
	if len(routes) != 1 {
		return 0, 0, fmt.Errorf("VirtualService %s has %d http routes, want 1", u.GetName(), len(routes))
	}
	dests, _, _ := unstructured.NestedSlice(routes[0].(map[string]any), "route")
	found := 0
	for _, d := range dests {
		m, _ := d.(map[string]any)
		host, _, _ := unstructured.NestedString(m, "destination", "host")
		w, ok := m["weight"].(int64)
		if !ok {
			return 0, 0, fmt.Errorf("destination %v has no integer weight", m)
		}
		switch host {
		case "podinfo-primary":
			primary, found = w, found+1
		case "podinfo-canary":
			canary, found = w, found+1
		}
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("VirtualService %s has destinations %v", u.GetName(), dests)
	}
	return primary, canary, nil
}

// checkIstioObjects compares the live objects with what the configuration asks for: the
// split, and every setting kept through the weight changes.
func (c *testCluster) checkIstioObjects(ns string, primary, canary int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		ctx := context.Background()
		vs, err := c.dyn.Resource(istioVirtualServices).Namespace(ns).Get(ctx, "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p, cw, err := istioWeights(vs)
		if err != nil {
			return err
		}
		if p != primary || cw != canary {
			return fmt.Errorf("VirtualService is %d/%d, want %d/%d", p, cw, primary, canary)
		}
		spec := vs.Object["spec"].(map[string]any)
		route := spec["http"].([]any)[0].(map[string]any)
		for what, pair := range map[string][2]any{
			"gateways": {spec["gateways"], []any{"istio-system/public-gateway", "mesh"}},
			"hosts":    {spec["hosts"], []any{"app.example.com", "podinfo"}},
			"retries":  {route["retries"], map[string]any{"attempts": int64(3), "perTryTimeout": "1s", "retryOn": "gateway-error,connect-failure,refused-stream"}},
			"timeout":  {route["timeout"], "30s"},
			"match":    {route["match"], []any{map[string]any{"uri": map[string]any{"prefix": "/"}}}},
		} {
			if !reflect.DeepEqual(pair[0], pair[1]) {
				return fmt.Errorf("VirtualService %s = %v, want %v", what, pair[0], pair[1])
			}
		}
		for _, name := range []string{"podinfo-primary", "podinfo-canary"} {
			dr, err := c.dyn.Resource(istioDestinationRules).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			want := map[string]any{"host": name, "trafficPolicy": map[string]any{"tls": map[string]any{"mode": "ISTIO_MUTUAL"}}}
			if !reflect.DeepEqual(dr.Object["spec"], want) {
				return fmt.Errorf("DestinationRule %s spec %v, want %v", name, dr.Object["spec"], want)
			}
		}
		return nil
	})
}

// TestAccIstio_promotion follows Flagger's Istio e2e test: initialise, then promote a new
// image step by step; the route keeps its gateways, hosts, retries and timeout throughout,
// and destroy removes the generated objects.
func TestAccIstio_promotion(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	analysis := strings.Replace(strings.Replace(healthyAnalysis, "max_weight  = 50\n", "", 1), "step_weight = 10", "step_weights = [10, 30, 50]", 1)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		// The VirtualService is attached to a gateway: destroy hands it over to the apex
		// Service (north-south traffic keeps being served) instead of deleting it.
		CheckDestroy: checkCluster(func() error {
			ctx := context.Background()
			if _, err := c.dyn.Resource(istioDestinationRules).Namespace(ns).Get(ctx, "podinfo-primary", metav1.GetOptions{}); err == nil {
				return fmt.Errorf("DestinationRule podinfo-primary is left after destroy")
			}
			vs, err := c.dyn.Resource(istioVirtualServices).Namespace(ns).Get(ctx, "podinfo", metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("the gateway's VirtualService was deleted by destroy: %v", err)
			}
			if vs.GetLabels()[router.LabelRelease] != "" || vs.GetAnnotations()[router.AnnotationLeftBehind] == "" {
				return fmt.Errorf("VirtualService podinfo is still marked as the release's after destroy: labels %v", vs.GetLabels())
			}
			routes, _, _ := unstructured.NestedSlice(vs.Object, "spec", "http")
			for _, route := range routes {
				dests, _, _ := unstructured.NestedSlice(route.(map[string]any), "route")
				if len(dests) != 1 {
					return fmt.Errorf("a left-behind route has %d destinations, want the apex only", len(dests))
				}
				if host, _, _ := unstructured.NestedString(dests[0].(map[string]any), "destination", "host"); host != "podinfo" {
					return fmt.Errorf("a left-behind route goes to %q, want the apex Service podinfo", host)
				}
			}
			return nil
		}),
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil)) },
				Config:    istioConfig(ns, targetRefWorkload("podinfo:6.0.0"), analysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkReady(ns, "podinfo-primary"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkReplicas(ns, "podinfo", 0),
					c.checkIstioObjects(ns, 100, 0),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() {
					rec = c.recordObjectWeights(t, istioVirtualServices, ns, "podinfo", istioWeights)
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
				},
				Config: istioConfig(ns, targetRefWorkload("podinfo:6.0.1"), analysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					func(s *terraform.State) error { return c.checkWeights(rec, 10, 30, 50, 0)(s) },
					c.checkIstioObjects(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					// The built-in checks read real values: the canary took traffic. Over a
					// window: the series go stale once the canary is scaled to zero.
					checkCluster(func() error {
						v, err := c.istioRequests(fmt.Sprintf(`reporter="destination",destination_workload_namespace=%q,destination_workload="podinfo"`, ns))
						if err != nil || v <= 0 {
							return fmt.Errorf("no destination-reported requests of the canary (value %v, error %v)", v, err)
						}
						return nil
					}),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}

// TestAccIstio_rollback: a canary failing half of its requests fails Istio's built-in success
// rate at the first step; the apply fails naming the metric and the route is back at 100/0.
func TestAccIstio_rollback(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: istioConfig(ns, manifestWorkload("podinfo:6.0.0", "0"), healthyAnalysis)},
			{
				// 200 requests/s give the 10 % canary enough requests per window for a steady rate.
				PreConfig: func() { c.setServiceAnnotation(t, ns, "podinfo", "sim.canary-release.dev/rps", "200") },
				Config:    istioConfig(ns, manifestWorkload("podinfo:6.0.1", "0.5"), healthyAnalysis),
				// The destination reporter sees only the canary's own requests: about 50%.
				ExpectError: wrappedPattern(`canary weight 10%: metric request-success-rate returned (4[5-9]|5[0-5])\.\d\d, outside threshold_range \[min 99\] ` +
					`\(failed checks: 2 of threshold 2\)\. Rolled back at canary weight 10%: 100% of traffic is back on the primary podinfo-primary`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					resource.TestMatchResourceAttr(addr, "status.message", regexp.MustCompile("request-success-rate")),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkIstioObjects(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
			},
		},
	})
}
