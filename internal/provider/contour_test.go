package provider

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var httpProxies = schema.GroupVersionResource{Group: "projectcontour.io", Version: "v1", Resource: "httpproxies"}

// contourRouter: the release writes the HTTPProxy podinfo, which the user's root HTTPProxy
// for app.example.com includes, as in Flagger's Contour tutorial.
var contourRouter = routerCase{
	meshProvider: "contour",
	route:        httpProxies,
	routeKind:    "HTTPProxy",
	weights:      contourWeights,
	abTesting:    true,
	userObjects: func(t *testing.T, c *testCluster, ns string) []objectRef {
		return []objectRef{c.createUserObject(t, httpProxies, ns, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "projectcontour.io/v1", "kind": "HTTPProxy",
			"metadata": map[string]any{"name": "root"},
			"spec": map[string]any{
				"virtualhost": map[string]any{"fqdn": "app.example.com"},
				"includes":    []any{map[string]any{"name": "podinfo", "namespace": ns}},
			},
		}})}
	},
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

// TestAccContour runs the router scenarios, A/B testing included, through Envoy's cluster
// stats; the user's root HTTPProxy is never written and the simulator, which routes through
// it, logs nothing.
func TestAccContour(t *testing.T) { runRouterAcceptance(t, contourRouter) }
