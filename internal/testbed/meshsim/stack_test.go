package meshsim_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
	"github.com/canary-release/terraform-provider-canary/internal/router"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/localstack"
	"github.com/canary-release/terraform-provider-canary/internal/testbed/meshsim"
)

// These tests run the simulator on the real stack and read it only through real PromQL
// queries to the real Prometheus, as the analysis does.

type sim struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	prom *metrics.Client
	env  *localstack.Env
	ns   string
}

func newSim(t *testing.T) *sim {
	t.Helper()
	if testing.Short() {
		t.Skip("needs the local stack")
	}
	t.Parallel()
	ctx := context.Background()
	env, err := localstack.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kube, dyn, err := env.Clients()
	if err != nil {
		t.Fatal(err)
	}
	prom, err := metrics.NewClient(metrics.Config{Address: env.PrometheusURL, Timeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ns := fmt.Sprintf("sim%d", rand.IntN(1_000_000_000))
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	return &sim{kube: kube, dyn: dyn, prom: prom, env: env, ns: ns}
}

// workload creates a Deployment whose pods carry app=<app> and the simulator annotations,
// plus a Service of the same name selecting them.
func (s *sim) workload(t *testing.T, app string, annotations map[string]string) {
	t.Helper()
	ctx := context.Background()
	replicas := int32(2)
	labels := map[string]string{"app": app}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: app, Namespace: s.ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "podinfo"}}},
			},
		},
	}
	if _, err := s.kube.AppsV1().Deployments(s.ns).Create(ctx, d, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.service(t, app, app, nil)
}

func (s *sim) service(t *testing.T, name, app string, annotations map[string]string) {
	t.Helper()
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.ns, Annotations: annotations},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt(9898)}},
		},
	}
	if _, err := s.kube.CoreV1().Services(s.ns).Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// canaryPair creates the primary web-primary (healthy) and the canary web with the given
// behaviour, the three Services, and the apex web (selecting the primary).
// The apex is named web-apex, because "web" is the canary's own Service here.
func (s *sim) canaryPair(t *testing.T, canary map[string]string) {
	t.Helper()
	s.workload(t, "web-primary", nil)
	s.workload(t, "web", canary)
	s.service(t, "web-canary", "web", nil)
	s.service(t, "web-apex", "web-primary", nil)
}

func (s *sim) create(t *testing.T, kind string, obj map[string]any) {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	u.SetNamespace(s.ns)
	gvr, ok := map[string]schema.GroupVersionResource{
		"TrafficSplit": router.TrafficSplitResource, "ApisixRoute": router.ApisixRouteResource,
		"Upstream": router.UpstreamResource, "RouteTable": router.RouteTableResource,
		"VirtualService": router.VirtualServiceResource,
	}[kind]
	if !ok {
		t.Fatalf("unknown kind %s", kind)
	}
	s.waitReady(t)
	if _, err := s.dyn.Resource(gvr).Namespace(s.ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last-registered first: the route goes before the namespace, so that the
	// teardown never sends the simulator's traffic to pods already deleted.
	t.Cleanup(func() {
		_ = s.dyn.Resource(gvr).Namespace(s.ns).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{})
	})
}

// waitReady waits until every Deployment meant to be Ready (not annotated with
// localstack.ReadyAnnotation = "false") has all its pods Ready, so that a route created next
// sends traffic only to pods that can take it, as the invariant asks.
func (s *sim) waitReady(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		list, err := s.kube.AppsV1().Deployments(s.ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil //nolint:nilerr // a failed list is tried again until the deadline
		}
		for _, d := range list.Items {
			if d.Spec.Template.Annotations[localstack.ReadyAnnotation] == "false" {
				continue
			}
			if d.Spec.Replicas != nil && d.Status.ReadyReplicas < *d.Spec.Replicas {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("the workloads of %s did not become Ready: %v", s.ns, err)
	}
}

func (s *sim) trafficSplit(t *testing.T, root string, primary, canary int) {
	t.Helper()
	s.create(t, "TrafficSplit", map[string]any{
		"apiVersion": "split.smi-spec.io/v1alpha2", "kind": "TrafficSplit",
		"metadata": map[string]any{"name": root},
		"spec": map[string]any{"service": root, "backends": []any{
			map[string]any{"service": "web-primary", "weight": int64(primary)},
			map[string]any{"service": "web-canary", "weight": int64(canary)},
		}},
	})
}

// eventually polls a PromQL query until check accepts its value.
func (s *sim) eventually(t *testing.T, query string, check func(float64) bool, what string) float64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var last float64
	var lastErr error
	for time.Now().Before(deadline) {
		v, err := s.prom.Query(context.Background(), query)
		last, lastErr = v, err
		if err == nil && check(v) {
			return v
		}
		time.Sleep(time.Second)
	}
	t.Fatalf("%s: %s returned %v (err %v)", what, query, last, lastErr)
	return 0
}

func near(want, tolerance float64) func(float64) bool {
	return func(v float64) bool { return math.Abs(v-want) <= tolerance }
}

// inBucketOf accepts what histogram_quantile can tell of a p99 of p99 ms from a proxy's
// buckets: a value inside the bucket that holds it. Where in the bucket depends on how the
// bucket's observations spread, which the lognormal model draws as a real pod would (for a
// p99 of 300 ms in Envoy's (250, 500] bucket, about 360 on average, with a small window's
// noise around it).
func inBucketOf(p99 float64, bucketsMs []float64) func(float64) bool {
	lower, upper := 0.0, math.Inf(1)
	for _, b := range bucketsMs {
		if b >= p99 {
			upper = b
			break
		}
		lower = b
	}
	return func(v float64) bool { return v > lower && v <= upper }
}

func (s *sim) builtin(t *testing.T, provider, metric, route string) string {
	t.Helper()
	q, ok := registry.Builtin(provider, metric)
	if !ok {
		t.Fatalf("no built-in %s %s", provider, metric)
	}
	out, err := metrics.Render(q, metrics.Vars{Name: "web", Namespace: s.ns, Target: "web", Service: "web", Route: route, Interval: "10s"})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestOSMSplitSeenThroughPrometheus(t *testing.T) {
	s := newSim(t)
	s.canaryPair(t, nil)
	s.trafficSplit(t, "web-apex", 80, 20)
	ratio := fmt.Sprintf(`sum(rate(osm_request_total{destination_namespace=%q,destination_name="web-primary"}[10s])) / sum(rate(osm_request_total{destination_namespace=%q,destination_name="web"}[10s]))`, s.ns, s.ns)
	s.eventually(t, ratio, near(4, 0.4), "80/20 split")
	total := fmt.Sprintf(`sum(rate(osm_request_total{destination_namespace=%q}[10s]))`, s.ns)
	s.eventually(t, total, near(20, 2), "default load of 20 requests/s")
}

func TestOSMErrorRateAndLatency(t *testing.T) {
	s := newSim(t)
	s.canaryPair(t, map[string]string{"sim.canary-release.dev/error-rate": "0.5", "sim.canary-release.dev/latency-ms": "300"})
	s.trafficSplit(t, "web-apex", 50, 50)
	s.eventually(t, s.builtin(t, "osm", "request-success-rate", ""), near(50, 5), "OSM success rate of a version failing half its requests")
	s.eventually(t, s.builtin(t, "osm", "request-duration", ""), inBucketOf(300, meshsim.EnvoyBuckets), "OSM p99 of a 300 ms version")
}

func TestAPISIXErrorRateAndLatency(t *testing.T) {
	s := newSim(t)
	s.canaryPair(t, map[string]string{"sim.canary-release.dev/error-rate": "0.5", "sim.canary-release.dev/latency-ms": "300"})
	// Flagger's canary route <route>-<target>-canary; all of it goes to the canary here, since
	// the built-in APISIX query measures the whole route.
	s.create(t, "ApisixRoute", map[string]any{
		"apiVersion": "apisix.apache.org/v2", "kind": "ApisixRoute",
		"metadata": map[string]any{"name": "r-web-canary"},
		"spec": map[string]any{"http": []any{map[string]any{
			"name": "method", "priority": int64(10000),
			"match":    map[string]any{"paths": []any{"/*"}},
			"backends": []any{map[string]any{"serviceName": "web-primary", "servicePort": int64(80), "weight": int64(0)}, map[string]any{"serviceName": "web-canary", "servicePort": int64(80), "weight": int64(100)}},
			"plugins":  []any{map[string]any{"name": "prometheus", "enable": true, "config": map[string]any{"prefer_name": true}}},
		}}},
	})
	s.eventually(t, s.builtin(t, "apisix", "request-success-rate", "r"), near(50, 5), "APISIX success rate")
	s.eventually(t, s.builtin(t, "apisix", "request-duration", "r"), inBucketOf(300, meshsim.APISIXBuckets), "APISIX p99")
}

func TestGlooErrorRateAndLatency(t *testing.T) {
	s := newSim(t)
	s.canaryPair(t, map[string]string{"sim.canary-release.dev/error-rate": "0.5", "sim.canary-release.dev/latency-ms": "300"})
	upstream := func(side string) string { return s.ns + "-web-" + side + "upstream-80" }
	for _, side := range []string{"primary", "canary"} {
		s.create(t, "Upstream", map[string]any{
			"apiVersion": "gloo.solo.io/v1", "kind": "Upstream",
			"metadata": map[string]any{"name": upstream(side)},
			"spec":     map[string]any{"kube": map[string]any{"serviceName": "web-" + side, "serviceNamespace": s.ns, "servicePort": int64(80)}},
		})
	}
	s.create(t, "RouteTable", map[string]any{
		"apiVersion": "gateway.solo.io/v1", "kind": "RouteTable",
		"metadata": map[string]any{"name": "web"},
		"spec": map[string]any{"routes": []any{map[string]any{"routeAction": map[string]any{"multi": map[string]any{"destinations": []any{
			map[string]any{"destination": map[string]any{"upstream": map[string]any{"name": upstream("primary"), "namespace": s.ns}}, "weight": int64(80)},
			map[string]any{"destination": map[string]any{"upstream": map[string]any{"name": upstream("canary"), "namespace": s.ns}}, "weight": int64(20)},
		}}}}}},
	})
	s.create(t, "VirtualService", map[string]any{
		"apiVersion": "gateway.solo.io/v1", "kind": "VirtualService",
		"metadata": map[string]any{"name": "web"},
		"spec": map[string]any{"virtualHost": map[string]any{"domains": []any{"app.example.com"}, "routes": []any{
			map[string]any{"matchers": []any{map[string]any{"prefix": "/"}}, "delegateAction": map[string]any{"ref": map[string]any{"name": "web", "namespace": s.ns}}},
		}}},
	})
	// The built-in Gloo query looks at the canary upstream's cluster only.
	s.eventually(t, s.builtin(t, "gloo", "request-success-rate", ""), near(50, 5), "Gloo success rate")
	s.eventually(t, s.builtin(t, "gloo", "request-duration", ""), inBucketOf(300, meshsim.EnvoyBuckets), "Gloo p99")
	split := fmt.Sprintf(`sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=%q}[10s])) / sum(rate(envoy_cluster_upstream_rq{envoy_cluster_name=%q}[10s]))`,
		upstream("primary")+"_"+s.ns, upstream("canary")+"_"+s.ns)
	s.eventually(t, split, near(4, 0.4), "Gloo 80/20 split")
}

func TestNoReadyPodsAnswer503AndAreLogged(t *testing.T) {
	s := newSim(t)
	s.canaryPair(t, map[string]string{localstack.ReadyAnnotation: "false"})
	s.trafficSplit(t, "web-apex", 50, 50)
	unavailable := fmt.Sprintf(`sum(rate(osm_request_total{destination_namespace=%q,destination_name="web",response_code="503"}[10s]))`, s.ns)
	s.eventually(t, unavailable, near(10, 1.5), "503 answers for the half of the traffic sent to pods that are not Ready")
	s.expectViolation(t, "/web-canary, which has no Ready pods")
}

func TestSplitNotSummingTo100IsLogged(t *testing.T) {
	s := newSim(t)
	s.canaryPair(t, nil)
	s.trafficSplit(t, "web-apex", 80, 10)
	s.expectViolation(t, "sum to 90")
}

func (s *sim) expectViolation(t *testing.T, text string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		v, err := s.env.InvariantViolations(context.Background(), s.ns)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range v {
			if strings.Contains(line, text) {
				return
			}
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Fatalf("no invariant-log entry mentioning %q in %s", text, s.ns)
}

func TestZeroRPSSendsNoTraffic(t *testing.T) {
	s := newSim(t)
	s.workload(t, "web-primary", nil)
	s.workload(t, "web", nil)
	s.service(t, "web-canary", "web", nil)
	s.service(t, "web-apex", "web-primary", map[string]string{"sim.canary-release.dev/rps": "0"})
	s.trafficSplit(t, "web-apex", 80, 20)
	// Series appear at zero when the backends do, and stay there.
	series := fmt.Sprintf(`sum(osm_request_total{destination_namespace=%q})`, s.ns)
	s.eventually(t, fmt.Sprintf(`count(osm_request_total{destination_namespace=%q})`, s.ns), func(v float64) bool { return v > 0 }, "series at zero")
	time.Sleep(5 * time.Second)
	if v, err := s.prom.Query(context.Background(), series); err != nil || v != 0 {
		t.Fatalf("with rps 0 the counters reached %v (err %v), want 0", v, err)
	}
}
