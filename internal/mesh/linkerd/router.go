package linkerd

import "github.com/canary-release/terraform-provider-canary/internal/router"

// newRouter writes the HTTPRoute <apex> (gateway.networking.k8s.io/v1) in its GAMMA form: the
// parentRef is the apex Service itself (group "", kind Service, port service.port), so the
// Linkerd proxies of the clients split the requests they send to the apex. Hostnames are not
// written: a Service parent is addressed by the Service, not by host.
//
// Flagger's linkerd provider writes an SMI TrafficSplit instead; Linkerd has read HTTPRoutes
// since 2.14 and no longer needs the SMI extension for them.
func newRouter(c router.Clients, s router.Spec, can router.Capabilities) router.Router {
	apex := router.ParentRef{Group: "", Kind: "Service", Name: s.Apex, Port: s.Port}
	return router.NewHTTPRouteRouter(c, s, "linkerd", []router.ParentRef{apex}, nil, can)
}
