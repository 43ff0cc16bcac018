// Package meshsim simulates the data plane of the meshes and gateways the provider routes through
// (OSM, APISIX, Gloo, Istio, Gateway API gateways, Linkerd, Traefik, Contour, ingress-nginx, Skipper, AWS ALB,
// Knative, and plain Kubernetes Services) for
// the local test stack. It watches the router objects the provider writes, sends a steady,
// deterministic load through the routes they describe, answers each request the way the pod
// annotations say, and exports what the real mesh would export to Prometheus. It also logs
// moments where the routing breaks an invariant (weights not summing to 100, user traffic sent to
// a side with no Ready pods).
//
// Modelling choices, where the real meshes leave room:
//   - Each mesh is its own entry point: an apex routed by a TrafficSplit and an ApisixRoute gets
//     its rps through each. The apex's rps annotation applies even when the apex Service is
//     missing (then DefaultRPS).
//   - An APISIX backend without weight weighs 100 (the ingress controller's default); a Gloo
//     destination without weight weighs 0 (uint32 omitempty). Every ApisixRoute rule competes
//     for its apex regardless of its hosts, paths and methods, but only for the requests its
//     match.exprs take; Gloo routes take the requests their matchers take (methods, headers,
//     query parameters; paths are not modelled), the first such route winning.
//   - Requests are GET / (abtest.go): without headers or query parameters, except that an apex
//     Service annotated sim.canary-release.dev/ab-header ("x-canary=insider", pairs separated by
//     commas; "cookie=name=value" sends a cookie) and/or ab-query ("beta=on") has a share ab-share
//     (default 0.5) of its rps carry them. Those tagged requests are a flow of their own, routed
//     independently (the APISIX rule of highest priority, the first Gloo or Istio route, the
//     HTTPRoute rule of highest precedence that takes them), so the metrics count them where they
//     really went. Like any request, a tagged one sent to a Service with no Ready pods is an
//     invariant entry; a route with a lone destination has no split to check. No client keeps
//     the cookies a route sets: session affinity shows through the requests that carry the
//     cookie from the start, and through the Set-Cookie headers the answers carried, recorded
//     per flow (cookies.go, GET /cookies).
//   - 503s answered by the mesh itself (no Ready pod, all weights 0) observe no latency. OSM counts
//     them on a selected but not Ready pod when there is one, APISIX on the route with node "",
//     Gloo on the upstream's cluster.
//   - Istio (istio.go): a VirtualService serves the apexes its hosts name; its http routes are
//     tried in order and a request takes the first whose match accepts it (any match entry;
//     within one: headers and withoutHeaders, names in any case, and queryParams by exact, prefix
//     or whole-value regex; method and uri against GET /; sourceLabels/sourceNamespace never
//     match); a lone destination takes everything, a missing weight is 0 otherwise. Gateways are
//     not modelled. A destination subset needs its DestinationRule and narrows the pods to the
//     subset's labels. Answered requests are reported by both the source and the destination
//     sidecar; mesh 503s by the source only (UH or NR).
//   - Mirroring: an Istio route's mirror (mirrorPercentage.value, default 100) and a gatewayapi
//     rule's RequestMirror filter (percent or fraction, default 100; Linkerd has none) copy that
//     share of the requests taking the route, evenly spread, to the mirror Service,
//     fire-and-forget. The copy is answered by a Ready pod there and counted only by the pod's own
//     exporters: Istio's reporter="destination" (with the load generator as source), the
//     application's histogram and the Linkerd inbound proxy of meshed pods; never by a client
//     sidecar's reporter="source" or a gateway's Envoy cluster. A copy no Ready pod can take is
//     dropped: not user traffic, so no invariant entry.
//   - Gateway API (httproute.go): an HTTPRoute attached to a Gateway carries the gatewayapi load
//     of its backends' apexes; one whose parentRef is a Service (GAMMA) carries that Service's
//     linkerd load. A request takes, among the rule matches that accept it (path against "/",
//     method, headers Exact/RegularExpression with names in any case, queryParams), the one of
//     highest Gateway API precedence (Exact path, longest PathPrefix, method, most headers, most
//     query parameters), ties going to the earlier rule and route (by name: creation times are
//     not modelled). A backendRef without weight weighs 1; of its filters only the Set-Cookie
//     headers of a ResponseHeaderModifier count.
//   - Direct clients (direct.go): an apex Service annotated sim.canary-release.dev/clients: direct
//     (AnnotationClients, ClientsDirect) also gets its rps from un-meshed clients through
//     kube-proxy (mesh "kubernetes"): round-robin over the Ready pods its selector selects at that
//     moment, so flipping the selector flips the traffic. There are no weights to check; a
//     request no Ready pod can take is an invariant entry on Service/<apex>, and nobody counts
//     it. The answers count in the application's histogram, and in the sidecars the pod has as
//     for load tests below (the OSM one only when an OSM route sends to the pod).
//   - Traefik (traefik.go): an IngressRoute's route, through the TraefikService it names, to
//     the weighted or mirrored Kubernetes Services; Traefik's service metrics.
//   - Real traffic (proxied.go): when the stack runs a real proxy (Config.ProxyAddress), the
//     routes it serves (IngressRoutes, HTTPRoutes on its GatewayClass, Ingresses of its class)
//     carry the client's real requests through it (client.go), not simulated flows; the pods
//     the proxy picks answer them (pods.go) and observe their own histogram from what they
//     served, and the client judges what came back.
//   - AWS ALB (alb.go): the rules of an IngressGroup's Ingresses in the controller's order,
//     through their forward actions' weighted target groups and their conditions; a per target
//     group request counter and response time histogram standing in for CloudWatch's metrics.
//   - Contour (contour.go): a root HTTPProxy's routes and those of the HTTPProxies it includes,
//     the most specific header and query conditions winning; Envoy's cluster stats, as Gloo's.
//   - ingress-nginx (nginx.go): an nginx Ingress's locations, split with the canary Ingress of
//     the same host and path by its weight, header and cookie annotations; the controller's
//     request metrics.
//   - Skipper (skipper.go): the host and path routes of Ingresses of class skipper, split by
//     zalando.org/backend-weights, the heaviest Weight() predicate winning; Skipper's route metrics.
//   - Knative (knative.go): plays Knative's controller (Revisions, their Deployments, the Knative
//     Service's status) and routes by the Service's served traffic; Kourier's Envoy cluster stats.
//   - Load tests (loadtest.go): POST /loadtest plays Flagger's load tester, sending a hey
//     command's traffic straight to a Service's pods, with the load tester as source. The pods'
//     own exporters count it: the application's histogram, the OSM sidecar (always), the Istio
//     sidecar's reporter="destination" and the Linkerd inbound proxy when the pod has them; no
//     gateway and no client-side report. A pod has a mesh's sidecar when a route of that mesh
//     sends to it this tick (Istio: a VirtualService or an Istio gateway's route; Linkerd: a
//     GAMMA route, or the pod's linkerd.io/inject: enabled). A request no Ready pod can take is a
//     503 (on a not Ready pod's OSM sidecar), not an invariant entry.
//   - Latency (latency.go): the latency-ms annotation is the pod's p99; each request's duration is
//     drawn from a lognormal with that p99 and a spread taken from a published measurement, and
//     observed as drawn. A query over a short window reads what a real proxy's would, noise and
//     bucket interpolation included: the 99th percentile rests on the top 1% of requests.
package meshsim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Annotations that tune the simulation. AnnotationRPS goes on the apex Service; the other two go
// on the pod template, so that each version of a Deployment can behave differently.
// AnnotationLatencyMs is the pod's p99 in ms, around which each request's duration is drawn
// (latency.go).
const (
	AnnotationRPS       = "sim.canary-release.dev/rps"
	AnnotationErrorRate = "sim.canary-release.dev/error-rate"
	AnnotationLatencyMs = "sim.canary-release.dev/latency-ms"

	DefaultRPS       = 20.0
	DefaultLatencyMs = 20.0
)

// The load generator, as the OSM source labels name it.
const (
	SourceNamespace = "meshsim"
	SourceKind      = "Deployment"
	SourceName      = "load-generator"
	SourcePod       = "load-generator-0"
)

// Mesh names the data plane a route belongs to.
type Mesh string

const (
	MeshOSM    Mesh = "osm"
	MeshAPISIX Mesh = "apisix"
	MeshGloo   Mesh = "gloo"
	MeshIstio  Mesh = "istio"
	// MeshGatewayAPI is traffic entering through a Gateway API Gateway; MeshLinkerd is traffic
	// from meshed clients to an apex Service that a GAMMA HTTPRoute splits (httproute.go).
	MeshGatewayAPI Mesh = "gatewayapi"
	MeshLinkerd    Mesh = "linkerd"
	// MeshKubernetes is un-meshed clients reaching an apex Service through kube-proxy
	// (direct.go): no router object, the Service's selector decides.
	MeshKubernetes Mesh = "kubernetes"
	// MeshTraefik is traffic entering through Traefik's IngressRoutes (traefik.go).
	MeshTraefik Mesh = "traefik"
	// MeshContour is traffic entering through Contour's root HTTPProxies (contour.go).
	MeshContour Mesh = "contour"
	// MeshNginx is traffic entering through ingress-nginx's Ingresses (nginx.go).
	MeshNginx Mesh = "nginx"
	// MeshSkipper is traffic entering through Skipper's Ingresses (skipper.go).
	MeshSkipper Mesh = "skipper"
	// MeshKnative is traffic entering through Knative's ingress for Knative Services
	// (knative.go, which also plays Knative's controller).
	MeshKnative Mesh = "knative"
)

// Router object resources the simulator reads.
var (
	TrafficSplitGVR   = schema.GroupVersionResource{Group: "split.smi-spec.io", Version: "v1alpha2", Resource: "trafficsplits"}
	ApisixRouteGVR    = schema.GroupVersionResource{Group: "apisix.apache.org", Version: "v2", Resource: "apisixroutes"}
	VirtualServiceGVR = schema.GroupVersionResource{Group: "gateway.solo.io", Version: "v1", Resource: "virtualservices"}
	RouteTableGVR     = schema.GroupVersionResource{Group: "gateway.solo.io", Version: "v1", Resource: "routetables"}
	UpstreamGVR       = schema.GroupVersionResource{Group: "gloo.solo.io", Version: "v1", Resource: "upstreams"}
	UpstreamGroupGVR  = schema.GroupVersionResource{Group: "gloo.solo.io", Version: "v1", Resource: "upstreamgroups"}
)

// RouterGVRs lists every router resource; ListKinds gives their list kinds (for fake clients).
var (
	RouterGVRs = []schema.GroupVersionResource{
		TrafficSplitGVR, ApisixRouteGVR, VirtualServiceGVR, RouteTableGVR, UpstreamGVR, UpstreamGroupGVR,
		IstioVirtualServiceGVR, DestinationRuleGVR,
		HTTPRouteGVR, GatewayGVR, GatewayClassGVR,
		TraefikServiceGVR, IngressRouteGVR, HTTPProxyGVR,
		IngressGVR,
		KnativeServiceGVR, KnativeRevisionGVR,
	}
	ListKinds = map[schema.GroupVersionResource]string{
		TrafficSplitGVR:   "TrafficSplitList",
		ApisixRouteGVR:    "ApisixRouteList",
		VirtualServiceGVR: "VirtualServiceList",
		RouteTableGVR:     "RouteTableList",
		UpstreamGVR:       "UpstreamList",
		UpstreamGroupGVR:  "UpstreamGroupList",
		// Istio's VirtualService shares Gloo's list kind name, in another group.
		IstioVirtualServiceGVR: "VirtualServiceList",
		DestinationRuleGVR:     "DestinationRuleList",
		HTTPRouteGVR:           "HTTPRouteList",
		GatewayGVR:             "GatewayList",
		GatewayClassGVR:        "GatewayClassList",
		TraefikServiceGVR:      "TraefikServiceList",
		IngressRouteGVR:        "IngressRouteList",
		HTTPProxyGVR:           "HTTPProxyList",
		IngressGVR:             "IngressList",
		KnativeServiceGVR:      "ServiceList",
		KnativeRevisionGVR:     "RevisionList",
	}
)

// Config wires a Simulator to a cluster.
type Config struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Discovery tells which router CRDs are installed; nil means Kube.Discovery().
	Discovery discovery.DiscoveryInterface
	// InvariantLog receives one JSON line per invariant entry; nil keeps entries in memory only.
	InvariantLog io.Writer
	// Tick is the load interval (default 100ms); CRDRecheck how often missing CRDs are looked for
	// again (default 10s).
	Tick       time.Duration
	CRDRecheck time.Duration
	Logger     *slog.Logger
	// Seed seeds the request durations (latency.go): a run is the same for the same seed.
	Seed uint64
	// ProxyAddress is the real proxy's entry point (host:port) the client sends real requests
	// through (client.go); empty runs no client.
	ProxyAddress string
}

// Simulator is the simulated data plane.
type Simulator struct {
	cfg     Config
	log     *slog.Logger
	typed   informers.SharedInformerFactory
	dynamic dynamicinformer.DynamicSharedInformerFactory
	metrics *exporter
	// vendors feeds the vendor query APIs (vendor_series.go).
	vendors *vendorSeries
	inv     *invariantLog
	ready   atomic.Bool

	mu       sync.Mutex // guards everything below; Tick and the CRD re-check both take it
	crds     map[schema.GroupVersionResource]cache.GenericLister
	lastTick time.Time
	flows    map[flowKey]*flowState
	rr       map[string]int      // round-robin position per backend Service
	pods     map[string]*podLoad // accumulators per pod and mesh
	warned   map[string]string   // bad annotation values already logged
	// loadTests are the running load tests by id (loadtest.go).
	loadTests map[string]*LoadTest
	// cookies are the Set-Cookie headers answers carried (cookies.go).
	cookies map[cookieKey]*CookieRecord
	// samples are the requests as the cloud vendors' query APIs read them (vendor_store.go);
	// they lock themselves, as those APIs read them outside Tick.
	samples vendorSamples
	// client is what the real requests through the proxy saw (client.go); it locks itself.
	client clientState
	// terminating are the deleted pods still answering the real proxy (pods.go).
	terminating terminatingPods
}

// New builds a Simulator; call Run (or Start and then Tick) to make it work.
func New(cfg Config) *Simulator {
	if cfg.Discovery == nil {
		cfg.Discovery = cfg.Kube.Discovery()
	}
	if cfg.Tick <= 0 {
		cfg.Tick = 100 * time.Millisecond
	}
	if cfg.CRDRecheck <= 0 {
		cfg.CRDRecheck = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Simulator{
		cfg:     cfg,
		log:     cfg.Logger,
		typed:   informers.NewSharedInformerFactory(cfg.Kube, 0),
		dynamic: dynamicinformer.NewFilteredDynamicSharedInformerFactory(cfg.Dynamic, 0, "", nil),
		metrics: newExporter(),
		vendors: newVendorSeries(),
		inv:     newInvariantLog(cfg.InvariantLog),
		crds:    map[schema.GroupVersionResource]cache.GenericLister{},
		flows:   map[flowKey]*flowState{},
		rr:      map[string]int{},
		pods:    map[string]*podLoad{},
		warned:  map[string]string{},

		loadTests: map[string]*LoadTest{},
		cookies:   map[cookieKey]*CookieRecord{},
		client:    clientState{routes: map[string]*ClientRoute{}, judged: map[string]bool{}, owed: map[string]float64{}},
	}
	// Register the typed informers before the factory starts.
	s.typed.Core().V1().Services().Informer()
	s.typed.Core().V1().Pods().Informer()
	s.indexPodsByIP() // pods.go
	s.typed.Apps().V1().ReplicaSets().Informer()
	s.typed.Core().V1().ConfigMaps().Informer() // release records, for the StatefulSet check
	return s
}

// Registry is the Prometheus registry holding the mesh metrics.
func (s *Simulator) Registry() *prometheus.Registry { return s.metrics.registry }

// Start starts the informers of the installed resources and waits until their caches are synced.
func (s *Simulator) Start(ctx context.Context) error {
	s.typed.Start(ctx.Done())
	for typ, ok := range s.typed.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("cache of %v did not sync", typ)
		}
	}
	s.syncCRDs(ctx)
	s.ready.Store(true)
	return nil
}

// Run starts the simulator and sends load every tick until ctx is done.
func (s *Simulator) Run(ctx context.Context) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	go wait.UntilWithContext(ctx, s.syncCRDs, s.cfg.CRDRecheck)
	go wait.UntilWithContext(ctx, s.ReconcileKnative, s.cfg.Tick)
	if s.cfg.ProxyAddress != "" {
		go s.runClient(ctx)
	}
	wait.UntilWithContext(ctx, func(context.Context) { s.Tick(time.Now()) }, s.cfg.Tick)
	return nil
}

// syncCRDs starts an informer for each router resource that the API server now serves.
// Resources whose CRD is missing are skipped and looked for again on the next call.
func (s *Simulator) syncCRDs(ctx context.Context) {
	s.mu.Lock()
	var missing []schema.GroupVersionResource
	for _, gvr := range RouterGVRs {
		if _, started := s.crds[gvr]; !started {
			missing = append(missing, gvr)
		}
	}
	s.mu.Unlock()

	found := map[schema.GroupVersionResource]informers.GenericInformer{}
	var synced []cache.InformerSynced
	for _, gvr := range missing {
		if s.served(gvr) {
			found[gvr] = s.dynamic.ForResource(gvr)
			synced = append(synced, found[gvr].Informer().HasSynced)
		}
	}
	if len(found) == 0 {
		return
	}
	s.dynamic.Start(ctx.Done())
	syncCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		s.log.Warn("router resource caches not synced yet; using them anyway")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for gvr, informer := range found {
		s.crds[gvr] = informer.Lister()
		s.log.Info("watching router resource", "resource", gvr.String())
	}
}

func (s *Simulator) served(gvr schema.GroupVersionResource) bool {
	list, err := s.cfg.Discovery.ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range list.APIResources {
		if r.Name == gvr.Resource {
			return true
		}
	}
	return false
}
