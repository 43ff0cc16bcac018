package router

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GatewayResource is the Gateway API Gateway that a gatewayapi release's HTTPRoute attaches to.
var GatewayResource = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "gateways"}

// newGatewayAPI writes the HTTPRoute <apex> (gateway.networking.k8s.io/v1) that Flagger's
// gatewayapi provider writes: parentRefs are service.gateway_refs and hostnames service.hosts,
// both exactly as configured.
func NewGatewayAPI(c Clients, s Spec, can Capabilities) Router {
	r := newHTTPRouteRouter(c, s, "gatewayapi", s.GatewayRefs, s.Hosts, can)
	r.warn = func(ctx context.Context) []string { return missingGateways(ctx, c, s) }
	return configuredRouter{httpRouteRouter: r, check: func() error {
		if len(s.GatewayRefs) == 0 {
			return configErrorf("service.gateway_refs is required for mesh_provider gatewayapi: it names the Gateways the HTTPRoute %s attaches to", s.Apex)
		}
		return nil
	}}
}

// missingGateways names the referenced Gateways that do not exist: until they do, the
// HTTPRoute carries no traffic and the built-in checks find no values. A failed read (no CRD,
// no permission) says nothing, so it gives no hint.
func missingGateways(ctx context.Context, c Clients, s Spec) []string {
	var out []string
	for _, ref := range s.GatewayRefs {
		if ref.Group != GatewayGroup || ref.Kind != GatewayKind {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = s.Namespace
		}
		gw, err := fetch(ctx, c.Dynamic, GatewayResource, ns, ref.Name)
		if err == nil && gw == nil {
			out = append(out, fmt.Sprintf("service.gateway_refs: Gateway %s/%s does not exist; the HTTPRoute %s/%s carries no traffic until it does",
				ns, ref.Name, s.Namespace, s.Apex))
		}
	}
	return out
}
