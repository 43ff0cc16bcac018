package meshsim

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
)

// Skipper as an Ingress controller (networking.k8s.io/v1 Ingresses of class skipper): each
// host and path of an Ingress is a route to the Services its paths name; when several paths of
// a rule share a path, zalando.org/backend-weights splits the route between their Services.
//
// Modelling choices:
//   - An Ingress is Skipper's when spec.ingressClassName or the kubernetes.io/ingress.class
//     annotation is "skipper"; an Ingress of no class is left to the other Ingress models.
//   - zalando.org/skipper-predicate is read for two terms only: False() turns every route of
//     the Ingress off, and Weight(n) raises its routes' priority by n, so that among the
//     routes for an apex the heaviest wins (the first one among equals). Other predicates, the
//     host and the path are not matched: the load is a plain GET for the route's host.
//   - A path whose Service does not exist makes no route, as in Skipper.
//   - Weights: a backend absent from backend-weights gets 0, as in Skipper; without the
//     annotation the Services of a path share it evenly. Flagger writes whole percents, so a
//     split by the annotation must sum to 100.
//   - Metrics are Skipper's route metrics (-route-response-metrics, -serve-route-metrics):
//     skipper_response_duration_seconds and skipper_serve_route_duration_seconds, histograms
//     labelled code, method and route, the route id being
//     kube_<namespace>__<ingress>__<host>__<path>__<service> with every non-word character
//     turned into "_". A request no Ready pod takes is a 503 of the route, without latency.

// Skipper's metric names and the buckets of Flagger's Skipper tutorial (-histogram-metric-buckets).
const (
	MetricSkipperResponse   = "skipper_response_duration_seconds"
	MetricSkipperServeRoute = "skipper_serve_route_duration_seconds"
	SkipperIngressClass     = "skipper"
)

var (
	SkipperBuckets = []float64{0.01, 1, 10, 100}
	skipperLabels  = []string{"code", "method", "route"}
	skipperNonWord = regexp.MustCompile(`\W`)
	skipperWeight  = regexp.MustCompile(`^Weight\(\s*([0-9]+)\s*\)$`)
)

// skipperCandidates: every host and path of the Ingresses of class skipper.
func skipperCandidates(v *view) []candidate {
	var out []candidate
	for _, ing := range v.list(IngressGVR) {
		annotations := ing.GetAnnotations()
		class := str(ing.Object, "spec", "ingressClassName")
		if class == "" {
			class = annotations["kubernetes.io/ingress.class"]
		}
		if class != SkipperIngressClass {
			continue
		}
		off, priority := skipperPredicate(annotations["zalando.org/skipper-predicate"])
		if off {
			continue
		}
		var weights map[string]float64
		weighted := json.Unmarshal([]byte(annotations["zalando.org/backend-weights"]), &weights) == nil && weights != nil
		ns, ref := ing.GetNamespace(), objectRef{Kind: "Ingress", Namespace: ing.GetNamespace(), Name: ing.GetName()}
		for _, rule := range maps(ing.Object, "spec", "rules") {
			host := str(rule, "host")
			byPath := map[string]*route{}
			var order []string
			for _, p := range maps(rule, "http", "paths") {
				svc := str(p, "backend", "service", "name")
				if svc == "" {
					continue
				}
				if _, err := v.services.Services(ns).Get(svc); err != nil {
					// Skipper makes no route of a path whose Service does not exist.
					continue
				}
				path := str(p, "path")
				r, ok := byPath[path]
				if !ok {
					r = &route{mesh: MeshSkipper, object: ref, priority: priority}
					byPath[path] = r
					order = append(order, path)
				}
				w := 1.0
				if weighted {
					w = weights[svc]
				}
				r.backends = append(r.backends, backend{
					service: types.NamespacedName{Namespace: ns, Name: svc}, weight: w,
					cluster: skipperRouteID(ns, ing.GetName(), host, path, svc),
				})
			}
			for _, path := range order {
				r := byPath[path]
				r.weighted = weighted && len(r.backends) > 1
				var apexes []types.NamespacedName
				for _, b := range r.backends {
					apexes = appendUnique(apexes, types.NamespacedName{Namespace: ns, Name: apexOf(b.service.Name)})
				}
				out = append(out, candidate{apexes: apexes, route: r})
			}
		}
	}
	return out
}

// skipperPredicate reads the && terms of a skipper-predicate annotation: whether False() turns
// the routes off, and the priority Weight(n) gives them.
func skipperPredicate(raw string) (off bool, priority int64) {
	for _, t := range strings.Split(raw, "&&") {
		t = strings.TrimSpace(t)
		if t == "False()" {
			off = true
		}
		if m := skipperWeight.FindStringSubmatch(t); m != nil {
			n, _ := strconv.ParseInt(m[1], 10, 64)
			priority += n
		}
	}
	return off, priority
}

// skipperRouteID is Skipper's id of an Ingress route.
func skipperRouteID(namespace, name, host, path, service string) string {
	parts := []string{namespace, name, host, path, service}
	for i, p := range parts {
		parts[i] = skipperNonWord.ReplaceAllString(p, "_")
	}
	return "kube_" + strings.Join(parts, "__")
}

// skipperMetrics are Skipper's route metrics.
type skipperMetrics struct {
	response, serve *prometheus.HistogramVec
	resp, srv       *liveSeries
}

func newSkipperMetrics(e *exporter) *skipperMetrics {
	m := &skipperMetrics{}
	m.response = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricSkipperResponse, Help: "Duration in seconds of a response.", Buckets: SkipperBuckets,
	}, skipperLabels)
	m.serve = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricSkipperServeRoute, Help: "Duration in seconds of serving a route.", Buckets: SkipperBuckets,
	}, skipperLabels)
	e.registry.MustRegister(m.response, m.serve)
	m.resp = e.track(m.response.DeleteLabelValues, func(lv []string) { m.response.WithLabelValues(lv...) })
	m.srv = e.track(m.serve.DeleteLabelValues, func(lv []string) { m.serve.WithLabelValues(lv...) })
	return m
}

func skipperValues(b backend, code int) []string {
	return []string{strconv.Itoa(code), "GET", b.cluster}
}

func (m *skipperMetrics) declare(b backend) {
	for _, code := range declaredCodes {
		m.resp.keep(skipperValues(b, code)...)
		m.srv.keep(skipperValues(b, code)...)
	}
}

func (m *skipperMetrics) answered(b backend, code int, ms float64) {
	m.response.WithLabelValues(skipperValues(b, code)...).Observe(ms / 1000)
	m.serve.WithLabelValues(skipperValues(b, code)...).Observe(ms / 1000)
}

func (m *skipperMetrics) unavailable(b backend) {
	m.response.WithLabelValues(skipperValues(b, 503)...).Observe(0)
	m.serve.WithLabelValues(skipperValues(b, 503)...).Observe(0)
}
