package provider

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/statecheck"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// createHandWrittenSetup is what a user migrating to canary_release already runs: the
// Deployment podinfo, its Service podinfo (handed over with the release's label, as the
// migration guide says) and a hand-written route named podinfo that sends it everything.
func (c *testCluster) createHandWrittenSetup(t *testing.T, ns string, port int32, route *unstructured.Unstructured, gvr schema.GroupVersionResource) {
	t.Helper()
	ctx := context.Background()
	c.createDeployment(t, podinfoDeployment(ns, "podinfo:6.0.0", nil))
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "podinfo", Namespace: ns, Labels: map[string]string{router.LabelRelease: "podinfo"}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "podinfo"},
			Ports: []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(9898)}}},
	}
	if _, err := c.kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The route goes live once the Deployment serves, as a running setup does.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		d, err := c.kube.AppsV1().Deployments(ns).Get(ctx, "podinfo", metav1.GetOptions{})
		if err == nil && d.Status.ReadyReplicas >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Deployment podinfo not Ready: %v", err)
		}
	}
	if _, err := c.dyn.Resource(gvr).Namespace(ns).Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// checkTakenOver checks that the route named podinfo is the release's now.
func (c *testCluster) checkTakenOver(ns string, gvr schema.GroupVersionResource) resource.TestCheckFunc {
	return checkCluster(func() error {
		u, err := c.dyn.Resource(gvr).Namespace(ns).Get(context.Background(), "podinfo", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if u.GetLabels()[router.LabelRelease] != "podinfo" {
			return fmt.Errorf("%s podinfo was not taken over: labels %v", u.GetKind(), u.GetLabels())
		}
		if spec := fmt.Sprint(u.Object["spec"]); !strings.Contains(spec, "podinfo-primary") {
			return fmt.Errorf("%s podinfo was not rewritten as the release's route: %s", u.GetKind(), spec)
		}
		return nil
	})
}

// TestAccRelease_takesOverHandWrittenRoute, on Istio and Gateway API (a namespace each): a
// hand-written VirtualService or HTTPRoute named after the apex, which the release's route
// covers, is taken over at the first apply without a moment in which the host answers nothing
// (the invariant log stays empty); a release then promotes and the next one rolls back.
func TestAccRelease_takesOverHandWrittenRoute(t *testing.T) {
	analysis := httpRouteAnalysis("2s", 2)
	istioRoute := func(ns string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1beta1", "kind": "VirtualService",
			"metadata": map[string]any{"name": "podinfo", "namespace": ns},
			"spec": map[string]any{"hosts": []any{"podinfo"}, "http": []any{map[string]any{
				"route": []any{map[string]any{"destination": map[string]any{"host": "podinfo", "port": map[string]any{"number": int64(9898)}}}},
			}}},
		}}
	}
	httpRoute := func(ns string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
			"metadata": map[string]any{"name": "podinfo", "namespace": ns},
			"spec": map[string]any{
				"parentRefs": []any{map[string]any{"name": "public", "sectionName": "http"}},
				"hostnames":  []any{"app.example.com"},
				"rules":      []any{map[string]any{"backendRefs": []any{map[string]any{"name": "podinfo", "port": int64(80)}}}},
			},
		}}
	}
	for _, tc := range []struct {
		name    string
		config  func(ns, image string) string
		gvr     schema.GroupVersionResource
		route   func(ns string) *unstructured.Unstructured
		port    int32
		gateway bool
	}{
		{"istio", func(ns, image string) string {
			return strings.Replace(releaseConfig(ns, targetRefWorkload(image), analysis, ""), `mesh_provider = "osm"`, `mesh_provider = "istio"`, 1)
		}, istioVirtualServices, istioRoute, 9898, false},
		{"gatewayapi", func(ns, image string) string {
			return httpRouteConfig(ns, "gatewayapi", image, gatewayService, gatewayCase.extra, analysis)
		}, httpRoutes, httpRoute, 80, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testAccStack(t)
			ns := c.namespace(t)
			resource.ParallelTest(t, resource.TestCase{
				ProtoV6ProviderFactories: testAccProtoV6ProviderFactories,
				Steps: []resource.TestStep{
					{
						PreConfig: func() {
							if tc.gateway {
								c.createGateway(t, ns)
							}
							c.createHandWrittenSetup(t, ns, tc.port, tc.route(ns), tc.gvr)
						},
						Config:            tc.config(ns, "podinfo:6.0.0"),
						Check:             c.checkTakenOver(ns, tc.gvr),
						ConfigStateChecks: []statecheck.StateCheck{statusPhase("Initialized")},
					},
					{
						PreConfig:         func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil) },
						Config:            tc.config(ns, "podinfo:6.0.1"),
						Check:             c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
						ConfigStateChecks: []statecheck.StateCheck{statusPhase("Succeeded")},
					},
					{
						PreConfig: func() {
							c.setTemplate(t, ns, "podinfo", "podinfo:6.0.2", map[string]string{meshsim.AnnotationErrorRate: "1"})
						},
						Config:      tc.config(ns, "podinfo:6.0.2"),
						ExpectError: wrappedPattern(`Canary analysis failed at canary weight 10%`),
					},
					{
						RefreshState:       true,
						ExpectNonEmptyPlan: true,
						Check: resource.ComposeAggregateTestCheckFunc(
							resource.TestCheckResourceAttr(addr, "status.phase", "Failed"),
							c.checkImage(ns, "podinfo-primary", "podinfo:6.0.1"),
						),
					},
					{
						PreConfig: func() { c.setTemplate(t, ns, "podinfo", "podinfo:6.0.1", nil) },
						Config:    tc.config(ns, "podinfo:6.0.1"),
					},
				},
			})
		})
	}
}
