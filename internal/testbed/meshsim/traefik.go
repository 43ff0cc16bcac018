package meshsim

import (
	"fmt"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Traefik (traefik.io/v1alpha1): an IngressRoute's route sends its requests to its services;
// a service of kind TraefikService is followed to that object, which splits by weight
// (spec.weighted) or sends to one service and copies to others (spec.mirroring).
//
// Modelling choices:
//   - Every IngressRoute route competes for the apexes of its backends; the first one (by
//     namespace, name and route order) wins. Its match rule (Host, PathPrefix, Header...) is
//     not read: the load is a plain GET / for the route's host.
//   - Weighted services of weight 0 are skipped and a missing weight is 1, as in Traefik's
//     weighted round robin. A TraefikService naming another TraefikService is not followed.
//   - Metrics are Traefik's service metrics: traefik_service_requests_total and
//     traefik_service_request_duration_seconds (default buckets 0.1, 0.3, 1.2 and 5 s), labelled
//     code, method, protocol and service = <namespace>-<Service>-<port>@kubernetescrd, each
//     series from its code's first request, as the real Traefik exports them. Mirrored
//     copies count on the mirror's service too (Traefik builds it with its own metrics); a
//     request no Ready pod takes is a 503 on the service, without latency.

// Traefik's resources.
var (
	TraefikServiceGVR = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "traefikservices"}
	IngressRouteGVR   = schema.GroupVersionResource{Group: "traefik.io", Version: "v1alpha1", Resource: "ingressroutes"}
)

// Traefik's metric names and its default histogram buckets (seconds).
const (
	MetricTraefikRequests = "traefik_service_requests_total"
	MetricTraefikDuration = "traefik_service_request_duration_seconds"
)

var (
	TraefikBuckets = []float64{0.1, 0.3, 1.2, 5}
	traefikLabels  = []string{"code", "method", "protocol", "service"}
)

// traefikCandidates: each IngressRoute route, through the TraefikServices it names, to the
// Kubernetes Services behind them.
func traefikCandidates(v *view) []candidate {
	var out []candidate
	for _, ir := range v.list(IngressRouteGVR) {
		ns := ir.GetNamespace()
		for _, rt := range maps(ir.Object, "spec", "routes") {
			for _, svc := range maps(rt, "services") {
				r := traefikRoute(v, svc, ns, objectRef{Kind: "IngressRoute", Namespace: ns, Name: ir.GetName()})
				if r == nil {
					continue
				}
				var apexes []types.NamespacedName
				for _, b := range r.backends {
					apexes = appendUnique(apexes, types.NamespacedName{Namespace: b.service.Namespace, Name: apexOf(b.service.Name)})
				}
				if len(apexes) > 0 {
					out = append(out, candidate{apexes: apexes, route: r})
				}
			}
		}
	}
	return out
}

// traefikRoute is the route of one IngressRoute service: a Kubernetes Service alone, or the
// split or mirror of the TraefikService it names.
func traefikRoute(v *view, svc map[string]any, ns string, owner objectRef) *route {
	if str(svc, "kind") != "TraefikService" {
		b, ok := traefikBackend(svc, ns, 1)
		if !ok {
			return nil
		}
		return &route{mesh: MeshTraefik, object: owner, backends: []backend{b}}
	}
	tsNS := str(svc, "namespace")
	if tsNS == "" {
		tsNS = ns
	}
	ts := v.get(TraefikServiceGVR, tsNS, str(svc, "name"))
	if ts == nil {
		return nil
	}
	ref := objectRef{Kind: "TraefikService", Namespace: tsNS, Name: ts.GetName()}
	if main := mapAt(ts.Object, "spec", "mirroring"); main != nil {
		b, ok := traefikBackend(main, tsNS, 1)
		if !ok {
			return nil
		}
		r := &route{mesh: MeshTraefik, object: ref, backends: []backend{b}}
		for _, m := range maps(main, "mirrors") {
			if mb, ok := traefikBackend(m, tsNS, 1); ok {
				pct, set := num(m, "percent")
				if !set {
					pct = 0 // Traefik's default: a mirror without percent copies nothing
				}
				r.mirror = &mirror{backend: mb, percent: pct}
				break // the simulator models one mirror per route
			}
		}
		return r
	}
	r := &route{mesh: MeshTraefik, object: ref, weighted: true}
	for _, s := range maps(ts.Object, "spec", "weighted", "services") {
		w, ok := num(s, "weight")
		if !ok {
			w = 1
		}
		if b, ok := traefikBackend(s, tsNS, w); ok {
			r.backends = append(r.backends, b)
		}
	}
	return r
}

// traefikBackend is a service entry naming a Kubernetes Service, with the service label its
// metrics carry.
func traefikBackend(s map[string]any, ns string, weight float64) (backend, bool) {
	if k := str(s, "kind"); (k != "" && k != "Service") || str(s, "name") == "" {
		return backend{}, false
	}
	if sns := str(s, "namespace"); sns != "" {
		ns = sns
	}
	port := str(s, "port")
	if n, ok := num(s, "port"); ok {
		port = strconv.FormatInt(int64(n), 10)
	}
	name := str(s, "name")
	return backend{
		service: types.NamespacedName{Namespace: ns, Name: name},
		weight:  weight,
		cluster: fmt.Sprintf("%s-%s-%s@kubernetescrd", ns, name, port),
	}, true
}

// traefikMetrics are Traefik's service metrics.
type traefikMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	req, dur *liveSeries
}

func newTraefikMetrics(e *exporter) *traefikMetrics {
	m := &traefikMetrics{}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricTraefikRequests, Help: "How many HTTP requests were processed, per service.",
	}, traefikLabels)
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricTraefikDuration, Help: "How long it took to process the request on a service, in seconds.", Buckets: TraefikBuckets,
	}, traefikLabels)
	e.registry.MustRegister(m.requests, m.duration)
	m.req = e.track(m.requests.DeleteLabelValues, func(lv []string) { m.requests.WithLabelValues(lv...) })
	m.dur = e.track(m.duration.DeleteLabelValues, func(lv []string) { m.duration.WithLabelValues(lv...) })
	return m
}

func traefikValues(b backend, code int) []string {
	return []string{strconv.Itoa(code), "GET", "http", b.cluster}
}

// declare keeps the series a backend already has: Traefik creates a series at the first
// request of its code (a canary failing every request has no code 200 series), and drops
// them with the service.
func (m *traefikMetrics) declare(b backend) {
	for _, code := range declaredCodes {
		m.req.keepExisting(traefikValues(b, code)...)
		m.dur.keepExisting(traefikValues(b, code)...)
	}
}

func (m *traefikMetrics) answered(b backend, code int, ms float64) {
	m.req.keep(traefikValues(b, code)...)
	m.dur.keep(traefikValues(b, code)...)
	m.requests.WithLabelValues(traefikValues(b, code)...).Inc()
	m.duration.WithLabelValues(traefikValues(b, code)...).Observe(ms / 1000)
}

func (m *traefikMetrics) unavailable(b backend) {
	if b.cluster != "" {
		m.req.keep(traefikValues(b, 503)...)
		m.dur.keep(traefikValues(b, 503)...)
		m.requests.WithLabelValues(traefikValues(b, 503)...).Inc()
		m.duration.WithLabelValues(traefikValues(b, 503)...).Observe(0)
	}
}
