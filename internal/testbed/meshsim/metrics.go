package meshsim

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names, as each real mesh exports them.
const (
	MetricOSMRequests      = "osm_request_total"
	MetricOSMDuration      = "osm_request_duration_ms"
	MetricAPISIXStatus     = "apisix_http_status"
	MetricAPISIXLatency    = "apisix_http_latency"
	MetricEnvoyRequests    = "envoy_cluster_upstream_rq"
	MetricEnvoyRequestTime = "envoy_cluster_upstream_rq_time"
)

// Default histogram buckets: Envoy's (OSM sidecars and the Gloo gateway are Envoy) and the APISIX
// prometheus plugin's, in milliseconds.
var (
	EnvoyBuckets  = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}
	APISIXBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 30000, 60000}
)

// exporter holds the metrics of every mesh. Every series a backend pod could produce is
// declared at zero each tick, and series no longer declared are deleted at the end of the tick.
type exporter struct {
	registry *prometheus.Registry

	osmRequests, apisixStatus, envoyRequests *prometheus.CounterVec
	osmDuration, apisixLatency, envoyTime    *prometheus.HistogramVec
	series                                   []*liveSeries
	osmReq, osmDur, apxStatus, apxLat        *liveSeries
	envReq, envTime                          *liveSeries
	istio                                    *istioMetrics
	http                                     *httpRouteMetrics // Gateway API and Linkerd (httproute.go)
	traefik                                  *traefikMetrics   // traefik.go
	nginx                                    *nginxMetrics     // nginx.go
	skipper                                  *skipperMetrics   // skipper.go
	alb                                      *albMetrics       // alb.go
}

var (
	osmLabels     = []string{"source_namespace", "source_kind", "source_name", "source_pod", "destination_namespace", "destination_kind", "destination_name", "destination_pod"}
	apisixStatus  = []string{"code", "route", "matched_uri", "matched_host", "service", "consumer", "node"}
	apisixLatency = []string{"type", "route", "service", "consumer", "node"}
)

// The answers whose series exist from the start, so that rate() never sees a gap.
var declaredCodes = []int{200, 500, 503}

func newExporter() *exporter {
	e := &exporter{registry: prometheus.NewRegistry()}
	e.osmRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricOSMRequests, Help: "Requests seen by the OSM sidecar of the destination pod.",
	}, append(append([]string{}, osmLabels...), "response_code"))
	e.osmDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricOSMDuration, Help: "Request duration in milliseconds.", Buckets: EnvoyBuckets,
	}, osmLabels)
	e.apisixStatus = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricAPISIXStatus, Help: "HTTP status codes per service in APISIX.",
	}, apisixStatus)
	e.apisixLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricAPISIXLatency, Help: "HTTP request latency in milliseconds per service in APISIX.", Buckets: APISIXBuckets,
	}, apisixLatency)
	e.envoyRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricEnvoyRequests, Help: "Upstream requests per Envoy cluster and response code.",
	}, []string{"envoy_cluster_name", "envoy_response_code"})
	e.envoyTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricEnvoyRequestTime, Help: "Upstream request time in milliseconds.", Buckets: EnvoyBuckets,
	}, []string{"envoy_cluster_name"})
	e.registry.MustRegister(e.osmRequests, e.osmDuration, e.apisixStatus, e.apisixLatency, e.envoyRequests, e.envoyTime)

	e.osmReq = e.track(e.osmRequests.DeleteLabelValues, func(lv []string) { e.osmRequests.WithLabelValues(lv...) })
	e.osmDur = e.track(e.osmDuration.DeleteLabelValues, func(lv []string) { e.osmDuration.WithLabelValues(lv...) })
	e.apxStatus = e.track(e.apisixStatus.DeleteLabelValues, func(lv []string) { e.apisixStatus.WithLabelValues(lv...) })
	e.apxLat = e.track(e.apisixLatency.DeleteLabelValues, func(lv []string) { e.apisixLatency.WithLabelValues(lv...) })
	e.envReq = e.track(e.envoyRequests.DeleteLabelValues, func(lv []string) { e.envoyRequests.WithLabelValues(lv...) })
	e.envTime = e.track(e.envoyTime.DeleteLabelValues, func(lv []string) { e.envoyTime.WithLabelValues(lv...) })
	e.istio = newIstioMetrics(e)
	e.http = newHTTPRouteMetrics(e)
	e.traefik = newTraefikMetrics(e)
	e.nginx = newNginxMetrics(e)
	e.skipper = newSkipperMetrics(e)
	e.alb = newALBMetrics(e)
	return e
}

// liveSeries remembers which label sets of one vector were declared, to delete the rest.
type liveSeries struct {
	create     func([]string)
	delete     func(...string) bool
	live, seen map[string][]string
}

func (e *exporter) track(del func(...string) bool, create func([]string)) *liveSeries {
	l := &liveSeries{create: create, delete: del, live: map[string][]string{}, seen: map[string][]string{}}
	e.series = append(e.series, l)
	return l
}

func (l *liveSeries) keep(lv ...string) {
	key := strings.Join(lv, "\xff")
	if _, ok := l.seen[key]; ok {
		return
	}
	l.seen[key] = lv
	if _, ok := l.live[key]; !ok {
		l.create(lv)
	}
}

// keepExisting keeps a label set that already has its series, without creating one: for a
// data plane that creates a series at its first observation (Traefik).
func (l *liveSeries) keepExisting(lv ...string) {
	key := strings.Join(lv, "\xff")
	if _, ok := l.live[key]; ok {
		l.seen[key] = lv
	}
}

func (e *exporter) begin() {
	for _, l := range e.series {
		l.seen = map[string][]string{}
	}
}

func (e *exporter) sweep() {
	for _, l := range e.series {
		for key, lv := range l.live {
			if _, ok := l.seen[key]; !ok {
				l.delete(lv...)
			}
		}
		l.live = l.seen
	}
}

// declare creates, at zero, every series the backend's pods can produce.
func (e *exporter) declare(r *route, b backend, pods []podInfo) {
	switch r.mesh {
	case MeshOSM:
		for _, p := range pods {
			for _, code := range declaredCodes {
				e.osmReq.keep(osmValues(r, p, strconv.Itoa(code))...)
			}
			e.osmDur.keep(osmValues(r, p)...)
		}
	case MeshAPISIX:
		e.apxStatus.keep(apisixStatusValues(r, 503, "")...) // no backend to answer
		for _, p := range pods {
			for _, code := range declaredCodes {
				e.apxStatus.keep(apisixStatusValues(r, code, p.ip)...)
			}
			for _, typ := range []string{"request", "upstream", "apisix"} {
				e.apxLat.keep(typ, r.apisixRoute, "", "", p.ip)
			}
		}
	case MeshGloo, MeshContour, MeshKnative:
		if b.cluster == "" {
			return
		}
		for _, code := range declaredCodes {
			e.envReq.keep(b.cluster, strconv.Itoa(code))
		}
		e.envTime.keep(b.cluster)
	case MeshIstio:
		e.istio.declare(r.source(), b, pods)
	case MeshGatewayAPI, MeshLinkerd:
		e.http.declare(r, b, pods)
	case MeshKubernetes, meshLoadTest:
		e.declareDirect(r, b, pods)
	case MeshTraefik:
		e.traefik.declare(b)
	case MeshNginx:
		e.nginx.declare(r, b)
	case MeshSkipper:
		e.skipper.declare(b)
	case MeshALB:
		e.alb.declare(r, b)
	}
}

// declareMirror creates, at zero, the series the mirror backend's pods produce for the copies.
func (e *exporter) declareMirror(r *route, b backend, pods []podInfo) {
	switch r.mesh {
	case MeshIstio:
		for _, p := range pods {
			e.istio.declareDestination(r.source(), b, p)
		}
	case MeshGatewayAPI:
		e.http.declareMirror(r, b, pods)
	case MeshTraefik:
		e.traefik.declare(b)
	}
}

// mirrored records a mirrored copy pod p answered. The client never sees the answer, so only
// the destination's own exporters count it: the Istio sidecar's destination report, the
// application's histogram and the Linkerd inbound proxy; never a gateway's or a client
// sidecar's metrics.
func (e *exporter) mirrored(r *route, b backend, p podInfo, code int, ms float64) {
	switch r.mesh {
	case MeshIstio:
		e.istio.report("destination", r.source(), b, p, code, ms)
	case MeshGatewayAPI:
		e.http.mirrored(r, b, p, code, ms)
	case MeshTraefik:
		e.traefik.answered(b, code, ms)
	}
}

// answered records a request a pod answered with code after ms milliseconds.
func (e *exporter) answered(r *route, b backend, p podInfo, code int, ms float64) {
	switch r.mesh {
	case MeshOSM:
		e.osmRequests.WithLabelValues(osmValues(r, p, strconv.Itoa(code))...).Inc()
		e.osmDuration.WithLabelValues(osmValues(r, p)...).Observe(ms)
	case MeshAPISIX:
		e.apisixStatus.WithLabelValues(apisixStatusValues(r, code, p.ip)...).Inc()
		e.apisixLatency.WithLabelValues("request", r.apisixRoute, "", "", p.ip).Observe(ms)
		e.apisixLatency.WithLabelValues("upstream", r.apisixRoute, "", "", p.ip).Observe(ms)
		e.apisixLatency.WithLabelValues("apisix", r.apisixRoute, "", "", p.ip).Observe(0)
	case MeshGloo, MeshContour, MeshKnative:
		e.envoyRequests.WithLabelValues(b.cluster, strconv.Itoa(code)).Inc()
		e.envoyTime.WithLabelValues(b.cluster).Observe(ms)
	case MeshIstio:
		e.istio.answered(r.source(), b, p, code, ms)
	case MeshGatewayAPI, MeshLinkerd:
		e.http.answered(r, b, p, code, ms)
	case MeshKubernetes, meshLoadTest:
		e.answeredDirect(r, b, p, code, ms)
	case MeshTraefik:
		e.traefik.answered(b, code, ms)
	case MeshNginx:
		e.nginx.answered(r, b, code, ms)
	case MeshSkipper:
		e.skipper.answered(b, code, ms)
	case MeshALB:
		e.alb.answered(r, b, code, ms)
	}
}

// unavailable records a 503 answered by the mesh itself because no pod could take the request.
// OSM counts it on a selected but not Ready pod (blame) when there is one; APISIX on the route
// with an empty node; Gloo on the upstream's cluster. No latency is observed for these.
func (e *exporter) unavailable(r *route, b backend, blame *podInfo) {
	switch r.mesh {
	case MeshOSM:
		if blame != nil {
			e.osmRequests.WithLabelValues(osmValues(r, *blame, "503")...).Inc()
		}
	case MeshAPISIX:
		e.apisixStatus.WithLabelValues(apisixStatusValues(r, 503, "")...).Inc()
	case MeshGloo, MeshContour, MeshKnative:
		if b.cluster != "" {
			e.envoyRequests.WithLabelValues(b.cluster, "503").Inc()
		}
	case MeshIstio:
		e.istio.unavailable(r.source(), b)
	case MeshGatewayAPI, MeshLinkerd:
		e.http.unavailable(r, b)
	case MeshKubernetes, meshLoadTest:
		e.unavailableDirect(r, blame)
	case MeshTraefik:
		e.traefik.unavailable(b)
	case MeshNginx:
		e.nginx.unavailable(r, b)
	case MeshSkipper:
		e.skipper.unavailable(b)
	case MeshALB:
		e.alb.unavailable(r, b)
	}
}

// source is the client workload of a request, as the sidecar metrics name it.
type source struct {
	namespace, kind, name, pod string
}

var (
	userSource   = source{SourceNamespace, SourceKind, SourceName, SourcePod}
	testerSource = source{LoadTesterNamespace, LoadTesterKind, LoadTesterName, LoadTesterPod}
)

// source is who sends the route's requests: the load generator, or the load tester.
func (r *route) source() source {
	if r.tester {
		return testerSource
	}
	return userSource
}

// osmValues are the labels of a request to pod p, from the load generator or the load tester.
func osmValues(r *route, p podInfo, code ...string) []string {
	src := r.source()
	return append([]string{src.namespace, src.kind, src.name, src.pod, p.namespace, p.workloadKind, p.workload, p.name}, code...)
}

func apisixStatusValues(r *route, code int, node string) []string {
	return []string{strconv.Itoa(code), r.apisixRoute, r.matchedURI, r.matchedHost, "", "", node}
}
