package meshsim

import (
	"math"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// httpRoute is an HTTPRoute with one rule; backends are name, weight pairs (weight < 0: unset).
func httpRoute(name string, parents []any, backends ...any) *unstructured.Unstructured {
	var refs []any
	for i := 0; i+1 < len(backends); i += 2 {
		ref := map[string]any{"name": backends[i], "port": int64(80)}
		if w := backends[i+1].(int); w >= 0 {
			ref["weight"] = int64(w)
		}
		refs = append(refs, ref)
	}
	return obj("gateway.networking.k8s.io/v1", "HTTPRoute", ns, name, map[string]any{
		"parentRefs": parents,
		"rules":      []any{map[string]any{"backendRefs": refs}},
	})
}

func gatewayParent(name string) []any { return []any{map[string]any{"name": name}} }

var serviceParent = []any{map[string]any{"group": "", "kind": "Service", "name": "podinfo", "port": int64(80)}}

// addGateway creates a Gateway of the given GatewayClass controller (none when empty) through
// the tracker, as the fake client would guess the resource "gatewaies" from the kind, and waits
// until the simulator's caches hold them.
func (f *fixture) addGateway(name, controller string) {
	f.t.Helper()
	add := func(gvr schema.GroupVersionResource, u *unstructured.Unstructured, namespace string) {
		if err := f.dyn.Tracker().Create(gvr, u, namespace); err != nil {
			f.t.Fatal(err)
		}
	}
	add(GatewayGVR, obj("gateway.networking.k8s.io/v1", "Gateway", ns, name, map[string]any{"gatewayClassName": name + "-class"}), ns)
	if controller != "" {
		class := obj("gateway.networking.k8s.io/v1", "GatewayClass", "", name+"-class", map[string]any{"controllerName": controller})
		unstructured.RemoveNestedField(class.Object, "metadata", "namespace")
		add(GatewayClassGVR, class, "")
	}
	f.waitFor("gateway cached", func() bool {
		v := f.sim.view()
		if v.get(GatewayGVR, ns, name) == nil {
			return false
		}
		_, err := v.crds[GatewayClassGVR].Get(name + "-class")
		return controller == "" || err == nil
	})
}

func TestResolveHTTPRoutes(t *testing.T) {
	f := newFixture(t, RouterGVRs,
		httpRoute("podinfo", gatewayParent("public"), "podinfo-primary", 90, "podinfo-canary", 10),
		httpRoute("orphan", gatewayParent("missing"), "orphan-primary", 100, "orphan-canary", 0),
		httpRoute("mesh", serviceParent, "podinfo-primary", 70, "podinfo-canary", 30),
		// A user's route without weights: Gateway API weighs each backend 1.
		httpRoute("frontend", gatewayParent("public"), "frontend", -1),
	)
	f.addGateway("public", "")
	want := "gatewayapi test/frontend -> test/HTTPRoute/frontend [frontend=1]\n" +
		"gatewayapi test/podinfo -> test/HTTPRoute/podinfo [podinfo-primary=90 podinfo-canary=10]\n" +
		"linkerd test/podinfo -> test/HTTPRoute/mesh [podinfo-primary=70 podinfo-canary=30]"
	if got := describe(resolveRoutes(f.sim.view())); got != want {
		t.Fatalf("routes:\n%s\nwant:\n%s", got, want)
	}
	// A header match (A/B) does not take plain requests.
	ab := httpRoute("podinfo", gatewayParent("public"), "podinfo-primary", 0, "podinfo-canary", 100)
	ab.Object["spec"].(map[string]any)["rules"].([]any)[0].(map[string]any)["matches"] = []any{
		map[string]any{"headers": []any{map[string]any{"name": "x-canary", "value": "insider"}}},
	}
	f.updateRouter(HTTPRouteGVR, ab)
	if got := describe(resolveRoutes(f.sim.view())); strings.Contains(got, "gatewayapi test/podinfo") {
		t.Fatalf("a header-matched rule took the load:\n%s", got)
	}
}

func gatewayFixture(t *testing.T, controller string, canaryAnnotations map[string]string, objs ...runtime.Object) *fixture {
	t.Helper()
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 2, true, nil), deployment("podinfo", 1, true, canaryAnnotations), objs)...)
	f.addGateway("public", controller)
	return f
}

// Through an Envoy Gateway: the requests follow the weights; the application's histogram
// and the rule's Envoy cluster answer the built-in queries of gateway_api.metrics generic and envoy.
func TestGatewayAPIEnvoyGatewayFollowsWeights(t *testing.T) {
	f := gatewayFixture(t, EnvoyGatewayController, map[string]string{AnnotationErrorRate: "0.5"},
		httpRoute("podinfo", gatewayParent("public"), "podinfo-primary", 80, "podinfo-canary", 20))
	f.run(5) // 100 requests: 80 primary, 20 canary, 10 of them failing
	appCount := func(sel ...string) float64 {
		total := 0.0
		for _, s := range f.series(MetricHTTPRequestDuration, match(sel...)) {
			total += float64(s.metric.GetHistogram().GetSampleCount())
		}
		return total
	}
	if p, c := appCount("kubernetes_pod_name=~podinfo-primary-*"), appCount("kubernetes_pod_name=~podinfo-5d8f-*"); p != 80 || c != 20 {
		t.Fatalf("application counts: primary %v, canary %v; want 80 and 20", p, c)
	}
	if got := appCount("kubernetes_namespace=test", "kubernetes_pod_name=~podinfo-5d8f-*", "status!~5*"); got != 10 {
		t.Fatalf("canary answered %v non-5xx, want 10", got)
	}
	cluster := "envoy_cluster_name=httproute/test/podinfo/rule/0"
	if got := f.sum(MetricEnvoyRequests, match(cluster)); got != 100 {
		t.Fatalf("Envoy cluster counted %v requests, want 100", got)
	}
	if got := f.successRate(MetricEnvoyRequests, "envoy_response_code", cluster); got != 90 {
		t.Fatalf("Envoy cluster success rate %v, want 90", got)
	}
	// The default latency (20ms) reads back from both histograms, given enough requests.
	f.run(60)
	if got := f.p99(MetricEnvoyRequestTime, cluster); math.Abs(got-20) > 2 {
		t.Errorf("Envoy p99 %v ms, want about 20", got)
	}
	if got := f.p99(MetricHTTPRequestDuration, "kubernetes_pod_name=~podinfo-5d8f-*") * 1000; math.Abs(got-20) > 2 {
		t.Errorf("application p99 %v ms, want about 20", got)
	}
	// Nothing Linkerd or Istio: neither is in the path.
	if n := len(f.series(MetricLinkerdResponses, nil)); n != 0 {
		t.Errorf("%d Linkerd series without meshed pods", n)
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Errorf("invariant entries for a healthy split: %v", got)
	}
}

// Meshed pods behind an Istio gateway export Istio's destination metrics and Linkerd's
// inbound ones (gateway_api.metrics istio and linkerd).
func TestGatewayAPIIstioGatewayAndMeshedPods(t *testing.T) {
	meshed := map[string]string{AnnotationLinkerdInject: "enabled"}
	f := gatewayFixture(t, IstioGatewayController, meshed,
		httpRoute("podinfo", gatewayParent("public"), "podinfo-primary", 50, "podinfo-canary", 50))
	f.run(5)
	if got := f.sum(MetricIstioRequests, match("reporter=destination", "destination_workload_namespace=test", "destination_workload=podinfo")); got != 50 {
		t.Fatalf("Istio destination requests of the canary: %v, want 50", got)
	}
	if got := f.sum(MetricLinkerdResponses, match("direction=inbound", "namespace=test", "deployment=podinfo", "classification!=failure")); got != 50 {
		t.Fatalf("Linkerd inbound responses of the canary: %v, want 50", got)
	}
	// The primary pods are not meshed.
	if got := f.series(MetricLinkerdResponses, match("deployment=podinfo-primary")); len(got) != 0 {
		t.Fatalf("unmeshed primary has Linkerd series %v", got[0].labels)
	}
}

// A GAMMA route splits the apex Service's requests; Linkerd's built-in queries read the canary
// Deployment's inbound proxies. Broken weights and a side without Ready pods are logged.
func TestLinkerdRouteSplitsTheApex(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 2, true, nil), deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "1"}),
		[]runtime.Object{httpRoute("podinfo", serviceParent, "podinfo-primary", 90, "podinfo-canary", 10)})...)
	f.run(5)
	sel := []string{"namespace=test", "deployment=podinfo", "direction=inbound"}
	if got := f.sum(MetricLinkerdResponses, match(sel...)); got != 10 {
		t.Fatalf("canary inbound responses %v, want 10", got)
	}
	if got := f.sum(MetricLinkerdResponses, match(append(sel, "classification!=failure")...)); got != 0 {
		t.Fatalf("canary answered %v successes at error rate 1", got)
	}
	if got := f.sum(MetricLinkerdResponses, match("deployment=podinfo-primary", "classification=success", "status_code=200")); got != 90 {
		t.Fatalf("primary inbound successes %v, want 90", got)
	}
	if got := f.p99(MetricLinkerdLatency, "deployment=podinfo-primary"); math.Abs(got-20) > 2 {
		t.Errorf("Linkerd p99 %v ms, want about 20", got)
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Fatalf("invariant entries for a healthy split: %v", got)
	}

	f.updateRouter(HTTPRouteGVR, httpRoute("podinfo", serviceParent, "podinfo-primary", 90, "podinfo-canary", 20))
	f.run(1)
	f.updateRouter(HTTPRouteGVR, httpRoute("podinfo", serviceParent, "podinfo-primary", 0, "podinfo-missing-canary", 100))
	f.run(1)
	var got []string
	for _, e := range f.sim.Invariants(ns) {
		got = append(got, e.Object+": "+e.Message)
	}
	want := "HTTPRoute/podinfo: weights sum to 110, not 100\n" +
		"HTTPRoute/podinfo: traffic sent to Service test/podinfo-missing-canary, which has no Ready pods"
	if strings.Join(got, "\n") != want {
		t.Fatalf("invariant entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
}
