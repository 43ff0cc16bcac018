package provider

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"

	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// knativeRouter: the release targets the user's Knative Service podinfo and splits its
// spec.traffic between the pinned primary and canary revisions; the simulator plays Knative's
// controller (Revisions and their pods) and routes by the Service's served traffic.
var knativeRouter = routerCase{
	meshProvider: "knative",
	route:        meshsim.KnativeServiceGVR,
	routeKind:    "Knative Service",
	weights:      knativeWeights,
	target: &targetHooks{
		ref:         `{ api_version = "serving.knative.dev/v1", kind = "Service", name = "podinfo" }`,
		create:      createKnativeService,
		set:         setKnativeTemplate,
		primaryRuns: knativePrimaryRuns,
		idle:        knativeIdle,
	},
}

// knativeWeights reads spec.traffic: one entry (all on the primary) or the canary's then the
// primary's, as the release writes them.
func knativeWeights(u *unstructured.Unstructured) (int64, int64, error) {
	traffic, _, _ := unstructured.NestedSlice(u.Object, "spec", "traffic")
	percent := func(i int) int64 {
		e, _ := traffic[i].(map[string]any)
		n, _ := e["percent"].(int64)
		return n
	}
	switch len(traffic) {
	case 1:
		return percent(0), 0, nil
	case 2:
		return percent(1), percent(0), nil
	}
	return 0, 0, fmt.Errorf("spec.traffic holds %d entries", len(traffic))
}

func knativeTemplate(image string, annotations map[string]string) map[string]any {
	meta := map[string]any{}
	if len(annotations) > 0 {
		a := map[string]any{}
		for k, v := range annotations {
			a[k] = v
		}
		meta["annotations"] = a
	}
	return map[string]any{"metadata": meta, "spec": map[string]any{"containers": []any{map[string]any{
		"name": "podinfo", "image": image, "ports": []any{map[string]any{"containerPort": int64(9898)}},
	}}}}
}

func createKnativeService(t *testing.T, c *testCluster, ns, image string, annotations map[string]string) {
	t.Helper()
	c.createUserObject(t, meshsim.KnativeServiceGVR, ns, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "serving.knative.dev/v1", "kind": "Service",
		"metadata": map[string]any{"name": "podinfo"},
		"spec":     map[string]any{"template": knativeTemplate(image, annotations)},
	}})
}

// setKnativeTemplate gives the Service a new template, as the user's own apply would; the
// release's traffic and pins are left as they are.
func setKnativeTemplate(t *testing.T, c *testCluster, ns, image string, annotations map[string]string) {
	t.Helper()
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		api := c.dyn.Resource(meshsim.KnativeServiceGVR).Namespace(ns)
		svc, err := api.Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if err := unstructured.SetNestedMap(svc.Object, knativeTemplate(image, annotations), "spec", "template"); err != nil {
			return err
		}
		_, err = api.Update(context.Background(), svc, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// knativeIdle: the canary revision carries no traffic.
func knativeIdle(c *testCluster, ns string) resource.TestCheckFunc {
	return routerCase{route: meshsim.KnativeServiceGVR, routeKind: "Knative Service", weights: knativeWeights}.checkRoute(c, ns, 100, 0)
}

// knativePrimaryRuns checks the image of the pinned primary revision.
func knativePrimaryRuns(c *testCluster, ns, image string) resource.TestCheckFunc {
	return checkCluster(func() error {
		svc, err := c.dyn.Resource(meshsim.KnativeServiceGVR).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		primary := svc.GetAnnotations()["canary-release.dev/primary-revision"]
		rev, err := c.dyn.Resource(meshsim.KnativeRevisionGVR).Namespace(ns).Get(context.Background(), primary, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("primary revision %q: %w", primary, err)
		}
		containers, _, _ := unstructured.NestedSlice(rev.Object, "spec", "containers")
		if len(containers) == 0 {
			return fmt.Errorf("revision %s has no containers", primary)
		}
		if got, _ := containers[0].(map[string]any)["image"].(string); got != image {
			return fmt.Errorf("primary revision %s runs %s, want %s", primary, got, image)
		}
		return nil
	})
}

// TestAccKnative runs the router scenarios (promotion, rollback naming the metric) on a
// Knative Service target, through Kourier's Envoy cluster stats; the simulator, which routes
// by the Service's served traffic, logs nothing.
func TestAccKnative(t *testing.T) { runRouterAcceptance(t, knativeRouter) }
