package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// rootNamespace creates the namespace of the platform team's objects next to ns (named after
// it, so that it sorts after it), with the same invariant check on cleanup as namespace.
func (c *testCluster) rootNamespace(t *testing.T, ns string) string {
	t.Helper()
	name := ns + "-root"
	ctx := context.Background()
	if _, err := c.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.assertNoViolations(t, name)
		_ = c.kube.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	})
	return name
}

// createRootVirtualService is the platform team's root VirtualService in rootNS: the apex's
// in-mesh host, every path delegated to the VirtualService podinfo of ns.
func (c *testCluster) createRootVirtualService(t *testing.T, rootNS, ns string) {
	t.Helper()
	root := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
		"metadata": map[string]any{"name": "podinfo-root", "namespace": rootNS},
		"spec": map[string]any{
			"hosts":    []any{"podinfo." + ns + ".svc.cluster.local"},
			"gateways": []any{"mesh"},
			"http": []any{map[string]any{
				"match":    []any{map[string]any{"uri": map[string]any{"prefix": "/"}}},
				"delegate": map[string]any{"name": "podinfo", "namespace": ns},
			}},
		},
	}}
	if _, err := c.dyn.Resource(istioVirtualServices).Namespace(rootNS).Create(context.Background(), root, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkDelegate checks that the VirtualService podinfo is a delegate (no hosts, no gateways)
// and, unless leftBehind, the release's, holding primary/canary.
func (c *testCluster) checkDelegate(ns string, leftBehind bool, primary, canary int64) error {
	vs, err := c.dyn.Resource(istioVirtualServices).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
	if err != nil {
		return err
	}
	spec, _ := vs.Object["spec"].(map[string]any)
	if _, ok := spec["hosts"]; ok {
		return fmt.Errorf("the delegate VirtualService has hosts %v", spec["hosts"])
	}
	if _, ok := spec["gateways"]; ok {
		return fmt.Errorf("the delegate VirtualService has gateways %v", spec["gateways"])
	}
	if leftBehind {
		if vs.GetAnnotations()[router.AnnotationLeftBehind] == "" {
			return fmt.Errorf("VirtualService podinfo was not handed over on destroy: annotations %v", vs.GetAnnotations())
		}
		routes, _, _ := unstructured.NestedSlice(vs.Object, "spec", "http")
		if len(routes) != 1 || !strings.Contains(fmt.Sprint(routes[0]), "host:podinfo ") {
			return fmt.Errorf("the handed-over delegate routes %v, want everything to the apex Service podinfo", routes)
		}
		return nil
	}
	p, cw, err := istioWeights(vs)
	if err != nil {
		return err
	}
	if p != primary || cw != canary {
		return fmt.Errorf("the delegate holds %d/%d, want %d/%d", p, cw, primary, canary)
	}
	return nil
}

// TestAccIstio_delegation: with service.delegation the VirtualService is a delegate under the
// platform team's root VirtualService, in a namespace of its own. A release promotes through
// it, the next one rolls back, and destroy hands the delegate over to the apex Service, so the
// root's route keeps answering.
func TestAccIstio_delegation(t *testing.T) {
	c := testAccStack(t)
	ns := c.namespace(t)
	rootNS := c.rootNamespace(t, ns)
	config := func(image string) string {
		return strings.Replace(strings.Replace(releaseConfig(ns, targetRefWorkload(image), httpRouteAnalysis("2s", 2), ""),
			`mesh_provider = "osm"`, `mesh_provider = "istio"`, 1),
			`target_port = "9898"`, `target_port = "9898"
    delegation  = true`, 1)
	}
	var rec *weightRecorder
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
		CheckDestroy:             checkCluster(func() error { return c.checkDelegate(ns, true, 0, 0) }),
		Steps: []resource.TestStep{
			{
				// The root comes after the delegate it names: until then, the apex Service answers.
				PreConfig:         func() { c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil)) },
				Config:            config("podinfo:6.0.0"),
				Check:             checkCluster(func() error { return c.checkDelegate(ns, false, 100, 0) }),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
			},
			{
				PreConfig: func() {
					c.createRootVirtualService(t, rootNS, ns)
					rec = c.recordObjectWeights(t, istioVirtualServices, ns, "podinfo", istioWeights)
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil)
				},
				Config: config("podinfo:6.0.1"),
				Check: resource.ComposeAggregateTestCheckFunc(
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					func(s *terraform.State) error { return checkSeen("delegate podinfo", &rec, 10, 40, 80, 0)(s) },
					checkCluster(func() error { return c.checkDelegate(ns, false, 100, 0) }),
				),
				ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
			},
			{
				PreConfig: func() {
					c.setTemplate(t, ns, "podinfo", "podinfo:6.0.2", map[string]string{meshsim.AnnotationErrorRate: "1"})
				},
				Config:      config("podinfo:6.0.2"),
				ExpectError: wrappedPattern(`Canary analysis failed at canary weight 10%`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
					c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
					checkCluster(func() error { return c.checkDelegate(ns, false, 100, 0) }),
				),
			},
			{
				// Back to the promoted template, so that destroy may revert to it.
				PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil) },
				Config:    config("podinfo:6.0.1"),
			},
		},
	})
}
