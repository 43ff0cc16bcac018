package provider

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/gloo"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// abAnalysis is an A/B testing run: three iterations during which the requests carrying
// x-canary: insider go to the canary.
const abAnalysis = `
    interval   = "2s"
    threshold  = 2
    iterations = 3
    match      = [{ headers = { "x-canary" = { exact = "insider" } } }]
    metrics    = [` + flaggerMetrics + `
    ]`

// abMarked is what the weight recorders note for "100/0 with the A/B matcher in place": they
// record one number per state, and the matcher is what A/B testing changes.
const abMarked = 1000

// abState encodes a split and whether the A/B matcher is present for a weight recorder.
func abState(primary, canary int64, matched bool) (int64, int64, error) {
	if !matched {
		return primary, canary, nil
	}
	if primary != 100 || canary != 0 {
		return 0, 0, fmt.Errorf("the A/B matcher is in place at %d/%d, want 100/0", primary, canary)
	}
	return 100 - abMarked, abMarked, nil
}

// tagTraffic has 30% of the apex's requests carry the header the analysis matches.
func (c *testCluster) tagTraffic(t *testing.T, ns string) {
	t.Helper()
	c.setServiceAnnotation(t, ns, "podinfo", meshsim.AnnotationABHeader, "x-canary=insider")
	c.setServiceAnnotation(t, ns, "podinfo", meshsim.AnnotationABShare, "0.3")
}

// apisixABWeights reads the weighted rule's split of the generated ApisixRoute and whether it
// has the A/B rule: the weighted rule's match narrowed by the header, to the canary alone.
func apisixABWeights(u *unstructured.Unstructured) (int64, int64, error) {
	rules, _, _ := unstructured.NestedSlice(u.Object, "spec", "http")
	var weighted []any
	matched := false
	for _, r := range rules {
		rule, _ := r.(map[string]any)
		exprs, _, _ := unstructured.NestedSlice(rule, "match", "exprs")
		if len(exprs) == 0 {
			weighted = append(weighted, r)
			continue
		}
		wantExprs := []any{map[string]any{"subject": map[string]any{"scope": "Header", "name": "x-canary"}, "op": "Equal", "value": "insider"}}
		wantBackends := []any{map[string]any{"serviceName": "podinfo-canary", "servicePort": int64(80), "weight": int64(100)}}
		if !reflect.DeepEqual(exprs, wantExprs) || !reflect.DeepEqual(rule["backends"], wantBackends) || rule["priority"] != int64(10001) {
			return 0, 0, fmt.Errorf("A/B rule %v, want exprs %v and backends %v at priority 10001", rule, wantExprs, wantBackends)
		}
		matched = true
	}
	plain := u.DeepCopy()
	_ = unstructured.SetNestedSlice(plain.Object, weighted, "spec", "http")
	p, cw, err := apisixWeights(plain)
	if err != nil {
		return 0, 0, err
	}
	return abState(p, cw, matched)
}

// glooABWeights reads the RouteTable's split and whether its first route is the A/B route:
// the header matcher, to the canary Upstream.
func glooABWeights(u *unstructured.Unstructured) (int64, int64, error) {
	routes, _, _ := unstructured.NestedSlice(u.Object, "spec", "routes")
	matched := len(routes) == 2
	if matched {
		ab, _ := routes[0].(map[string]any)
		wantMatchers := []any{map[string]any{"headers": []any{map[string]any{"name": "x-canary", "value": "insider"}}}}
		up, _, _ := unstructured.NestedString(ab, "routeAction", "single", "upstream", "name")
		if !reflect.DeepEqual(ab["matchers"], wantMatchers) || up != canaryUpstream(u.GetNamespace()) {
			return 0, 0, fmt.Errorf("A/B route %v, want matchers %v to Upstream %s", ab, wantMatchers, canaryUpstream(u.GetNamespace()))
		}
		routes = routes[1:]
	}
	plain := u.DeepCopy()
	_ = unstructured.SetNestedSlice(plain.Object, routes, "spec", "routes")
	p, cw, err := glooObjectWeights(plain, gloo.ModeRouteTable)
	if err != nil {
		return 0, 0, err
	}
	return abState(p, cw, matched)
}

// checkSeen compares the states a recorder saw with want.
func checkSeen(what string, r **weightRecorder, want ...int64) resource.TestCheckFunc {
	return checkCluster(func() error {
		if got := (*r).seen(); !reflect.DeepEqual(got, want) {
			return fmt.Errorf("%s went through %v, want %v (%d: 100/0 with the A/B matcher)", what, got, want, abMarked)
		}
		return nil
	})
}

func TestAccRelease_abTestApisix(t *testing.T) {
	c := testAccStack(t)
	ns, seal := c.apisixNamespace(t)
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
					c.createRoute(t, userRoute(ns))
				},
				Config:            apisixConfig(ns, "podinfo:6.0.0", "podinfo", abAnalysis),
				Check:             c.checkCanaryRoute(ns, 100, 0),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() {
					seal()
					c.tagTraffic(t, ns)
					rec = c.recordObjectWeights(t, apisixRoutes, ns, canaryRoute, apisixABWeights)
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
				},
				Config: apisixConfig(ns, "podinfo:6.0.1", "podinfo", abAnalysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					checkSeen("ApisixRoute "+canaryRoute, &rec, abMarked, 0),
					c.checkCanaryRoute(ns, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}

func TestAccRelease_abTestGloo(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	mode := gloo.ModeRouteTable
	config := func(image string) string { return glooConfig(ns, manifestWorkload(image, "0"), abAnalysis, "") }
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig:         func() { c.createVirtualService(t, ns, mode) },
				Config:            config("podinfo:6.0.0"),
				Check:             c.checkGlooObjects(ns, mode, 100, 0),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() {
					c.tagTraffic(t, ns)
					rec = c.recordObjectWeights(t, router.RouteTableResource, ns, "podinfo", glooABWeights)
				},
				Config: config("podinfo:6.0.1"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					checkSeen("RouteTable podinfo", &rec, abMarked, 0),
					c.checkGlooObjects(ns, mode, 100, 0),
					c.checkReplicas(ns, "podinfo", 0),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}
