package router

// The options of router.Spec that belong to one mesh each. They move into their drivers once
// each driver decodes its own options (issue 22, typed options).

import "k8s.io/apimachinery/pkg/runtime/schema"

// Istio resources, in the version Flagger writes (v1beta1; the CRDs serve v1 as well).
var (
	IstioVirtualServiceResource  = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1beta1", Resource: "virtualservices"}
	IstioDestinationRuleResource = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1beta1", Resource: "destinationrules"}
)

// IstioMeshGateway is Istio's reserved name for the sidecars of the whole mesh.
const IstioMeshGateway = "mesh"

// IstioSpec holds the Istio-only service settings (Flagger's service.gateways, retries, timeout,
// headers, corsPolicy and trafficPolicy). The zero value is Flagger's default route.
type IstioSpec struct {
	// Gateways the VirtualService is bound to; empty means [mesh].
	Gateways []string
	// Match narrows every route to the requests it matches (Flagger's service.match); A/B
	// and session-affinity conditions are added to each entry.
	Match         []IstioMatch
	Retries       *IstioRetries
	Timeout       string
	Headers       *IstioHeaders
	CorsPolicy    *IstioCorsPolicy
	TrafficPolicy *IstioTrafficPolicy
}

// IstioRetries is Istio's HTTPRetry.
type IstioRetries struct {
	Attempts      int
	PerTryTimeout string
	RetryOn       string
}

// IstioHeaders are the header operations of the route.
type IstioHeaders struct {
	Request, Response *IstioHeaderOps
}

// IstioHeaderOps is one direction of Istio's Headers.
type IstioHeaderOps struct {
	Set, Add map[string]string
	Remove   []string
}

// IstioCorsPolicy is Istio's CorsPolicy.
type IstioCorsPolicy struct {
	AllowOrigins                              []IstioStringMatch
	AllowMethods, AllowHeaders, ExposeHeaders []string
	MaxAge                                    string
	AllowCredentials                          *bool
}

// IstioMatch is one HTTPMatchRequest of service.match.
type IstioMatch struct {
	URI, Method          *IstioStringMatch
	Headers, QueryParams map[string]StringMatch
}

// IstioStringMatch is one of exact, prefix or regex.
type IstioStringMatch struct {
	Exact, Prefix, Regex string
}

// IstioTrafficPolicy is the part of a DestinationRule's trafficPolicy that can be set.
type IstioTrafficPolicy struct {
	TLSMode      string // DISABLE, SIMPLE, ISTIO_MUTUAL
	LoadBalancer string // simple load balancer: ROUND_ROBIN, LEAST_REQUEST, ...
}

// Gloo modes (Spec.GlooMode).
const (
	GlooModeRouteTable    = "route_table"
	GlooModeUpstreamGroup = "upstream_group"
)
