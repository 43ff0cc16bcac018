package meshsim

import (
	"encoding/json"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// AWS ALB through the AWS Load Balancer Controller: the Ingresses of class alb in one
// IngressGroup (alb.ingress.kubernetes.io/group.name; an Ingress without one is a group of its
// own) make one load balancer, whose listener evaluates their rules in order.
//
// Modelling choices:
//   - An Ingress is the controller's when spec.ingressClassName or the kubernetes.io/ingress.class
//     annotation is "alb" (the class the controller's chart installs).
//   - Order: group.order (default 0), then namespace/name, then rules and paths as listed; the
//     first rule that takes a request wins. Hosts and paths are not modelled: the load is GET /
//     to the rule's host.
//   - A path whose backend port is named use-annotation follows the action of its Service name
//     (alb.ingress.kubernetes.io/actions.<name>): a forward action splits by its target groups'
//     weights, which ALB normalises; other actions carry no load. Its conditions
//     (alb.ingress.kubernetes.io/conditions.<name>) are ANDed: http-header values and
//     query-string key/values are matched whole with * and ? as wildcards (header values
//     whatever their case); other fields (host, path, method, source IP) take the load.
//   - A rule whose backend or target group Service does not exist carries no load: the
//     controller builds no target group for it (it fails the group's reconciliation instead).
//   - ALB reports to CloudWatch, not to Prometheus. The simulator exports what the acceptance
//     tests' custom queries read: alb_requests_total and alb_target_response_time_seconds, per
//     load balancer and target group (<namespace>/<service>:<port>), in place of CloudWatch's
//     RequestCount, HTTPCode_Target_5XX_Count and TargetResponseTime, which a real setup reads
//     through a CloudWatch exporter.

// MeshALB is traffic entering through an AWS ALB (alb.go).
const MeshALB Mesh = "alb"

// The simulator's stand-ins for CloudWatch's ALB metrics.
const (
	MetricALBRequests     = "alb_requests_total"
	MetricALBResponseTime = "alb_target_response_time_seconds"
)

const (
	albAnnotations   = "alb.ingress.kubernetes.io/"
	albGroupOrderKey = albAnnotations + "group.order"
	albGroupNameKey  = albAnnotations + "group.name"
)

// albCandidates: every rule path of an ALB Ingress, its priority falling with its place in
// its group's order.
func albCandidates(v *view) []candidate {
	type member struct {
		ing   *unstructured.Unstructured
		order int
	}
	groups := map[string][]member{}
	for _, ing := range v.list(IngressGVR) {
		if !isALB(ing) {
			continue
		}
		ann := ing.GetAnnotations()
		group := ann[albGroupNameKey]
		if group == "" {
			group = ing.GetNamespace() + "/" + ing.GetName()
		}
		order, _ := strconv.Atoi(strings.TrimSpace(ann[albGroupOrderKey]))
		groups[group] = append(groups[group], member{ing, order})
	}
	var out []candidate
	for group, members := range groups {
		// v.list is sorted by namespace and name; a stable sort by order keeps that within an order.
		sort.SliceStable(members, func(i, j int) bool { return members[i].order < members[j].order })
		seq := int64(0)
		for _, m := range members {
			for _, rule := range maps(m.ing.Object, "spec", "rules") {
				for _, p := range maps(rule, "http", "paths") {
					seq++
					if r := albRoute(v, m.ing, group, p); r != nil {
						r.route.priority = -seq
						out = append(out, *r)
					}
				}
			}
		}
	}
	return out
}

func isALB(ing *unstructured.Unstructured) bool {
	return str(ing.Object, "spec", "ingressClassName") == "alb" || ing.GetAnnotations()["kubernetes.io/ingress.class"] == "alb"
}

// albRoute is one rule path: its backend Service, or its action's target groups.
func albRoute(v *view, ing *unstructured.Unstructured, group string, p map[string]any) *candidate {
	ns := ing.GetNamespace()
	name := str(p, "backend", "service", "name")
	if name == "" {
		return nil
	}
	r := &route{mesh: MeshALB, object: objectRef{Kind: "Ingress", Namespace: ns, Name: ing.GetName()}, balancer: group}
	if str(p, "backend", "service", "port", "name") != "use-annotation" {
		port := str(p, "backend", "service", "port", "name")
		if n, ok := num(p, "backend", "service", "port", "number"); ok {
			port = strconv.Itoa(int(n))
		}
		r.backends = []backend{{service: types.NamespacedName{Namespace: ns, Name: name}, weight: 1, cluster: albTargetGroup(ns, name, port)}}
		if !v.serviceExists(ns, name) {
			return nil
		}
		return &candidate{apexes: []types.NamespacedName{{Namespace: ns, Name: apexOf(name)}}, route: r}
	}
	ann := ing.GetAnnotations()
	var action struct {
		Type          string `json:"type"`
		ForwardConfig struct {
			TargetGroups []struct {
				ServiceName string          `json:"serviceName"`
				ServicePort json.RawMessage `json:"servicePort"`
				Weight      *float64        `json:"weight"`
			} `json:"targetGroups"`
		} `json:"forwardConfig"`
	}
	if json.Unmarshal([]byte(ann[albAnnotations+"actions."+name]), &action) != nil || action.Type != "forward" {
		return nil
	}
	var conds []map[string]any
	if raw := ann[albAnnotations+"conditions."+name]; raw != "" {
		if json.Unmarshal([]byte(raw), &conds) != nil {
			return nil
		}
	}
	r.accepts = albConditions(conds)
	var apexes []types.NamespacedName
	for _, tg := range action.ForwardConfig.TargetGroups {
		if !v.serviceExists(ns, tg.ServiceName) {
			return nil
		}
		w := 1.0
		if tg.Weight != nil {
			w = *tg.Weight
		}
		port := strings.Trim(string(tg.ServicePort), `"`)
		r.backends = append(r.backends, backend{
			service: types.NamespacedName{Namespace: ns, Name: tg.ServiceName}, weight: w,
			cluster: albTargetGroup(ns, tg.ServiceName, port),
		})
		apexes = appendUnique(apexes, types.NamespacedName{Namespace: ns, Name: apexOf(tg.ServiceName)})
	}
	r.weighted = len(r.backends) > 1
	if len(apexes) == 0 {
		return nil
	}
	return &candidate{apexes: apexes, route: r}
}

// A missing Service gets no target group from the controller, and so no rule (serviceExists).

// albTargetGroup names a target group in the metrics: <namespace>/<service>:<port>.
func albTargetGroup(ns, service, port string) string { return ns + "/" + service + ":" + port }

// albConditions ANDs a rule's conditions; nil when it has none.
func albConditions(conds []map[string]any) requestMatch {
	if len(conds) == 0 {
		return nil
	}
	return func(req request) bool {
		for _, c := range conds {
			switch str(c, "field") {
			case "http-header":
				got, present := req.headers[strings.ToLower(str(c, "httpHeaderConfig", "httpHeaderName"))]
				if !present || !albAny(strs(c, "httpHeaderConfig", "values"), strings.ToLower(got), true) {
					return false
				}
			case "query-string":
				ok := false
				for _, kv := range maps(c, "queryStringConfig", "values") {
					got, present := req.query[str(kv, "key")]
					if present && albAny([]string{str(kv, "value")}, got, false) {
						ok = true
					}
				}
				if !ok {
					return false
				}
			}
		}
		return true
	}
}

// albAny reports whether got matches one of the values, * and ? being wildcards.
func albAny(values []string, got string, fold bool) bool {
	for _, v := range values {
		if fold {
			v = strings.ToLower(v)
		}
		// path.Match's * and ? stop at "/", which ALB's do not: replace "/" on both sides.
		if ok, err := path.Match(strings.ReplaceAll(v, "/", "\x00"), strings.ReplaceAll(got, "/", "\x00")); err == nil && ok {
			return true
		}
	}
	return false
}

// albMetrics are the stand-ins for CloudWatch's per target group ALB metrics.
type albMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	req, dur *liveSeries
}

var albLabels = []string{"load_balancer", "target_group", "code"}

// albBuckets are seconds, as CloudWatch's TargetResponseTime is.
var albBuckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

func newALBMetrics(e *exporter) *albMetrics {
	m := &albMetrics{}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricALBRequests, Help: "Requests an ALB sent to a target group, per status code (stands in for CloudWatch's RequestCount and HTTPCode_Target_*_Count).",
	}, albLabels)
	m.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: MetricALBResponseTime, Help: "Seconds a target took to answer (stands in for CloudWatch's TargetResponseTime).", Buckets: albBuckets,
	}, albLabels[:2])
	e.registry.MustRegister(m.requests, m.duration)
	m.req = e.track(m.requests.DeleteLabelValues, func(lv []string) { m.requests.WithLabelValues(lv...) })
	m.dur = e.track(m.duration.DeleteLabelValues, func(lv []string) { m.duration.WithLabelValues(lv...) })
	return m
}

func (m *albMetrics) declare(r *route, b backend) {
	for _, code := range declaredCodes {
		m.req.keep(r.balancer, b.cluster, strconv.Itoa(code))
	}
	m.dur.keep(r.balancer, b.cluster)
}

func (m *albMetrics) answered(r *route, b backend, code int, ms float64) {
	m.requests.WithLabelValues(r.balancer, b.cluster, strconv.Itoa(code)).Inc()
	m.duration.WithLabelValues(r.balancer, b.cluster).Observe(ms / 1000)
}

// unavailable: an ALB answers 503 itself when a target group has no healthy target.
func (m *albMetrics) unavailable(r *route, b backend) {
	m.requests.WithLabelValues(r.balancer, b.cluster, "503").Inc()
}
