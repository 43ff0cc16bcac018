package meshsim

import (
	"github.com/canary-release/terraform-provider-canary/internal/mesh/registry"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

// genericSelector is the series selector of http_request_duration_seconds_count in the
// built-in success-rate query of the "kubernetes" router (Flagger's generic HTTP queries, as
// gatewayapi's) for canary test/podinfo, applied the way Prometheus applies it.
func genericSelector(t *testing.T, sel ...string) func(map[string]string) bool {
	t.Helper()
	q, ok := registry.Builtin("kubernetes", "request-success-rate")
	if !ok {
		q, ok = registry.Builtin("gatewayapi", "request-success-rate")
	}
	if !ok {
		t.Fatal("no generic built-in query")
	}
	q, err := metrics.Render(q, metrics.Vars{Name: "podinfo", Namespace: ns, Target: "podinfo", Service: "podinfo", Interval: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	// The denominator's selector: every answer of the canary pods.
	i := strings.LastIndex(q, MetricHTTPRequestDuration+"_count{")
	body := q[i+len(MetricHTTPRequestDuration+"_count{"):]
	body = body[:strings.Index(body, "}")]
	type matcher struct {
		name string
		re   *regexp.Regexp
		neg  bool
	}
	var ms []matcher
	for _, m := range regexp.MustCompile(`(\w+)(=~|!~|!=|=)"([^"]*)"`).FindAllStringSubmatch(body, -1) {
		expr := m[3]
		if m[2] == "=" || m[2] == "!=" {
			expr = regexp.QuoteMeta(expr)
		}
		ms = append(ms, matcher{m[1], regexp.MustCompile("^(?:" + expr + ")$"), strings.HasPrefix(m[2], "!")})
	}
	if len(ms) == 0 {
		t.Fatalf("no label matchers in %s", q)
	}
	extra := match(sel...)
	return func(l map[string]string) bool {
		for _, m := range ms {
			if m.re.MatchString(l[m.name]) == m.neg {
				return false
			}
		}
		return extra(l)
	}
}

func (f *fixture) histogramCount(name string, sel func(map[string]string) bool) float64 {
	total := 0.0
	for _, s := range f.series(name, sel) {
		total += float64(s.metric.GetHistogram().GetSampleCount())
	}
	return total
}

// setSelector points a Service at other pods and waits until the simulator sees it.
func (f *fixture) setSelector(name string, selector map[string]string) {
	f.t.Helper()
	svc, err := f.kube.CoreV1().Services(ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	svc.Spec.Selector = selector
	if _, err := f.kube.CoreV1().Services(ns).Update(f.ctx, svc, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
	f.waitFor("cache sees the selector of "+name, func() bool {
		got, err := f.sim.view().services.Services(ns).Get(name)
		return err == nil && got.Spec.Selector["app"] == selector["app"]
	})
}

var directApex = map[string]string{AnnotationClients: ClientsDirect}

// Un-meshed clients reach the pods the apex Service selects: blue/green by selector. Only the
// application's histogram counts them, and the generic queries find the canary's series.
func TestDirectClientsFollowTheApexSelector(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(directApex),
		deployment("podinfo-primary", 2, true, nil),
		deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "0.5", AnnotationLatencyMs: "300"}))...)
	if got, want := describe(resolveRoutes(f.sim.view())), "kubernetes test/podinfo -> test/Service/podinfo [podinfo=100]"; got != want {
		t.Fatalf("routes:\n%s\nwant:\n%s", got, want)
	}
	canary := genericSelector(t)
	f.run(5) // 100 requests
	for _, pod := range []string{"podinfo-primary-5d8f-0", "podinfo-primary-5d8f-1"} {
		if got := f.appCount("kubernetes_namespace=test", "kubernetes_pod_name="+pod, "method=GET", "path=/", "status=200"); got != 50 {
			t.Errorf("pod %s answered %v, want 50", pod, got)
		}
	}
	if got := f.histogramCount(MetricHTTPRequestDuration, canary); got != 0 {
		t.Fatalf("the canary answered %v requests before the switch", got)
	}
	for _, name := range []string{MetricOSMRequests, MetricIstioRequests, MetricLinkerdResponses, MetricEnvoyRequests, MetricAPISIXStatus} {
		if n := len(f.series(name, nil)); n != 0 {
			t.Errorf("%d %s series without a mesh", n, name)
		}
	}

	// The switch: the apex selects the canary pods.
	f.setSelector("podinfo", map[string]string{"app": "podinfo"})
	f.run(60)
	if got := f.histogramCount(MetricHTTPRequestDuration, canary); got != 1200 {
		t.Fatalf("the generic query's series count %v canary answers, want 1200", got)
	}
	if got := f.histogramCount(MetricHTTPRequestDuration, genericSelector(t, "status!~5*")); got != 600 {
		t.Fatalf("the canary answered %v non-5xx, want 600", got)
	}
	f.run(1000) // 20 000 more answers, for the p99 (see TestLatencyFromPodAnnotations)
	f.wantP99("canary", f.p99(MetricHTTPRequestDuration, canaryPods)*1000, 300, appBucketsMs, 0.2)
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Fatalf("invariant entries: %v", got)
	}

	// A selector with no Ready pod behind it: user traffic to nothing.
	f.setSelector("podinfo", map[string]string{"app": "podinfo-missing"})
	f.run(1)
	got := f.sim.Invariants(ns)
	if len(got) != 1 || got[0].Object != "Service/podinfo" || got[0].Message != "traffic sent to Service test/podinfo, which has no Ready pods" {
		t.Fatalf("invariant entries %v, want one for Service/podinfo", got)
	}
}

// Test traffic counts in every exporter inside the pods it reaches: the OSM sidecar, the Istio
// sidecar's destination report, the Linkerd proxy of meshed pods and the application's
// histogram, all with the load tester as source; never in a gateway's metrics.
func TestLoadTestCountsInEveryPodSideExporter(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil),
		deployment("podinfo", 2, true, map[string]string{AnnotationLinkerdInject: "enabled"}),
		flaggerIstio(100, 0),
		[]runtime.Object{httpRoute("podinfo", gatewayParent("public"), "podinfo-primary", 100, "podinfo-canary", 0)})...)
	f.addGateway("public", EnvoyGatewayController)
	l := newLoadTester(f)
	f.run(1)
	l.post("podinfo", "cmd", heyCanary) // 10 requests a second for 5 seconds
	f.run(2)

	tester := "source_workload=" + LoadTesterName
	if got := f.sum(MetricOSMRequests, match(append(osmDest("podinfo"), "source_name="+LoadTesterName)...)); got != 20 {
		t.Errorf("OSM sidecars counted %v test requests, want 20", got)
	}
	if got := f.istioCount("destination", "podinfo", tester, "source_workload_namespace="+LoadTesterNamespace, "destination_service_name=podinfo-canary"); got != 20 {
		t.Errorf("Istio destination reports of test requests: %v, want 20", got)
	}
	if got := f.sum(MetricIstioRequests, match("reporter=source", tester)); got != 0 {
		t.Errorf("Istio source reports of test requests: %v, want none", got)
	}
	if got := f.sum(MetricLinkerdResponses, match("deployment=podinfo", "direction=inbound")); got != 20 {
		t.Errorf("Linkerd inbound responses of the canary: %v, want 20", got)
	}
	if got := f.appCount(canaryPods); got != 20 {
		t.Errorf("application histogram of the canary: %v, want 20", got)
	}
	// The gateway and the mesh carried the users' 60 requests (3s) each, all to the primary.
	if got := f.sum(MetricEnvoyRequests, nil); got != 60 {
		t.Errorf("Envoy gateway counted %v requests, want the 60 user requests", got)
	}
	if got := f.istioCount("destination", "podinfo-primary", "source_workload="+SourceName); got != 60 {
		t.Errorf("Istio destination reports of the primary: %v, want 60", got)
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Errorf("invariant entries: %v", got)
	}
}

// Blue/green without a mesh: the load tester's traffic to the canary Service is what the
// generic queries read while the apex still selects the primary.
func TestLoadTestWithoutAMesh(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(directApex),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 2, true, map[string]string{AnnotationErrorRate: "0.25"}))...)
	l := newLoadTester(f)
	f.run(1)
	l.post("podinfo", "cmd", heyCanary)
	f.run(4)
	if got := f.histogramCount(MetricHTTPRequestDuration, genericSelector(t)); got != 40 {
		t.Fatalf("the generic query's series count %v test requests, want 40", got)
	}
	if got := f.histogramCount(MetricHTTPRequestDuration, genericSelector(t, "status!~5*")); got != 30 {
		t.Fatalf("%v non-5xx answers, want 30", got)
	}
	if got := f.appCount(primaryPods); got != 100 {
		t.Fatalf("the primary answered %v user requests, want 100", got)
	}
	for _, name := range []string{MetricIstioRequests, MetricLinkerdResponses} {
		if n := len(f.series(name, nil)); n != 0 {
			t.Errorf("%d %s series without a mesh", n, name)
		}
	}
}
