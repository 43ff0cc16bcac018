package registry

import (
	"context"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/gatewayapi"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/routertest"
)

// Flagger stamps service.apex's labels and annotations on the router object named after the
// apex (its e2e suites check the TraefikService's): so does every driver whose object stands
// for the apex, on create and when the metadata changes, the release's own labels winning.
func TestApexMetadataOnTheApexRouterObject(t *testing.T) {
	ctx := context.Background()
	for provider, gvr := range map[string]schema.GroupVersionResource{
		"traefik":    meshsim.TraefikServiceGVR,
		"contour":    meshsim.HTTPProxyGVR,
		"istio":      router.IstioVirtualServiceResource,
		"gatewayapi": router.HTTPRouteResource,
		"linkerd":    router.HTTPRouteResource,
		"gloo":       router.RouteTableResource,
	} {
		t.Run(provider, func(t *testing.T) {
			s := routertest.GlooSpec
			s.ApexLabels = map[string]string{"team": "shop", router.LabelRelease: "not-the-release"}
			s.ApexAnnotations = map[string]string{"owner": "shop@example.com"}
			if provider == "gatewayapi" {
				s.Options = gatewayapi.Options{GatewayRefs: []router.ParentRef{{Name: "gateway", Kind: router.GatewayKind, Group: router.GatewayGroup}}}
			}
			c := routertest.FakeClients(t, nil, routertest.GlooServices()...)
			r, err := NewRouter(provider, c, s)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			obj := routertest.Get(t, c, gvr, "test", "podinfo")
			if l := obj.GetLabels(); l["team"] != "shop" || l[router.LabelRelease] != "podinfo-release" {
				t.Errorf("labels %v: want team=shop and the release's own %s", l, router.LabelRelease)
			}
			if a := obj.GetAnnotations(); a["owner"] != "shop@example.com" {
				t.Errorf("annotations %v: want owner", a)
			}
			s.ApexLabels = map[string]string{"team": "payments"}
			r, _ = NewRouter(provider, c, s)
			if err := r.Reconcile(ctx); err != nil {
				t.Fatal(err)
			}
			if l := routertest.Get(t, c, gvr, "test", "podinfo").GetLabels(); l["team"] != "payments" {
				t.Errorf("after a change of service.apex, labels %v: want team=payments", l)
			}
		})
	}
}
