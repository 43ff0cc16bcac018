package meshsim

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Istio resources, in the version Flagger writes; the API server serves every version of them.
var (
	IstioVirtualServiceGVR = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1beta1", Resource: "virtualservices"}
	DestinationRuleGVR     = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1beta1", Resource: "destinationrules"}
)

// Istio's standard metrics.
const (
	MetricIstioRequests = "istio_requests_total"
	MetricIstioDuration = "istio_request_duration_milliseconds"
)

// istioDest is what an Istio backend adds to a backend: the names its metrics carry.
type istioDest struct {
	host string // the destination host as a FQDN: destination_service
	mtls bool   // ISTIO_MUTUAL (the default): connection_security_policy mutual_tls
}

// clusterDomain is the suffix of Service FQDNs, as Istio expands short hosts.
const clusterDomain = "svc.cluster.local"

// istioService resolves a VirtualService or DestinationRule host written in namespace ns to a
// Service: a short name is relative to ns, a FQDN <name>.<ns>.svc.cluster.local names one.
// Anything else (an external name, a wildcard) is no Service of the mesh.
func istioService(host, ns string) (types.NamespacedName, bool) {
	if host == "" || strings.Contains(host, "*") {
		return types.NamespacedName{}, false
	}
	if !strings.Contains(host, ".") {
		return types.NamespacedName{Namespace: ns, Name: host}, true
	}
	rest, ok := strings.CutSuffix(host, "."+clusterDomain)
	if !ok {
		return types.NamespacedName{}, false
	}
	name, svcNS, ok := strings.Cut(rest, ".")
	if !ok || name == "" || svcNS == "" || strings.Contains(svcNS, ".") {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: svcNS, Name: name}, true
}

func fqdn(svc types.NamespacedName) string {
	return svc.Name + "." + svc.Namespace + "." + clusterDomain
}

// istioCandidates: each http route of each VirtualService, in order, serving the apexes its
// hosts name (or, when its hosts name no Service, such as "*" or a public host name, the apexes
// of its destinations). A request takes the first route whose match accepts it (VirtualServices
// in name order, so the first one wins an apex). A route without destinations (a redirect, a
// direct response) takes its requests out of the simulation. Gateways are not modelled: the
// load reaches the route whichever gateway it is bound to.
//
// Delegation: a VirtualService without hosts is a delegate, which routes only what a root's
// http route with `delegate` sends it: that route stands for the delegate's routes, in order,
// each taking the requests both matches accept. A delegate that does not exist (or has hosts,
// which Istio ignores as a delegate) leaves the root route's requests nowhere to go: an
// invariant entry when a request takes it.
func istioCandidates(v *view) []candidate {
	rules := v.list(DestinationRuleGVR)
	var out []candidate
	for _, vs := range v.list(IstioVirtualServiceGVR) {
		hosts := strs(vs.Object, "spec", "hosts")
		if len(hosts) == 0 {
			continue // a delegate: reached through its root only
		}
		ns := vs.GetNamespace()
		object := objectRef{Kind: "VirtualService", Namespace: ns, Name: vs.GetName()}
		var routes []*route
		var fromDests []types.NamespacedName
		for _, h := range maps(vs.Object, "spec", "http") {
			if ref := mapAt(h, "delegate"); ref != nil {
				delegated, dests := istioDelegate(v, rules, object, h, ref)
				routes = append(routes, delegated...)
				for _, d := range dests {
					fromDests = appendUnique(fromDests, d)
				}
				continue
			}
			r, dests := istioRoute(rules, object, h, ns)
			routes = append(routes, r)
			for _, d := range dests {
				fromDests = appendUnique(fromDests, d)
			}
		}
		var apexes []types.NamespacedName
		for _, h := range hosts {
			if svc, ok := istioService(h, ns); ok {
				apexes = appendUnique(apexes, svc)
			}
		}
		if len(apexes) == 0 {
			apexes = fromDests
		}
		if len(apexes) == 0 {
			continue
		}
		for _, r := range routes {
			out = append(out, candidate{apexes: apexes, route: r})
		}
	}
	return out
}

// istioRoute is one http route of a VirtualService (object) in namespace ns, and the apexes
// of its destinations.
func istioRoute(rules []*unstructured.Unstructured, object objectRef, h map[string]any, ns string) (*route, []types.NamespacedName) {
	r := &route{mesh: MeshIstio, object: object, weighted: true, accepts: istioMatch(h), setCookies: setCookies(mapAt(h, "headers", "response"))}
	var apexes []types.NamespacedName
	dests := maps(h, "route")
	for _, d := range dests {
		w, _ := num(d, "weight")
		if len(dests) == 1 {
			// Istio sends everything to a lone destination, whatever its weight.
			w = 100
		}
		b := istioBackend(rules, d, ns, w)
		b.setCookies = setCookies(mapAt(d, "headers", "response"))
		r.backends = append(r.backends, b)
		if b.broken == "" {
			apexes = appendUnique(apexes, types.NamespacedName{Namespace: b.service.Namespace, Name: apexOf(b.service.Name)})
		}
	}
	if len(r.backends) > 0 {
		r.mirror = istioMirror(rules, h, ns)
	}
	return r, apexes
}

// istioDelegate expands a root's http route h, whose delegate is ref, into the delegate's
// routes (see istioCandidates), with the apexes of their destinations.
func istioDelegate(v *view, rules []*unstructured.Unstructured, root objectRef, h, ref map[string]any) ([]*route, []types.NamespacedName) {
	name, ns := str(ref, "name"), nsOr(ref, root.Namespace)
	when := istioMatch(h)
	delegate := v.get(IstioVirtualServiceGVR, ns, name)
	if delegate == nil || len(strs(delegate.Object, "spec", "hosts")) > 0 {
		why := "which does not exist"
		if delegate != nil {
			why = "which has hosts, so Istio does not take it as a delegate"
		}
		broken := backend{weight: 100, broken: fmt.Sprintf("VirtualService %s/%s delegates to VirtualService %s/%s, %s", root.Namespace, root.Name, ns, name, why)}
		return []*route{{mesh: MeshIstio, object: root, accepts: when, backends: []backend{broken}}}, nil
	}
	object := objectRef{Kind: "VirtualService", Namespace: ns, Name: name}
	var out []*route
	var apexes []types.NamespacedName
	for _, dh := range maps(delegate.Object, "spec", "http") {
		r, dests := istioRoute(rules, object, dh, ns)
		r.accepts = both(when, r.accepts)
		out = append(out, r)
		for _, d := range dests {
			apexes = appendUnique(apexes, d)
		}
	}
	return out, apexes
}

// The request the load generator sends, besides its headers and query (abtest.go).
const (
	requestMethod = "GET"
	requestPath   = "/"
)

// istioMatch is the condition of an http route's match list: any of its entries; a route
// without match takes every request. Within an entry every condition must hold: uri and method
// against GET /, headers (names in any case) and queryParams, withoutHeaders. sourceLabels and
// sourceNamespace describe a client the load generator is not, so such an entry matches nothing;
// authority, scheme, port and gateways are not modelled (they hold).
func istioMatch(h map[string]any) requestMatch {
	matches := maps(h, "match")
	if len(matches) == 0 {
		return nil
	}
	return func(req request) bool {
		for _, m := range matches {
			if istioMatchEntry(m, req) {
				return true
			}
		}
		return false
	}
}

func istioMatchEntry(m map[string]any, req request) bool {
	for _, k := range []string{"sourceLabels", "sourceNamespace"} {
		if _, ok := m[k]; ok {
			return false
		}
	}
	if uri := mapAt(m, "uri"); uri != nil && !istioString(uri, requestPath) {
		return false
	}
	if method := mapAt(m, "method"); method != nil && !istioString(method, requestMethod) {
		return false
	}
	for name, cond := range mapAt(m, "headers") {
		c, _ := cond.(map[string]any)
		if got, ok := req.headers[strings.ToLower(name)]; !ok || !istioString(c, got) {
			return false
		}
	}
	for name, cond := range mapAt(m, "queryParams") {
		c, _ := cond.(map[string]any)
		if got, ok := req.query[name]; !ok || !istioString(c, got) {
			return false
		}
	}
	for name, cond := range mapAt(m, "withoutHeaders") {
		c, _ := cond.(map[string]any)
		if got, ok := req.headers[strings.ToLower(name)]; ok && istioString(c, got) {
			return false
		}
	}
	return true
}

// istioString applies an Istio StringMatch (exact, prefix, or an RE2 regex matching the whole
// value, as Envoy's safe_regex does) to a value that is present; an empty one asks for presence.
func istioString(c map[string]any, got string) bool {
	if v, ok := c["exact"].(string); ok {
		return got == v
	}
	if v, ok := c["prefix"].(string); ok {
		return strings.HasPrefix(got, v)
	}
	if v, ok := c["regex"].(string); ok {
		return fullMatch(v, got)
	}
	return true
}

// fullMatch tells whether an RE2 expression matches the whole of s; a bad one matches nothing.
func fullMatch(expr, s string) bool {
	re, err := regexp.Compile("^(?:" + expr + ")$")
	return err == nil && re.MatchString(s)
}

// istioMirror is an http route's mirror with its mirrorPercentage.value (or the deprecated
// mirrorPercent); without either, every request is mirrored, as in Istio.
func istioMirror(rules []*unstructured.Unstructured, h map[string]any, ns string) *mirror {
	dest := mapAt(h, "mirror")
	if dest == nil {
		return nil
	}
	percent := 100.0
	if p, ok := num(h, "mirrorPercentage", "value"); ok {
		percent = p
	} else if p, ok := num(h, "mirrorPercent"); ok {
		percent = p
	}
	return &mirror{backend: istioBackend(rules, map[string]any{"destination": dest}, ns, 0), percent: min(max(percent, 0), 100)}
}

// istioBackend resolves one HTTPRouteDestination, with the DestinationRule of its host: a subset
// narrows the Service's pods to the subset's labels, and a missing subset leaves the request
// nowhere to go (Istio answers 503, "no cluster").
func istioBackend(rules []*unstructured.Unstructured, d map[string]any, ns string, weight float64) backend {
	host := str(d, "destination", "host")
	b := backend{weight: weight}
	svc, ok := istioService(host, ns)
	if !ok {
		b.broken = fmt.Sprintf("destination host %q is not a Service of the mesh", host)
		return b
	}
	b.service = svc
	port := "0"
	if p, ok := num(d, "destination", "port", "number"); ok {
		port = strconv.FormatFloat(p, 'f', -1, 64)
	}
	subset := str(d, "destination", "subset")
	// Envoy's cluster name, so that each subset is its own round-robin and pod set.
	b.cluster = "outbound|" + port + "|" + subset + "|" + fqdn(svc)
	dest := &istioDest{host: fqdn(svc), mtls: true}
	b.istio = dest
	rule := istioRuleFor(rules, svc, ns)
	if rule != nil {
		switch str(rule.Object, "spec", "trafficPolicy", "tls", "mode") {
		case "", "ISTIO_MUTUAL":
		default:
			dest.mtls = false
		}
	}
	if subset == "" {
		return b
	}
	if rule == nil {
		b.broken = fmt.Sprintf("no DestinationRule for host %s defines subset %q", fqdn(svc), subset)
		return b
	}
	for _, s := range maps(rule.Object, "spec", "subsets") {
		if str(s, "name") == subset {
			labels, _, _ := unstructured.NestedStringMap(s, "labels")
			b.subset = labels
			return b
		}
	}
	b.broken = fmt.Sprintf("DestinationRule %s/%s has no subset %q", rule.GetNamespace(), rule.GetName(), subset)
	return b
}

// istioRuleFor finds the DestinationRule for a Service as a client in namespace clientNS sees
// it: one in the client's namespace first, then one in the Service's; first by name.
func istioRuleFor(rules []*unstructured.Unstructured, svc types.NamespacedName, clientNS string) *unstructured.Unstructured {
	var inService *unstructured.Unstructured
	for _, dr := range rules {
		host, ok := istioService(str(dr.Object, "spec", "host"), dr.GetNamespace())
		if !ok || host != svc {
			continue
		}
		if dr.GetNamespace() == clientNS {
			return dr
		}
		if dr.GetNamespace() == svc.Namespace && inService == nil {
			inService = dr
		}
	}
	return inService
}

// Istio metric labels: a subset of the standard ones, with their real names.
var istioLabels = []string{
	"reporter", "source_workload", "source_workload_namespace",
	"destination_workload", "destination_workload_namespace",
	"destination_service", "destination_service_name", "destination_service_namespace",
	"request_protocol", "response_code", "response_flags", "connection_security_policy",
}

// istioMetrics are Istio's standard request count and duration. Every request a pod answers is
// reported twice, as in Istio: by the client's sidecar (reporter="source") and by the pod's
// (reporter="destination"). A 503 the mesh answers itself only the client's sidecar reports;
// a mirrored copy or a load tester's request only the pod's.
type istioMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	req, dur *liveSeries
}

func newIstioMetrics(e *exporter) *istioMetrics {
	m := &istioMetrics{}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricIstioRequests, Help: "Requests seen by the Istio sidecars.",
	}, istioLabels)
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricIstioDuration, Help: "Request duration in milliseconds.", Buckets: EnvoyBuckets,
	}, istioLabels)
	e.registry.MustRegister(m.requests, m.duration)
	m.req = e.track(m.requests.DeleteLabelValues, func(lv []string) { m.requests.WithLabelValues(lv...) })
	m.dur = e.track(m.duration.DeleteLabelValues, func(lv []string) { m.duration.WithLabelValues(lv...) })
	return m
}

// istioValues are the label values of one report. p is nil for a request no pod answered.
func istioValues(reporter string, src source, b backend, p *podInfo, code int, flags string) []string {
	workload, workloadNS, security := "unknown", "unknown", "unknown"
	host, svcName, svcNS := "unknown", "unknown", "unknown"
	if b.istio != nil {
		host, svcName, svcNS = b.istio.host, b.service.Name, b.service.Namespace
	}
	if p != nil {
		workload, workloadNS = p.workload, p.namespace
		if reporter == "destination" {
			security = "none"
			if b.istio != nil && b.istio.mtls {
				security = "mutual_tls"
			}
		}
	}
	return []string{reporter, src.name, src.namespace, workload, workloadNS, host, svcName, svcNS,
		"http", strconv.Itoa(code), flags, security}
}

func (m *istioMetrics) declare(src source, b backend, pods []podInfo) {
	if b.broken == "" {
		m.req.keep(istioValues("source", src, b, nil, 503, "UH")...)
	}
	for i := range pods {
		for _, reporter := range []string{"source", "destination"} {
			m.declareReport(reporter, src, b, pods[i])
		}
	}
}

// declareDestination declares the destination sidecar's series of pod p only: for requests no
// client sidecar reports (mirrored copies, the load tester's).
func (m *istioMetrics) declareDestination(src source, b backend, p podInfo) {
	m.declareReport("destination", src, b, p)
}

func (m *istioMetrics) declareReport(reporter string, src source, b backend, p podInfo) {
	for _, code := range declaredCodes {
		m.req.keep(istioValues(reporter, src, b, &p, code, "-")...)
	}
	m.dur.keep(istioValues(reporter, src, b, &p, 200, "-")...)
}

func (m *istioMetrics) answered(src source, b backend, p podInfo, code int, ms float64) {
	for _, reporter := range []string{"source", "destination"} {
		m.report(reporter, src, b, p, code, ms)
	}
}

// report counts one answered request as one sidecar reports it.
func (m *istioMetrics) report(reporter string, src source, b backend, p podInfo, code int, ms float64) {
	lv := istioValues(reporter, src, b, &p, code, "-")
	m.requests.WithLabelValues(lv...).Inc()
	m.duration.WithLabelValues(lv...).Observe(ms)
}

// unavailable: the client's sidecar answers 503 itself, with Envoy's flag UH (no healthy
// upstream) when the backend has no Ready pod, NR (no route) when it leads nowhere.
func (m *istioMetrics) unavailable(src source, b backend) {
	flags := "UH"
	if b.broken != "" || b.istio == nil {
		flags = "NR"
	}
	m.requests.WithLabelValues(istioValues("source", src, b, nil, 503, flags)...).Inc()
}
