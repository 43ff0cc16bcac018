package provider

// Two more routers in the campaign (issue 32 item 4): nginx, whose canary Ingress sits beside
// the user's Ingress (ingress_ref) and carries the split in its annotations, and contour, whose
// HTTPProxy <apex> holds the two weighted services. Both run weighted canaries and A/B tests;
// a share of the osm canaries and of the gatewayapi releases take one of them. The invariants
// read their live weights from those objects, as for the other routers.

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/contour"
	"github.com/canary-release/terraform-provider-canary/internal/mesh/nginx"
	"github.com/canary-release/terraform-provider-canary/internal/router"
)

func init() {
	routerListKinds[contour.HTTPProxyResource] = "HTTPProxyList"
	routerListKinds[nginx.IngressResource] = "IngressList"
}

// campaignRouters are every router a schedule may draw, in a fixed order.
var campaignRouters = []string{"osm", "istio", "gatewayapi", "kubernetes", "nginx", "contour", "knative"}

// drawIngressRouter moves a share of the osm canaries and of the gatewayapi releases (canary
// and A/B, which both routers run) to nginx or contour, by coins of their own so that the
// other schedules stay what they were.
func drawIngressRouter(seed int64, s releaseShape) string {
	movable := (s.router == "osm" && s.strategy == strategyCanary) || s.router == "gatewayapi"
	if !movable || keyedCoin(seed, "ingress router") >= 0.4 {
		return s.router
	}
	if keyedCoin(seed, "ingress router kind") < 0.5 {
		return "nginx"
	}
	return "contour"
}

// routerOptions are what nginx needs of router.Spec: the user's Ingress.
func routerOptions(provider string) any {
	if provider == "nginx" {
		return nginx.Options{IngressRef: &router.Ref{Name: campaignTarget}}
	}
	return nil
}

// addRouterConfig adds a router's own attributes to a release's configuration.
func addRouterConfig(provider string, config map[string]any) {
	if provider == "nginx" {
		config["ingress_ref"] = map[string]any{"name": campaignTarget}
	}
}

// setUpIngress creates the user's Ingress, which sends the apex host to the apex Service,
// for a release on nginx.
func (c *campaign) setUpIngress(ctx context.Context) error {
	if c.shape.router != "nginx" {
		return nil
	}
	ing := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
		"metadata": map[string]any{"name": campaignTarget, "namespace": campaignNamespace, "annotations": map[string]any{"kubernetes.io/ingress.class": "nginx"}},
		"spec": map[string]any{"rules": []any{map[string]any{"host": "podinfo.campaign.example", "http": map[string]any{"paths": []any{map[string]any{
			"path": "/", "pathType": "Prefix",
			"backend": map[string]any{"service": map[string]any{"name": campaignTarget, "port": map[string]any{"number": int64(9898)}}},
		}}}}}},
	}}
	_, err := c.harness.dynamic.Resource(nginx.IngressResource).Namespace(campaignNamespace).Create(ctx, ing, metav1.CreateOptions{})
	return err
}

// deleteRouterObject deletes what nginx and contour route with: the canary Ingress (the
// user's then sends everything to the apex Service), or the HTTPProxy. ok is false for the
// other routers.
func (c *campaign) deleteRouterObject(ctx context.Context, provider string) (bool, error) {
	switch provider {
	case "nginx":
		return true, c.harness.dynamic.Resource(nginx.IngressResource).Namespace(campaignNamespace).Delete(ctx, campaignTarget+"-canary", metav1.DeleteOptions{})
	case "contour":
		return true, c.harness.dynamic.Resource(contour.HTTPProxyResource).Namespace(campaignNamespace).Delete(ctx, campaignTarget, metav1.DeleteOptions{})
	}
	return false, nil
}

// apexWithoutRouterObject reports a router whose missing object leaves the apex host to the
// apex Service: the meshes' (osm, istio), and nginx's user Ingress.
func apexWithoutRouterObject(provider string) bool {
	return provider == "osm" || provider == "istio" || provider == "nginx"
}
