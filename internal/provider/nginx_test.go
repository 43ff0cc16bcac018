package provider

import (
	"fmt"
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var ingresses = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}

// nginxRouter: the release writes the canary Ingress podinfo-web-canary beside the user's
// Ingress podinfo-web for app.<namespace>.example.com (ingress-nginx serves a host and path once
// across namespaces), as in Flagger's NGINX tutorial. The user's Ingress is
// not named after the target, so the built-in queries prove that {{ ingress }} is ingress_ref's.
var nginxRouter = routerCase{
	meshProvider: "nginx",
	releaseLines: "\n  ingress_ref = { name = \"podinfo-web\" }",
	route:        ingresses,
	routeName:    "podinfo-web-canary",
	routeKind:    "Ingress",
	weights:      nginxWeights,
	abTesting:    true,
	userObjects: func(t *testing.T, c *testCluster, ns string) []objectRef {
		return []objectRef{c.createUserObject(t, ingresses, ns, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
			"metadata": map[string]any{
				"name": "podinfo-web", "labels": map[string]any{"team": "web"},
				"annotations": map[string]any{"nginx.ingress.kubernetes.io/proxy-body-size": "8m"},
			},
			"spec": map[string]any{
				"ingressClassName": "nginx",
				"rules": []any{map[string]any{"host": "app." + ns + ".example.com", "http": map[string]any{"paths": []any{map[string]any{
					"path": "/", "pathType": "Prefix",
					"backend": map[string]any{"service": map[string]any{"name": "podinfo", "port": map[string]any{"number": int64(80)}}},
				}}}}},
			},
		}})}
	},
}

// nginxWeights reads the canary Ingress's annotations: canary-weight (0 when absent) and
// whether the A/B header (x-canary: insider) is in place.
func nginxWeights(u *unstructured.Unstructured) (int64, int64, error) {
	a := u.GetAnnotations()
	const p = "nginx.ingress.kubernetes.io/"
	if a[p+"canary"] != "true" {
		return 0, 0, fmt.Errorf("Ingress %s is no canary: annotations %v", u.GetName(), a)
	}
	canary := int64(0)
	if raw, ok := a[p+"canary-weight"]; ok {
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("canary-weight %q: %v", raw, err)
		}
		canary = n
	}
	_, matched := a[p+"canary-by-header"]
	if matched && (a[p+"canary-by-header"] != "x-canary" || a[p+"canary-by-header-value"] != "insider") {
		return 0, 0, fmt.Errorf("A/B annotations %v, want canary-by-header x-canary with value insider", a)
	}
	return abState(100-canary, canary, matched)
}

// TestAccNginx runs the router scenarios, A/B testing included, through ingress-nginx's request
// metrics; the user's Ingress is never written and the simulator, which routes through it, logs
// nothing.
func TestAccNginx(t *testing.T) { runRouterAcceptance(t, nginxRouter) }
