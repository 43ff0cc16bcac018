package provider

import (
	"encoding/json"
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// skipperRouter: the release writes the Ingress podinfo-canary beside the user's Ingress
// podinfo for app.example.com, as in Flagger's Skipper tutorial; its Weight(100) predicate
// makes Skipper prefer it, and False() at canary weight 0 leaves the requests to the user's.
// Flagger's Skipper router has no A/B testing.
var skipperRouter = routerCase{
	meshProvider: "skipper",
	releaseLines: "\n  ingress_ref = { name = \"podinfo\" }",
	route:        ingresses,
	routeName:    "podinfo-canary",
	routeKind:    "Ingress",
	weights:      skipperWeights,
	userObjects: func(t *testing.T, c *testCluster, ns string) []objectRef {
		return []objectRef{c.createUserObject(t, ingresses, ns, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
			"metadata": map[string]any{"name": "podinfo", "labels": map[string]any{"team": "web"},
				"annotations": map[string]any{"kubernetes.io/ingress.class": "skipper"}},
			"spec": map[string]any{
				"rules": []any{map[string]any{
					"host": "app.example.com",
					"http": map[string]any{"paths": []any{map[string]any{
						"path": "/", "pathType": "Prefix",
						"backend": map[string]any{"service": map[string]any{"name": "podinfo", "port": map[string]any{"number": int64(80)}}},
					}}},
				}},
			},
		}})}
	},
}

// skipperWeights reads the generated Ingress's zalando.org/backend-weights.
func skipperWeights(u *unstructured.Unstructured) (primary, canary int64, err error) {
	raw, ok := u.GetAnnotations()["zalando.org/backend-weights"]
	if !ok {
		return 0, 0, fmt.Errorf("Ingress %s has no backend-weights annotation: %v", u.GetName(), u.GetAnnotations())
	}
	var w map[string]int64
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		return 0, 0, fmt.Errorf("Ingress %s: backend-weights %s: %v", u.GetName(), raw, err)
	}
	return w["podinfo-primary"], w["podinfo-canary"], nil
}

// TestAccSkipper runs the router scenarios through Skipper's built-in metrics; the user's
// Ingress is never written and the simulator, which routes through both Ingresses, logs nothing.
func TestAccSkipper(t *testing.T) { runRouterAcceptance(t, skipperRouter) }
