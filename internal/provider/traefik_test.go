package provider

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	traefikServices = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "traefikservices"}
	ingressRoutes   = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "ingressroutes"}
)

// traefikRouter: the release writes the TraefikService podinfo, which the user's
// IngressRoute for <namespace>.app.example.com sends its requests to, as in Flagger's Traefik
// tutorial. The host is the namespace's own: the stack's Traefik serves every namespace's
// IngressRoutes, and the simulator's client sends real requests to each host, so a shared
// host would have one namespace's requests answered by another's pods.
var traefikRouter = routerCase{
	meshProvider: "traefik",
	route:        traefikServices,
	routeKind:    "TraefikService",
	weights:      traefikWeights,
	userObjects: func(t *testing.T, c *testCluster, ns string) []objectRef {
		return []objectRef{c.createUserObject(t, ingressRoutes, ns, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "traefik.io/v1alpha1", "kind": "IngressRoute",
			"metadata": map[string]any{"name": "podinfo", "labels": map[string]any{"team": "web"}},
			"spec": map[string]any{
				"entryPoints": []any{"web"},
				"routes": []any{map[string]any{
					"match": "Host(`" + ns + ".app.example.com`)", "kind": "Rule",
					"services": []any{map[string]any{"name": "podinfo", "kind": "TraefikService"}},
				}},
			},
		}})}
	},
}

// traefikWeights reads the weights of the generated TraefikService's weighted services.
func traefikWeights(u *unstructured.Unstructured) (primary, canary int64, err error) {
	weighted, ok, _ := unstructured.NestedMap(u.Object, "spec", "weighted")
	if !ok {
		return 0, 0, fmt.Errorf("TraefikService %s has no spec.weighted: %v", u.GetName(), u.Object["spec"])
	}
	return sideWeights(&unstructured.Unstructured{Object: map[string]any{"rules": []any{weighted}}}, []string{"rules"}, "services", "name")
}

// TestAccTraefik runs the router scenarios through Traefik's built-in metrics; the user's
// IngressRoute is never written and the simulator, which routes through it, logs nothing.
func TestAccTraefik(t *testing.T) { runRouterAcceptance(t, traefikRouter) }
