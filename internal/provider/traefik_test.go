package provider

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// TestAccTraefik_apexMetadata is Flagger's Traefik e2e check of service.apex
// (test/traefik/test-canary.sh): its labels and annotations are on the TraefikService that the
// user's IngressRoute names, from the initialisation on and after a promotion.
func TestAccTraefik_apexMetadata(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	rc := traefikRouter
	rc.serviceLines = `
    apex = { labels = { test = "test-label" }, annotations = { test = "test-annotation" } }`
	analysis := httpRouteAnalysis("2s", 5)
	var user userState
	apexMetadata := checkCluster(func() error {
		u, err := c.dyn.Resource(traefikServices).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if u.GetLabels()["test"] != "test-label" {
			return fmt.Errorf("TraefikService %s/podinfo does not have the label test=test-label: %v", ns, u.GetLabels())
		}
		if u.GetAnnotations()["test"] != "test-annotation" {
			return fmt.Errorf("TraefikService %s/podinfo does not have the annotation test=test-annotation: %v", ns, u.GetAnnotations())
		}
		return nil
	})
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		Steps: []resource.TestStep{
			{
				PreConfig: func() {
					rc.create(t, c, ns, &user)
					rc.createTarget(t, c, ns, "podinfo:6.0.0")
				},
				Config: rc.config(ns, "podinfo:6.0.0", analysis),
				Check:  resource.ComposeAggregateTestCheckFunc(rc.checkRoute(c, ns, 100, 0), apexMetadata),
			},
			{
				PreConfig: func() { rc.setTarget(t, c, ns, "podinfo:6.0.1", nil) },
				Config:    rc.config(ns, "podinfo:6.0.1", analysis),
				Check: resource.ComposeAggregateTestCheckFunc(
					rc.primaryRuns(c, ns, "podinfo:6.0.1"), rc.checkRoute(c, ns, 100, 0), apexMetadata, user.checkUntouched(c, ns),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
		},
	})
}
