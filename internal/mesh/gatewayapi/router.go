package gatewayapi

import (
	"context"
	"fmt"

	"github.com/canary-release/terraform-provider-canary/internal/router"
)

// newRouter writes the HTTPRoute <apex> (gateway.networking.k8s.io/v1) that Flagger's
// gatewayapi provider writes: parentRefs are service.gateway_refs and hostnames service.hosts,
// both exactly as configured.
func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	o, _ := s.Options.(Options)
	r := router.NewHTTPRouteRouter(c, s, "gatewayapi", o.GatewayRefs, s.Hosts, can)
	r.Warn = func(ctx context.Context) []string { return missingGateways(ctx, c, s, o.GatewayRefs) }
	return router.ConfiguredRouter{HTTPRouteRouter: r, Check: func() error {
		if len(o.GatewayRefs) == 0 {
			return router.ConfigErrorf("service.gateway_refs is required for mesh_provider gatewayapi: it names the Gateways the HTTPRoute %s attaches to", s.Apex)
		}
		return nil
	}}
}

// missingGateways names the referenced Gateways that do not exist: until they do, the
// HTTPRoute carries no traffic and the built-in checks find no values. A failed read (no CRD,
// no permission) says nothing, so it gives no hint.
func missingGateways(ctx context.Context, c router.Clients, s router.Spec, refs []router.ParentRef) []string {
	var out []string
	for _, ref := range refs {
		if ref.Group != router.GatewayGroup || ref.Kind != router.GatewayKind {
			continue
		}
		ns := ref.Namespace
		if ns == "" {
			ns = s.Namespace
		}
		gw, err := router.Fetch(ctx, c.Dynamic, router.GatewayResource, ns, ref.Name)
		if err == nil && gw == nil {
			out = append(out, fmt.Sprintf("service.gateway_refs: Gateway %s/%s does not exist; the HTTPRoute %s/%s carries no traffic until it does",
				ns, ref.Name, s.Namespace, s.Apex))
		}
	}
	return out
}
