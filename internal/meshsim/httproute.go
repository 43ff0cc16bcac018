package meshsim

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Gateway API resources. An HTTPRoute carries load in two ways: through a Gateway it is
// attached to (MeshGatewayAPI), and, in its GAMMA form whose parent is a Service, from the
// meshed clients of that Service (MeshLinkerd).
var (
	HTTPRouteGVR    = schema.GroupVersionResource{Group: gatewayGroup, Version: "v1", Resource: "httproutes"}
	GatewayGVR      = schema.GroupVersionResource{Group: gatewayGroup, Version: "v1", Resource: "gateways"}
	GatewayClassGVR = schema.GroupVersionResource{Group: gatewayGroup, Version: "v1", Resource: "gatewayclasses"}
)

const gatewayGroup = "gateway.networking.k8s.io"

// AnnotationLinkerdInject on a pod template makes its pods Linkerd-meshed: their inbound proxy
// exports response_total whichever way the requests arrive.
const AnnotationLinkerdInject = "linkerd.io/inject"

// GatewayClass controllers whose own metrics the simulator exports for the routes of their
// Gateways. Any other controller (or a missing class) exports none: only the application's.
const (
	EnvoyGatewayController = "gateway.envoyproxy.io/gatewayclass-controller"
	IstioGatewayController = "istio.io/gateway-controller"

	gatewayImplEnvoy = "envoy"
	gatewayImplIstio = "istio"
)

// Metric names of the application (Flagger's generic HTTP observer) and of the Linkerd proxy.
const (
	MetricHTTPRequestDuration = "http_request_duration_seconds"
	MetricLinkerdResponses    = "response_total"
	MetricLinkerdLatency      = "response_latency_ms"
)

// LinkerdBuckets are the Linkerd proxy's latency buckets, in milliseconds.
var LinkerdBuckets = []float64{1, 2, 3, 4, 5, 10, 20, 30, 40, 50, 100, 200, 300, 400, 500, 1000, 2000, 3000, 4000, 5000, 10000, 20000, 30000, 40000, 50000}

// appBucketsMs are the application histogram's buckets (the Prometheus client's defaults, in
// seconds) in milliseconds.
var appBucketsMs = func() []float64 {
	out := make([]float64, len(prometheus.DefBuckets))
	for i, b := range prometheus.DefBuckets {
		out[i] = b * 1000
	}
	return out
}()

// gatewayCandidates: every HTTPRoute attached to an existing Gateway, by its first rule that
// a plain GET matches, serving the apexes of its backends. Listener hostnames and
// allowedRoutes are not checked: the load enters for the apex, whatever host it names.
func gatewayCandidates(v *view) []candidate {
	var out []candidate
	for _, hr := range v.list(HTTPRouteGVR) {
		gw, ok := attachedGateway(v, hr)
		if !ok {
			continue
		}
		r := httpRouteRoute(hr, MeshGatewayAPI, gatewayImpl(v, gw))
		if r == nil {
			continue
		}
		var apexes []types.NamespacedName
		for _, b := range r.backends {
			apexes = appendUnique(apexes, types.NamespacedName{Namespace: b.service.Namespace, Name: apexOf(b.service.Name)})
		}
		out = append(out, candidate{apexes: apexes, route: r})
	}
	return out
}

// linkerdCandidates: every HTTPRoute whose parentRef is a Service (group "", kind Service)
// splits the requests sent to that Service, its apex.
func linkerdCandidates(v *view) []candidate {
	var out []candidate
	for _, hr := range v.list(HTTPRouteGVR) {
		var apexes []types.NamespacedName
		for _, p := range maps(hr.Object, "spec", "parentRefs") {
			if group, kind := parentGroupKind(p); group == "" && kind == "Service" {
				apexes = appendUnique(apexes, types.NamespacedName{Namespace: nsOr(p, hr.GetNamespace()), Name: str(p, "name")})
			}
		}
		if len(apexes) == 0 {
			continue
		}
		if r := httpRouteRoute(hr, MeshLinkerd, ""); r != nil {
			out = append(out, candidate{apexes: apexes, route: r})
		}
	}
	return out
}

// parentGroupKind applies the CRD's defaults: an absent group is the Gateway API's (so a
// Service parent must say group "" explicitly) and an absent kind is Gateway.
func parentGroupKind(p map[string]any) (group, kind string) {
	group, kind = gatewayGroup, "Gateway"
	if g, ok := p["group"].(string); ok {
		group = g
	}
	if k, ok := p["kind"].(string); ok && k != "" {
		kind = k
	}
	return group, kind
}

func nsOr(obj map[string]any, def string) string {
	if ns := str(obj, "namespace"); ns != "" {
		return ns
	}
	return def
}

// attachedGateway returns the first Gateway of the route's parentRefs that exists.
func attachedGateway(v *view, hr *unstructured.Unstructured) (*unstructured.Unstructured, bool) {
	for _, p := range maps(hr.Object, "spec", "parentRefs") {
		if group, kind := parentGroupKind(p); group != gatewayGroup || kind != "Gateway" {
			continue
		}
		if gw := v.get(GatewayGVR, nsOr(p, hr.GetNamespace()), str(p, "name")); gw != nil {
			return gw, true
		}
	}
	return nil, false
}

// gatewayImpl names the implementation behind a Gateway by its GatewayClass's controller.
func gatewayImpl(v *view, gw *unstructured.Unstructured) string {
	lister, ok := v.crds[GatewayClassGVR]
	if !ok {
		return ""
	}
	o, err := lister.Get(str(gw.Object, "spec", "gatewayClassName"))
	if err != nil {
		return ""
	}
	class, _ := o.(*unstructured.Unstructured)
	if class == nil {
		return ""
	}
	switch str(class.Object, "spec", "controllerName") {
	case EnvoyGatewayController:
		return gatewayImplEnvoy
	case IstioGatewayController:
		return gatewayImplIstio
	}
	return ""
}

// httpRouteRoute turns the first rule a plain GET matches into a route. A backendRef without
// weight weighs 1 (the Gateway API default). Only splits between <apex>-primary and
// <apex>-canary are held to weights summing to 100: a user's route may weigh 1:1.
func httpRouteRoute(hr *unstructured.Unstructured, mesh Mesh, impl string) *route {
	ns := hr.GetNamespace()
	for i, rule := range maps(hr.Object, "spec", "rules") {
		if !gatewayMatchesPlainGET(rule) {
			continue
		}
		r := &route{mesh: mesh, object: objectRef{Kind: "HTTPRoute", Namespace: ns, Name: hr.GetName()}, gateway: impl}
		for _, ref := range maps(rule, "backendRefs") {
			group, _ := ref["group"].(string)
			kind, _ := ref["kind"].(string)
			if group != "" || (kind != "" && kind != "Service") || str(ref, "name") == "" {
				continue
			}
			w, ok := num(ref, "weight")
			if !ok {
				w = 1
			}
			svc := types.NamespacedName{Namespace: nsOr(ref, ns), Name: str(ref, "name")}
			b := backend{service: svc, weight: w}
			switch impl {
			case gatewayImplEnvoy:
				// Envoy Gateway makes one cluster per rule, holding every backend of the rule.
				b.cluster = fmt.Sprintf("httproute/%s/%s/rule/%d", ns, hr.GetName(), i)
			case gatewayImplIstio:
				b.istio = &istioDest{host: fqdn(svc), mtls: true}
			}
			if apexOf(svc.Name) != svc.Name {
				r.weighted = true
			}
			r.backends = append(r.backends, b)
		}
		if len(r.backends) == 0 {
			return nil
		}
		return r
	}
	return nil
}

// gatewayMatchesPlainGET tells whether the load generator's requests (GET /, no special
// headers or query) can match a rule: a rule without matches matches every request.
func gatewayMatchesPlainGET(rule map[string]any) bool {
	matches := maps(rule, "matches")
	if len(matches) == 0 {
		return true
	}
	for _, m := range matches {
		if len(maps(m, "headers")) > 0 || len(maps(m, "queryParams")) > 0 {
			continue
		}
		if method := str(m, "method"); method == "" || strings.EqualFold(method, "GET") {
			return true
		}
	}
	return false
}

// httpRouteMetrics exports what the requests of HTTPRoute flows produce: the application's
// own histogram always; the Linkerd proxy's inbound metrics for meshed pods (all of them on
// MeshLinkerd); and the gateway's, through the Envoy and Istio exporters.
type httpRouteMetrics struct {
	e                  *exporter
	app                *prometheus.HistogramVec
	responses          *prometheus.CounterVec
	latency            *prometheus.HistogramVec
	appS, respS, latS  *liveSeries
	appCodes, lnkCodes []int
}

var (
	appLabels          = []string{"kubernetes_namespace", "kubernetes_pod_name", "method", "path", "status"}
	linkerdLatencyKeys = []string{"direction", "namespace", "deployment", "pod", "status_code"}
)

func newHTTPRouteMetrics(e *exporter) *httpRouteMetrics {
	m := &httpRouteMetrics{e: e, appCodes: []int{200, 500}, lnkCodes: []int{200, 500}}
	m.app = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricHTTPRequestDuration, Help: "Duration of HTTP requests, as the application measures them.", Buckets: prometheus.DefBuckets,
	}, appLabels)
	m.responses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricLinkerdResponses, Help: "Responses seen by the Linkerd proxy.",
	}, append(append([]string{}, linkerdLatencyKeys...), "classification"))
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricLinkerdLatency, Help: "Response latency in milliseconds, as the Linkerd proxy sees it.", Buckets: LinkerdBuckets,
	}, linkerdLatencyKeys)
	e.registry.MustRegister(m.app, m.responses, m.latency)
	m.appS = e.track(m.app.DeleteLabelValues, func(lv []string) { m.app.WithLabelValues(lv...) })
	m.respS = e.track(m.responses.DeleteLabelValues, func(lv []string) { m.responses.WithLabelValues(lv...) })
	m.latS = e.track(m.latency.DeleteLabelValues, func(lv []string) { m.latency.WithLabelValues(lv...) })
	return m
}

func appValues(p podInfo, code int) []string {
	return []string{p.namespace, p.name, "GET", "/", strconv.Itoa(code)}
}

// linkerdValues labels the inbound side of pod p; the deployment label is the owning
// Deployment, as Linkerd's, and empty for a bare pod.
func linkerdValues(p podInfo, code int, classification ...string) []string {
	deployment := ""
	if p.workloadKind == "Deployment" {
		deployment = p.workload
	}
	return append([]string{"inbound", p.namespace, deployment, p.name, strconv.Itoa(code)}, classification...)
}

func classify(code int) string {
	if code >= 500 {
		return "failure"
	}
	return "success"
}

func meshedBy(r *route, p podInfo) bool { return r.mesh == MeshLinkerd || p.linkerd }

func (m *httpRouteMetrics) declare(r *route, b backend, pods []podInfo) {
	for _, p := range pods {
		for _, code := range m.appCodes {
			m.appS.keep(appValues(p, code)...)
		}
		if meshedBy(r, p) {
			for _, code := range m.lnkCodes {
				m.respS.keep(linkerdValues(p, code, classify(code))...)
				m.latS.keep(linkerdValues(p, code)...)
			}
		}
	}
	if b.cluster != "" {
		for _, code := range declaredCodes {
			m.e.envReq.keep(b.cluster, strconv.Itoa(code))
		}
		m.e.envTime.keep(b.cluster)
	}
	if b.istio != nil {
		m.e.istio.declare(b, pods)
	}
}

func (m *httpRouteMetrics) answered(r *route, b backend, p podInfo, code int, ms float64) {
	m.app.WithLabelValues(appValues(p, code)...).Observe(ms / 1000)
	if meshedBy(r, p) {
		m.responses.WithLabelValues(linkerdValues(p, code, classify(code))...).Inc()
		m.latency.WithLabelValues(linkerdValues(p, code)...).Observe(ms)
	}
	if b.cluster != "" {
		m.e.envoyRequests.WithLabelValues(b.cluster, strconv.Itoa(code)).Inc()
		m.e.envoyTime.WithLabelValues(b.cluster).Observe(ms)
	}
	if b.istio != nil {
		m.e.istio.answered(b, p, code, ms)
	}
}

// unavailable records a 503 the gateway answers itself. Neither the application nor a
// destination proxy sees such a request.
func (m *httpRouteMetrics) unavailable(r *route, b backend) {
	if r.mesh != MeshGatewayAPI {
		return
	}
	if b.cluster != "" {
		m.e.envoyRequests.WithLabelValues(b.cluster, "503").Inc()
	}
	if b.istio != nil {
		m.e.istio.unavailable(b)
	}
}
