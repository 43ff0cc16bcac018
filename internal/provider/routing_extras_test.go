package provider

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// Acceptance tests of what only some routers have: A/B testing on Istio and the HTTPRoute
// routers and Istio mirroring (session affinity: session_expiry_test.go).

// abAnalysis' condition as each router writes it.
var (
	// Istio's carries istioServiceSettings' service.match too.
	istioABMatch = []any{map[string]any{
		"uri":     map[string]any{"prefix": "/"},
		"headers": map[string]any{"x-canary": map[string]any{"exact": "insider"}},
	}}
	httpRouteABMatch = []any{map[string]any{
		"path":    map[string]any{"type": "PathPrefix", "value": "/"},
		"headers": []any{map[string]any{"type": "Exact", "name": "x-canary", "value": "insider"}},
	}}
)

// lastOnly is u with only the last element of the list at field: the route or rule every
// request no earlier one takes follows, where the split is.
func lastOnly(u *unstructured.Unstructured, field ...string) (*unstructured.Unstructured, []any) {
	list, _, _ := unstructured.NestedSlice(u.Object, field...)
	plain := u.DeepCopy()
	if len(list) > 0 {
		_ = unstructured.SetNestedSlice(plain.Object, list[len(list)-1:], field...)
	}
	return plain, list
}

// istioABWeights reads the VirtualService's split and whether its first route is the A/B route:
// the header match, all to the canary.
func istioABWeights(u *unstructured.Unstructured) (int64, int64, error) {
	plain, routes := lastOnly(u, "spec", "http")
	p, cw, err := istioWeights(plain)
	if err != nil || len(routes) == 1 {
		return p, cw, err
	}
	first, _ := routes[0].(map[string]any)
	ap, acw, err := istioWeights(withList(u, []any{first}, "spec", "http"))
	if len(routes) != 2 || err != nil || !reflect.DeepEqual(first["match"], istioABMatch) || ap != 0 || acw != 100 {
		return 0, 0, fmt.Errorf("http routes %v, want the A/B route (match %v, all to the canary) and the split", routes, istioABMatch)
	}
	return abState(p, cw, true)
}

// httpRouteABWeights is istioABWeights for an HTTPRoute.
func httpRouteABWeights(u *unstructured.Unstructured) (int64, int64, error) {
	plain, rules := lastOnly(u, "spec", "rules")
	p, cw, err := httpRouteWeights(plain)
	if err != nil || len(rules) == 1 {
		return p, cw, err
	}
	first, _ := rules[0].(map[string]any)
	ap, acw, err := httpRouteWeights(withList(u, []any{first}, "spec", "rules"))
	if len(rules) != 2 || err != nil || !reflect.DeepEqual(first["matches"], httpRouteABMatch) || ap != 0 || acw != 100 {
		return 0, 0, fmt.Errorf("rules %v, want the A/B rule (matches %v, all to the canary) and the split", rules, httpRouteABMatch)
	}
	return abState(p, cw, true)
}

func withList(u *unstructured.Unstructured, list []any, field ...string) *unstructured.Unstructured {
	out := u.DeepCopy()
	_ = unstructured.SetNestedSlice(out.Object, list, field...)
	return out
}

// TestAccRelease_abTestMeshes: A/B testing on Istio, Gateway API and Linkerd. During the
// iterations the router object carries the header match to the canary and the split stays
// 100/0; the simulator sends only the tagged requests to the canary, whose metrics pass, and
// the release promotes.
func TestAccRelease_abTestMeshes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		config  func(ns, image string) string
		gvr     string
		extract func(*unstructured.Unstructured) (int64, int64, error)
		gateway bool
	}{
		{"istio", func(ns, image string) string { return istioConfig(ns, targetRefWorkload(image), abAnalysis) }, "istio", istioABWeights, false},
		{"gatewayapi", func(ns, image string) string {
			return httpRouteConfig(ns, "gatewayapi", image, gatewayService, gatewayCase.extra, abAnalysis)
		}, "httproute", httpRouteABWeights, true},
		{"linkerd", func(ns, image string) string {
			return httpRouteConfig(ns, "linkerd", image, linkerdService, "", abAnalysis)
		}, "httproute", httpRouteABWeights, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testAccStack(t)
			ns := c.namespace(t)
			gvr := httpRoutes
			if tc.gvr == "istio" {
				gvr = istioVirtualServices
			}
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
						Config:            tc.config(ns, "podinfo:6.0.0"),
						ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
					},
					{
						PreConfig: func() {
							c.tagTraffic(t, ns)
							rec = c.recordObjectWeights(t, gvr, ns, "podinfo", tc.extract)
							c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
						},
						Config: tc.config(ns, "podinfo:6.0.1"),
						Check: resource.ComposeAggregateTestCheckFunc(
							c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
							checkSeen(tc.name+" route podinfo", &rec, abMarked, 0),
							c.checkReplicas(ns, "podinfo", 0),
						),
						ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
					},
				},
			})
		})
	}
}

// istioMirrorWeights reads the VirtualService's split, and notes a mirror to the canary as
// abMarked (it may only be there at 100/0: the mirror step).
func istioMirrorWeights(u *unstructured.Unstructured) (int64, int64, error) {
	p, cw, err := istioWeights(u)
	if err != nil {
		return 0, 0, err
	}
	routes, _, _ := unstructured.NestedSlice(u.Object, "spec", "http")
	host, _, _ := unstructured.NestedString(routes[0].(map[string]any), "mirror", "host")
	if host != "podinfo-canary" {
		return p, cw, nil
	}
	if pct, _, _ := unstructured.NestedFieldNoCopy(routes[0].(map[string]any), "mirrorPercentage", "value"); pct != int64(50) && pct != 50.0 {
		return 0, 0, fmt.Errorf("mirrorPercentage %v, want 50", pct)
	}
	return abState(p, cw, true)
}

// istioRequests sums Istio's request counts over the last 10 minutes; no series counts 0.
func (c *testCluster) istioRequests(selector string) (float64, error) {
	v, err := c.prom.Query(context.Background(), fmt.Sprintf(`sum(max_over_time(istio_requests_total{%s}[10m]))`, selector))
	if errors.Is(err, metrics.ErrNoValues) {
		return 0, nil
	}
	return v, err
}

// TestAccIstio_mirror: with mirror, the first interval copies half of the requests to a canary
// that fails them all. Its sidecar reports the failures, so the analysis rolls back at the
// mirror step, before the canary gets any weight; the clients saw no failure at all.
func TestAccIstio_mirror(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	analysis := strings.Replace(abAnalysis, `match      = [{ headers = { "x-canary" = { exact = "insider" } } }]`, `mirror        = true
    mirror_weight = 50`, 1)
	analysis = strings.Replace(analysis, "iterations = 3", "step_weights = [50]", 1)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() { c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil)) },
				Config:    istioConfig(ns, targetRefWorkload("podinfo:6.0.0"), analysis),
			},
			{
				PreConfig: func() {
					rec = c.recordObjectWeights(t, istioVirtualServices, ns, "podinfo", istioMirrorWeights)
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", map[string]string{meshsim.AnnotationErrorRate: "1"})
				},
				Config: istioConfig(ns, targetRefWorkload("podinfo:6.0.1"), analysis),
				ExpectError: wrappedPattern(`Canary analysis failed at canary weight 0%, requests mirrored to the canary: metric request-success-rate returned 0\.00, ` +
					`outside threshold_range \[min 99\]`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.0"),
					c.checkIstioObjects(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
					// Mirrored, then back to 100/0: the canary never had weight.
					func(s *terraform.State) error { return checkSeen("VirtualService podinfo", &rec, abMarked, 0)(s) },
					checkCluster(func() error {
						mirrored, err := c.istioRequests(fmt.Sprintf(`reporter="destination",destination_workload_namespace=%q,destination_workload="podinfo"`, ns))
						if err != nil || mirrored == 0 {
							return fmt.Errorf("requests the canary answered: %v, %v; want the mirrored ones", mirrored, err)
						}
						failed, err := c.istioRequests(fmt.Sprintf(`reporter="source",destination_service_namespace=%q,response_code=~"5.."`, ns))
						if err != nil || failed != 0 {
							return fmt.Errorf("failed requests the clients saw: %v, %v; want none (mirrored answers are dropped)", failed, err)
						}
						return nil
					}),
				),
			},
			{
				// Back to the promoted template, so that destroy may revert to it.
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.0", nil) },
				Config:    istioConfig(ns, targetRefWorkload("podinfo:6.0.0"), analysis),
			},
		},
	})
}

// TestAccIstio_blueGreen: blue/green with Istio's built-in metrics, which the canary's sidecar
// reports for the load tester's requests as for any other: the iterations judge test traffic
// alone, then the switch, then the promotion.
func TestAccIstio_blueGreen(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	config := func(image string) string {
		return istioConfig(ns, manifestWorkload(image, "0"), c.blueGreenAnalysis(ns))
	}
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{Config: config("podinfo:6.0.0")},
			{
				PreConfig: func() { rec = c.recordObjectWeights(t, istioVirtualServices, ns, "podinfo", istioWeights) },
				Config:    config("podinfo:6.0.1"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					func(s *terraform.State) error { return checkSeen("VirtualService podinfo", &rec, 100, 0)(s) },
					c.checkIstioObjects(ns, 100, 0),
					checkCluster(func() error {
						tests, err := c.istioRequests(fmt.Sprintf(`reporter="destination",destination_workload_namespace=%q,destination_workload="podinfo",source_workload=%q`,
							ns, meshsim.LoadTesterName))
						if err != nil || tests == 0 {
							return fmt.Errorf("test requests the canary's sidecar reported: %v, %v; want some", tests, err)
						}
						return nil
					}),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}
