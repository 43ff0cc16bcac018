package meshsim

import (
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// ingress-nginx (networking.k8s.io/v1 Ingresses of class nginx): each host and path of an
// ordinary Ingress is a location leading to its backend Service; a canary Ingress (annotation
// nginx.ingress.kubernetes.io/canary: "true") of the same host and path adds its backend as the
// location's alternative, which takes canary-weight percent of the requests, or those its
// canary-by-header or canary-by-cookie picks.
//
// Modelling choices:
//   - An Ingress is nginx's when spec.ingressClassName or the older kubernetes.io/ingress.class
//     annotation is "nginx" (the controller's default class).
//   - Of ordinary Ingresses that repeat a host and path, the oldest (creation time, then
//     namespace and name) wins, as in ingress-nginx; of the canary Ingresses of its namespace,
//     the first in the same order, since a location has one alternative. A canary Ingress
//     without such a location is ignored. The load is a plain GET for each location's host.
//   - A path whose Service does not exist is no location (the controller has no upstream for
//     it), as a route to a missing object is no route for the other models: the user's
//     Ingress carries load from the moment the release creates the apex Service.
//   - The alternative takes a request when canary-by-header's header equals canary-by-header-value,
//     matches canary-by-header-pattern (a search), or, with neither set, is "always"; then when
//     the canary-by-cookie cookie is "always"; else by weight (canary-weight out of
//     canary-weight-total, default 100). A header, or else a cookie, of "never" keeps the request
//     on the location's backend.
//   - Metrics are the controller's nginx_ingress_controller_requests and
//     nginx_ingress_controller_response_duration_seconds (default buckets), labelled with the
//     location's Ingress, namespace, Service, host and path, status and method, and canary =
//     the alternative upstream's name <namespace>-<service>-<port> when it took the request,
//     empty otherwise. Flagger's duration query reads the mean, so each request observes the
//     pod's latency itself. A request no Ready pod takes is a 503 without latency.

// IngressGVR is the Kubernetes Ingress.
var IngressGVR = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}

// ingress-nginx's names.
const (
	NginxIngressClass     = "nginx"
	MetricNginxRequests   = "nginx_ingress_controller_requests"
	MetricNginxDuration   = "nginx_ingress_controller_response_duration_seconds"
	nginxAnnotationPrefix = "nginx.ingress.kubernetes.io/"
	ingressClassLegacy    = "kubernetes.io/ingress.class"
)

var (
	nginxLabels      = []string{"status", "method", "path", "namespace", "ingress", "service", "canary", "host"}
	nginxConstLabels = prometheus.Labels{
		"controller_namespace": "ingress-nginx", "controller_class": "k8s.io/ingress-nginx", "controller_pod": "ingress-nginx-controller-0",
	}
)

// ingressLabels are what the controller's metrics say about a location.
type ingressLabels struct {
	namespace, ingress, service, host, path string
}

// nginxLocation is one host and path of an ordinary Ingress, with its alternative.
type nginxLocation struct {
	owner   *unstructured.Unstructured
	labels  ingressLabels
	main    backend
	canary  *unstructured.Unstructured // the canary Ingress whose backend is the alternative
	alt     backend
	decides func(request) nginxPick
}

// nginxPick is where the canary rules send a request before the weight is drawn.
type nginxPick int

const (
	pickByWeight nginxPick = iota
	pickCanary
	pickMain
)

func ingressIsNginx(ing *unstructured.Unstructured) bool {
	if class := str(ing.Object, "spec", "ingressClassName"); class != "" {
		return class == NginxIngressClass
	}
	return ing.GetAnnotations()[ingressClassLegacy] == NginxIngressClass
}

func isCanaryIngress(ing *unstructured.Unstructured) bool {
	return ing.GetAnnotations()[nginxAnnotationPrefix+"canary"] == "true"
}

// ingressPaths calls f with each rule path's host, path and backend Service (name and port as
// the upstream name spells it).
func ingressPaths(ing *unstructured.Unstructured, f func(host, path, service, port string)) {
	for _, rule := range maps(ing.Object, "spec", "rules") {
		for _, p := range maps(rule, "http", "paths") {
			svc := mapAt(p, "backend", "service")
			if str(svc, "name") == "" {
				continue
			}
			port := str(svc, "port", "name")
			if n, ok := num(svc, "port", "number"); ok {
				port = strconv.FormatInt(int64(n), 10)
			}
			path := str(p, "path")
			if path == "" {
				path = "/"
			}
			f(str(rule, "host"), path, str(svc, "name"), port)
		}
	}
}

// nginxCandidates: every location of an nginx Ingress, split with its alternative.
func nginxCandidates(v *view) []candidate {
	var main, canaries []*unstructured.Unstructured
	for _, ing := range v.list(IngressGVR) {
		switch {
		case !ingressIsNginx(ing):
		case isCanaryIngress(ing):
			canaries = append(canaries, ing)
		default:
			main = append(main, ing)
		}
	}
	oldestFirst(main)
	oldestFirst(canaries)
	locations := map[string]*nginxLocation{}
	var order []string
	for _, ing := range main {
		ns := ing.GetNamespace()
		ingressPaths(ing, func(host, path, service, port string) {
			key := host + "\x00" + path
			if _, taken := locations[key]; taken || !v.serviceExists(ns, service) {
				return
			}
			locations[key] = &nginxLocation{
				owner:  ing,
				labels: ingressLabels{namespace: ns, ingress: ing.GetName(), service: service, host: host, path: path},
				main:   backend{service: types.NamespacedName{Namespace: ns, Name: service}, weight: 1},
			}
			order = append(order, key)
		})
	}
	for _, ing := range canaries {
		ns := ing.GetNamespace()
		ingressPaths(ing, func(host, path, service, port string) {
			loc := locations[host+"\x00"+path]
			if loc == nil || loc.canary != nil || loc.labels.namespace != ns || !v.serviceExists(ns, service) {
				return
			}
			loc.canary = ing
			loc.alt = backend{service: types.NamespacedName{Namespace: ns, Name: service}, cluster: ns + "-" + service + "-" + port}
			loc.decides = nginxCanaryRules(ing.GetAnnotations())
		})
	}
	var out []candidate
	for _, key := range order {
		out = append(out, locationCandidates(locations[key])...)
	}
	return out
}

func (v *view) serviceExists(ns, name string) bool {
	_, err := v.services.Services(ns).Get(name)
	return err == nil
}

func oldestFirst(list []*unstructured.Unstructured) {
	sort.SliceStable(list, func(i, j int) bool {
		ti, tj := list[i].GetCreationTimestamp(), list[j].GetCreationTimestamp()
		return ti.Before(&tj)
	})
}

// locationCandidates are a location's routes: the split, and the routes its canary rules force
// (ahead of the split for the requests they pick).
func locationCandidates(loc *nginxLocation) []candidate {
	labels := loc.labels
	apexes := []types.NamespacedName{{Namespace: labels.namespace, Name: apexOf(labels.service)}}
	if loc.canary == nil {
		ref := objectRef{Kind: "Ingress", Namespace: labels.namespace, Name: loc.owner.GetName()}
		return []candidate{{apexes: apexes, route: &route{mesh: MeshNginx, object: ref, backends: []backend{loc.main}, ingress: &labels}}}
	}
	ref := objectRef{Kind: "Ingress", Namespace: loc.canary.GetNamespace(), Name: loc.canary.GetName()}
	a := loc.canary.GetAnnotations()
	weight, _ := strconv.ParseFloat(a[nginxAnnotationPrefix+"canary-weight"], 64)
	total := 100.0
	if t, err := strconv.ParseFloat(a[nginxAnnotationPrefix+"canary-weight-total"], 64); err == nil && t > 0 {
		total = t
	}
	weight = min(max(weight, 0), total) / total * 100
	mainB, altB := loc.main, loc.alt
	mainB.weight, altB.weight = 100-weight, weight
	split := &route{mesh: MeshNginx, object: ref, weighted: true, backends: []backend{mainB, altB}, ingress: &labels}
	forced := func(pick nginxPick, b backend) candidate {
		b.weight = 1
		return candidate{apexes: apexes, route: &route{
			mesh: MeshNginx, object: ref, backends: []backend{b}, ingress: &labels, priority: 1,
			accepts: func(req request) bool { return loc.decides(req) == pick },
		}}
	}
	return []candidate{{apexes: apexes, route: split}, forced(pickCanary, loc.alt), forced(pickMain, loc.main)}
}

// nginxCanaryRules is how a canary Ingress's header and cookie annotations place a request.
func nginxCanaryRules(a map[string]string) func(request) nginxPick {
	header := strings.ToLower(a[nginxAnnotationPrefix+"canary-by-header"])
	value := a[nginxAnnotationPrefix+"canary-by-header-value"]
	pattern, _ := regexp.Compile(a[nginxAnnotationPrefix+"canary-by-header-pattern"])
	cookie := a[nginxAnnotationPrefix+"canary-by-cookie"]
	return func(req request) nginxPick {
		if got, ok := req.headers[header]; header != "" && ok {
			switch {
			case value != "":
				if got == value {
					return pickCanary
				}
			case pattern != nil && pattern.String() != "":
				if pattern.MatchString(got) {
					return pickCanary
				}
			case got == "always":
				return pickCanary
			case got == "never":
				return pickMain
			}
		}
		if got, ok := requestCookie(req, cookie); cookie != "" && ok {
			switch got {
			case "always":
				return pickCanary
			case "never":
				return pickMain
			}
		}
		return pickByWeight
	}
}

// requestCookie reads cookie name from the request's Cookie header.
func requestCookie(req request, name string) (string, bool) {
	for _, part := range strings.Split(req.headers["cookie"], ";") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if ok && k == name {
			return v, true
		}
	}
	return "", false
}

// nginxMetrics are the controller's request metrics.
type nginxMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	req, dur *liveSeries
}

func newNginxMetrics(e *exporter) *nginxMetrics {
	m := &nginxMetrics{}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricNginxRequests, Help: "The total number of client requests", ConstLabels: nginxConstLabels,
	}, nginxLabels)
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricNginxDuration, Help: "The time spent on receiving the response from the upstream server",
		ConstLabels: nginxConstLabels, Buckets: prometheus.DefBuckets,
	}, nginxLabels)
	e.registry.MustRegister(m.requests, m.duration)
	m.req = e.track(m.requests.DeleteLabelValues, func(lv []string) { m.requests.WithLabelValues(lv...) })
	m.dur = e.track(m.duration.DeleteLabelValues, func(lv []string) { m.duration.WithLabelValues(lv...) })
	return m
}

// nginxValues are the labels of a request on route r's location that backend b answered;
// b.cluster is the alternative upstream's name, empty for the location's own backend.
func nginxValues(r *route, b backend, code int) []string {
	l := r.ingress
	return []string{strconv.Itoa(code), "GET", l.path, l.namespace, l.ingress, l.service, b.cluster, l.host}
}

func (m *nginxMetrics) declare(r *route, b backend) {
	for _, code := range declaredCodes {
		m.req.keep(nginxValues(r, b, code)...)
		m.dur.keep(nginxValues(r, b, code)...)
	}
}

func (m *nginxMetrics) answered(r *route, b backend, code int, ms float64) {
	m.requests.WithLabelValues(nginxValues(r, b, code)...).Inc()
	m.duration.WithLabelValues(nginxValues(r, b, code)...).Observe(ms / 1000)
}

func (m *nginxMetrics) unavailable(r *route, b backend) {
	if r.ingress != nil {
		m.requests.WithLabelValues(nginxValues(r, b, 503)...).Inc()
	}
}
