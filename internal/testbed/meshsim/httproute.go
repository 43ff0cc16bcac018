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

// gatewayCandidates: every rule of every HTTPRoute attached to an existing Gateway, serving
// the apexes of the route's backends (see httpRouteCandidates). Listener hostnames and
// allowedRoutes are not checked: the load enters for the apex, whatever host it names.
func gatewayCandidates(v *view) []candidate {
	var out []candidate
	for _, hr := range v.list(HTTPRouteGVR) {
		gw, ok := attachedGateway(v, hr)
		if !ok {
			continue
		}
		out = append(out, httpRouteCandidates(hr, MeshGatewayAPI, gatewayImpl(v, gw), nil)...)
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
		out = append(out, httpRouteCandidates(hr, MeshLinkerd, "", apexes)...)
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
	switch gatewayController(v, gw) {
	case EnvoyGatewayController:
		return gatewayImplEnvoy
	case IstioGatewayController:
		return gatewayImplIstio
	}
	return ""
}

// httpRouteCandidates turns each match of each rule into a candidate whose priority is the
// match's Gateway API precedence (an Exact path, then the longest PathPrefix, then a method,
// then the most header matches, then the most query matches); ties go to the earlier rule and
// route (routes in name order, not by creation time). A rule without matches matches
// PathPrefix /. apexes nil means the apexes of the route's backends. A backendRef without
// weight weighs 1 (the Gateway API default). Only splits between <apex>-primary and
// <apex>-canary are held to weights summing to 100: a user's route may weigh 1:1. A matching
// rule without backends takes its requests out of the simulation. Of the filters of a rule or
// a backendRef, only RequestMirror and the Set-Cookie headers of ResponseHeaderModifier count.
func httpRouteCandidates(hr *unstructured.Unstructured, mesh Mesh, impl string, apexes []types.NamespacedName) []candidate {
	ns := hr.GetNamespace()
	object := objectRef{Kind: "HTTPRoute", Namespace: ns, Name: hr.GetName()}
	var routes []*route
	var fromBackends []types.NamespacedName
	for i, rule := range maps(hr.Object, "spec", "rules") {
		base := route{mesh: mesh, object: object, gateway: impl, setCookies: gatewaySetCookies(maps(rule, "filters"))}
		for _, ref := range maps(rule, "backendRefs") {
			b, ok := gatewayBackend(ref, ns, impl)
			if !ok {
				continue
			}
			if impl == gatewayImplEnvoy {
				// Envoy Gateway makes one cluster per rule, holding every backend of the rule.
				b.cluster = fmt.Sprintf("httproute/%s/%s/rule/%d", ns, hr.GetName(), i)
			}
			w, ok := num(ref, "weight")
			if !ok {
				w = 1
			}
			b.weight = w
			b.setCookies = gatewaySetCookies(maps(ref, "filters"))
			if apexOf(b.service.Name) != b.service.Name {
				base.weighted = true
			}
			base.backends = append(base.backends, b)
			fromBackends = appendUnique(fromBackends, types.NamespacedName{Namespace: b.service.Namespace, Name: apexOf(b.service.Name)})
		}
		if mesh == MeshGatewayAPI && len(base.backends) > 0 {
			base.mirror = gatewayMirror(rule, ns, impl)
		}
		matches := maps(rule, "matches")
		if len(matches) == 0 {
			matches = []map[string]any{{}}
		}
		for _, m := range matches {
			r := base
			r.accepts, r.priority = gatewayMatch(m), gatewayPrecedence(m)
			routes = append(routes, &r)
		}
	}
	if apexes == nil {
		apexes = fromBackends
	}
	if len(apexes) == 0 {
		return nil
	}
	out := make([]candidate, 0, len(routes))
	for _, r := range routes {
		out = append(out, candidate{apexes: apexes, route: r})
	}
	return out
}

// gatewayBackend resolves a backendRef (or a RequestMirror's backendRef) to a Service; false
// for another kind of backend.
func gatewayBackend(ref map[string]any, ns, impl string) (backend, bool) {
	group, _ := ref["group"].(string)
	kind, _ := ref["kind"].(string)
	if group != "" || (kind != "" && kind != "Service") || str(ref, "name") == "" {
		return backend{}, false
	}
	svc := types.NamespacedName{Namespace: nsOr(ref, ns), Name: str(ref, "name")}
	b := backend{service: svc}
	if impl == gatewayImplIstio {
		b.istio = &istioDest{host: fqdn(svc), mtls: true}
	}
	return b, true
}

// gatewayMirror reads a rule's RequestMirror filter: percent, or fraction (denominator 100 by
// default); without either every request is mirrored.
func gatewayMirror(rule map[string]any, ns, impl string) *mirror {
	for _, f := range maps(rule, "filters") {
		if str(f, "type") != "RequestMirror" {
			continue
		}
		rm := mapAt(f, "requestMirror")
		b, ok := gatewayBackend(mapAt(rm, "backendRef"), ns, impl)
		if !ok {
			continue
		}
		percent := 100.0
		if p, ok := num(rm, "percent"); ok {
			percent = p
		} else if n, ok := num(rm, "fraction", "numerator"); ok {
			d, ok := num(rm, "fraction", "denominator")
			if !ok {
				d = 100
			}
			percent = 0
			if d > 0 {
				percent = n / d * 100
			}
		}
		return &mirror{backend: b, percent: min(max(percent, 0), 100)}
	}
	return nil
}

// gatewayMatch is the condition of one HTTPRouteMatch on GET / and the request's headers (names
// in any case) and query parameters (names as written). Header and query values match Exact
// (the default) or RegularExpression (RE2, the whole value, as Envoy does); paths PathPrefix
// (the default, "/"), Exact or RegularExpression.
func gatewayMatch(m map[string]any) requestMatch {
	return func(req request) bool {
		if p := mapAt(m, "path"); p != nil {
			value, ok := p["value"].(string)
			if !ok {
				value = "/"
			}
			switch str(p, "type") {
			case "Exact":
				if value != requestPath {
					return false
				}
			case "RegularExpression":
				if !fullMatch(value, requestPath) {
					return false
				}
			default:
				if strings.TrimRight(value, "/") != "" {
					return false
				}
			}
		}
		if method := str(m, "method"); method != "" && !strings.EqualFold(method, requestMethod) {
			return false
		}
		return gatewayValues(maps(m, "headers"), req.headers, true) && gatewayValues(maps(m, "queryParams"), req.query, false)
	}
}

func gatewayValues(conds []map[string]any, have map[string]string, header bool) bool {
	for _, c := range conds {
		name := str(c, "name")
		if header {
			name = strings.ToLower(name)
		}
		got, ok := have[name]
		if !ok {
			return false
		}
		switch str(c, "type") {
		case "RegularExpression":
			if !fullMatch(str(c, "value"), got) {
				return false
			}
		default:
			if got != str(c, "value") {
				return false
			}
		}
	}
	return true
}

// gatewayPrecedence orders matches as the Gateway API does (see httpRouteCandidates).
func gatewayPrecedence(m map[string]any) int64 {
	var exact, prefix int64
	switch p := mapAt(m, "path"); {
	case p == nil:
		prefix = 1
	case str(p, "type") == "Exact":
		exact = 1
	case str(p, "type") == "" || str(p, "type") == "PathPrefix":
		value, ok := p["value"].(string)
		if !ok {
			value = "/"
		}
		prefix = int64(min(len(value), 1023))
	}
	var method int64
	if str(m, "method") != "" {
		method = 1
	}
	headers, query := int64(min(len(maps(m, "headers")), 1023)), int64(min(len(maps(m, "queryParams")), 1023))
	return (((exact*1024+prefix)*2+method)*1024+headers)*1024 + query
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
	appLabels          = []string{"kubernetes_namespace", "kubernetes_pod_name", "method", "path", "status", "controller_revision_hash"}
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
	return []string{p.namespace, p.name, "GET", "/", strconv.Itoa(code), p.revision}
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
		m.declareApp(p)
		if meshedBy(r, p) {
			m.declareLinkerd(p)
		}
	}
	if b.cluster != "" {
		for _, code := range declaredCodes {
			m.e.envReq.keep(b.cluster, strconv.Itoa(code))
		}
		m.e.envTime.keep(b.cluster)
	}
	if b.istio != nil {
		m.e.istio.declare(r.source(), b, pods)
	}
}

func (m *httpRouteMetrics) declareApp(p podInfo) {
	for _, code := range m.appCodes {
		m.appS.keep(appValues(p, code)...)
	}
}

func (m *httpRouteMetrics) declareLinkerd(p podInfo) {
	for _, code := range m.lnkCodes {
		m.respS.keep(linkerdValues(p, code, classify(code))...)
		m.latS.keep(linkerdValues(p, code)...)
	}
}

func (m *httpRouteMetrics) answered(r *route, b backend, p podInfo, code int, ms float64) {
	m.observeApp(p, code, ms)
	if meshedBy(r, p) {
		m.observeLinkerd(p, code, ms)
	}
	if b.cluster != "" {
		m.e.envoyRequests.WithLabelValues(b.cluster, strconv.Itoa(code)).Inc()
		m.e.envoyTime.WithLabelValues(b.cluster).Observe(ms)
	}
	if b.istio != nil {
		m.e.istio.answered(r.source(), b, p, code, ms)
	}
}

func (m *httpRouteMetrics) observeApp(p podInfo, code int, ms float64) {
	m.app.WithLabelValues(appValues(p, code)...).Observe(ms / 1000)
}

func (m *httpRouteMetrics) observeLinkerd(p podInfo, code int, ms float64) {
	m.responses.WithLabelValues(linkerdValues(p, code, classify(code))...).Inc()
	m.latency.WithLabelValues(linkerdValues(p, code)...).Observe(ms)
}

// declareMirror and mirrored: a RequestMirror copy is seen by the pod that answers it (the
// application, its Linkerd proxy, its Istio sidecar as destination), not by the gateway: no
// Envoy cluster or Istio source report counts it.
func (m *httpRouteMetrics) declareMirror(r *route, b backend, pods []podInfo) {
	for _, p := range pods {
		m.declareApp(p)
		if meshedBy(r, p) {
			m.declareLinkerd(p)
		}
		if b.istio != nil {
			m.e.istio.declareDestination(r.source(), b, p)
		}
	}
}

func (m *httpRouteMetrics) mirrored(r *route, b backend, p podInfo, code int, ms float64) {
	m.observeApp(p, code, ms)
	if meshedBy(r, p) {
		m.observeLinkerd(p, code, ms)
	}
	if b.istio != nil {
		m.e.istio.report("destination", r.source(), b, p, code, ms)
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
		m.e.istio.unavailable(r.source(), b)
	}
}
