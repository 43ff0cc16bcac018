package meshsim

import (
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
	// The default latency (20ms) reads back from both histograms, given enough requests: 60 000
	// at the gateway, 12 000 of them to the canary (see TestLatencyFromPodAnnotations).
	f.run(3000)
	f.wantP99("Envoy", f.p99(MetricEnvoyRequestTime, cluster), DefaultLatencyMs, EnvoyBuckets, 0.1)
	f.wantP99("application", f.p99(MetricHTTPRequestDuration, "kubernetes_pod_name=~podinfo-5d8f-*")*1000, DefaultLatencyMs, appBucketsMs, 0.1)
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
	f.run(5000) // 90 000 requests to the primary, for its p99 (see TestLatencyFromPodAnnotations)
	f.wantP99("Linkerd", f.p99(MetricLinkerdLatency, "deployment=podinfo-primary"), DefaultLatencyMs, LinkerdBuckets, 0.1)
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

// backendRefs lists name, weight pairs.
func backendRefs(pairs ...any) []any {
	var refs []any
	for i := 0; i+1 < len(pairs); i += 2 {
		refs = append(refs, map[string]any{"name": pairs[i], "port": int64(80), "weight": int64(pairs[i+1].(int))})
	}
	return refs
}

var pathRoot = map[string]any{"type": "PathPrefix", "value": "/"}

// httpRouteRules is the HTTPRoute podinfo with the given rules.
func httpRouteRules(parents []any, rules ...any) *unstructured.Unstructured {
	return obj("gateway.networking.k8s.io/v1", "HTTPRoute", ns, "podinfo", map[string]any{"parentRefs": parents, "rules": rules})
}

// abRule is the provider's A/B rule: the header match sends everything to the canary.
func abRule(headers ...any) map[string]any {
	return map[string]any{
		"matches":     []any{map[string]any{"path": pathRoot, "headers": headers}},
		"backendRefs": backendRefs("podinfo-primary", 0, "podinfo-canary", 100),
	}
}

func defaultRule(primary, canary int) map[string]any {
	return map[string]any{"matches": []any{map[string]any{"path": pathRoot}}, "backendRefs": backendRefs("podinfo-primary", primary, "podinfo-canary", canary)}
}

// appCount counts the application histogram's observations, like sum(..._count{...}).
func (f *fixture) appCount(sel ...string) float64 {
	total := 0.0
	for _, s := range f.series(MetricHTTPRequestDuration, match(sel...)) {
		total += float64(s.metric.GetHistogram().GetSampleCount())
	}
	return total
}

const (
	primaryPods = "kubernetes_pod_name=~podinfo-primary-*"
	canaryPods  = "kubernetes_pod_name=~podinfo-5d8f-*"
)

func TestGatewayMatch(t *testing.T) {
	tagged := request{headers: map[string]string{"x-canary": "insider", "cookie": "a=1; flagger-cookie=abc"}, query: map[string]string{"beta": "on.1"}}
	hq := func(typ, name, value string) map[string]any {
		c := map[string]any{"name": name, "value": value}
		if typ != "" {
			c["type"] = typ
		}
		return c
	}
	for _, tc := range []struct {
		name          string
		match         map[string]any
		tagged, plain bool
	}{
		{"empty: PathPrefix /", map[string]any{}, true, true},
		{"header, Exact by default, any case of the name", map[string]any{"headers": []any{hq("", "X-Canary", "insider")}}, true, false},
		{"header Exact, other value", map[string]any{"headers": []any{hq("Exact", "x-canary", "Insider")}}, false, false},
		{"cookie RegularExpression", map[string]any{"headers": []any{hq("RegularExpression", "Cookie", ".*flagger-cookie=abc.*")}}, true, false},
		{"regex matches the whole value", map[string]any{"headers": []any{hq("RegularExpression", "x-canary", "ins")}}, false, false},
		{"query RegularExpression", map[string]any{"queryParams": []any{hq("RegularExpression", "beta", `on\.\d`)}}, true, false},
		{"query names keep their case", map[string]any{"queryParams": []any{hq("Exact", "BETA", "on.1")}}, false, false},
		{"method GET", map[string]any{"method": "GET"}, true, true},
		{"method POST", map[string]any{"method": "POST"}, false, false},
		{"path Exact /", map[string]any{"path": map[string]any{"type": "Exact", "value": "/"}}, true, true},
		{"another prefix", map[string]any{"path": map[string]any{"type": "PathPrefix", "value": "/api"}}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accepts := gatewayMatch(tc.match)
			if got := accepts.takes(tagged); got != tc.tagged {
				t.Errorf("tagged request: %v, want %v", got, tc.tagged)
			}
			if got := accepts.takes(request{}); got != tc.plain {
				t.Errorf("plain request: %v, want %v", got, tc.plain)
			}
		})
	}
}

// The provider's A/B HTTPRoute: tagged requests take the header rule, plain ones the default
// rule. Gateway API precedence picks the rule with more header matches, even when it comes
// second; the GAMMA form routes the same way.
func TestGatewayAPIABRules(t *testing.T) {
	ab := abRule(map[string]any{"type": "Exact", "name": "x-canary", "value": "insider"})
	for name, route := range map[string]*unstructured.Unstructured{
		"header rule first":  httpRouteRules(gatewayParent("public"), ab, defaultRule(100, 0)),
		"header rule second": httpRouteRules(gatewayParent("public"), defaultRule(100, 0), ab),
		"linkerd":            httpRouteRules(serviceParent, ab, defaultRule(100, 0)),
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, RouterGVRs, objects(podinfoServices(abApex),
				deployment("podinfo-primary", 2, true, nil), deployment("podinfo", 1, true, nil), []runtime.Object{route})...)
			f.addGateway("public", "")
			f.run(10) // 200 requests, 60 tagged
			if p, c := f.appCount(primaryPods), f.appCount(canaryPods); p != 140 || c != 60 {
				t.Fatalf("primary %v, canary %v; want 140 and the 60 tagged requests", p, c)
			}
			if got := f.sim.Invariants(ns); len(got) != 0 {
				t.Fatalf("invariant entries: %v", got)
			}
		})
	}
}

// Tagged requests sent by the A/B rule to a canary without Ready pods break the invariant.
func TestGatewayAPIABToAnUnreadyCanaryIsLogged(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(abApex),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, false, nil), []runtime.Object{
			httpRouteRules(gatewayParent("public"), abRule(map[string]any{"name": "x-canary", "value": "insider"}), defaultRule(100, 0)),
		})...)
	f.addGateway("public", "")
	f.run(2)
	got := f.sim.Invariants(ns)
	if len(got) == 0 || got[0].Object != "HTTPRoute/podinfo" || !strings.Contains(got[0].Message, "test/podinfo-canary, which has no Ready pods") {
		t.Fatalf("invariant entries %v, want tagged traffic to the unready canary", got)
	}
}

// Session affinity: the cookie rule takes the requests with the cookie; the others take the
// weighted rule, whose ResponseHeaderModifier does not change the routing.
func TestGatewayAPISessionAffinity(t *testing.T) {
	weighted := defaultRule(80, 20)
	weighted["backendRefs"].([]any)[1].(map[string]any)["filters"] = []any{map[string]any{
		"type":                   "ResponseHeaderModifier",
		"responseHeaderModifier": map[string]any{"add": []any{map[string]any{"name": "Set-Cookie", "value": "flagger-cookie=abc; Max-Age=86400"}}},
	}}
	f := newFixture(t, RouterGVRs, objects(
		podinfoServices(map[string]string{AnnotationABHeader: "cookie=flagger-cookie=abc", AnnotationABShare: "0.5"}),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil), []runtime.Object{
			httpRouteRules(gatewayParent("public"),
				abRule(map[string]any{"type": "RegularExpression", "name": "Cookie", "value": ".*flagger-cookie=abc.*"}), weighted),
		})...)
	f.addGateway("public", "")
	f.run(10) // 200 requests: 100 with the cookie, 100 split 80/20
	if p, c := f.appCount(primaryPods), f.appCount(canaryPods); p != 80 || c != 120 {
		t.Fatalf("primary %v, canary %v; want 80 and 100+20", p, c)
	}
}

// mirrorRule is the default rule at primary/canary with a RequestMirror of percent (nil: none
// given) to the canary.
func mirrorRule(primary, canary int, percent any) map[string]any {
	rule := defaultRule(primary, canary)
	rm := map[string]any{"backendRef": map[string]any{"name": "podinfo-canary", "port": int64(80)}}
	if percent != nil {
		rm["percent"] = percent
	}
	rule["filters"] = []any{map[string]any{"type": "RequestMirror", "requestMirror": rm}}
	return rule
}

// RequestMirror copies reach the canary's pods, which count them in the application's
// histogram (what the generic queries read); the gateway's Envoy cluster counts only what its
// clients saw.
func TestGatewayAPIMirroringThroughEnvoyGateway(t *testing.T) {
	f := gatewayFixture(t, EnvoyGatewayController, map[string]string{AnnotationErrorRate: "1"},
		httpRouteRules(gatewayParent("public"), mirrorRule(100, 0, int64(25))))
	f.run(5) // 100 requests, 25 copies
	if p, c := f.appCount(primaryPods), f.appCount(canaryPods); p != 100 || c != 25 {
		t.Fatalf("application counts: primary %v, canary %v; want 100 and 25 copies", p, c)
	}
	if got := f.appCount(canaryPods, "status=500"); got != 25 {
		t.Fatalf("canary failed %v copies, want all 25", got)
	}
	cluster := "envoy_cluster_name=httproute/test/podinfo/rule/0"
	if got, ok := f.sum(MetricEnvoyRequests, match(cluster)), f.sum(MetricEnvoyRequests, match(cluster, "envoy_response_code=200")); got != 100 || ok != 100 {
		t.Fatalf("Envoy cluster counted %v requests, %v OK; want the 100 user requests, all OK", got, ok)
	}
	if n := len(f.series(MetricEnvoyRequests, match("envoy_cluster_name!=httproute/test/podinfo/rule/0"))); n != 0 {
		t.Fatalf("%d Envoy series besides the rule's cluster", n)
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Fatalf("invariant entries: %v", got)
	}

	// Without percent every request is copied; a canary without Ready pods drops them quietly.
	f.updateRouter(HTTPRouteGVR, httpRouteRules(gatewayParent("public"), mirrorRule(100, 0, nil)))
	before := f.appCount(canaryPods)
	f.run(5)
	if c := f.appCount(canaryPods) - before; c != 100 {
		t.Fatalf("canary answered %v copies of 100 requests", c)
	}
}

func TestGatewayAPIMirrorThroughIstioGateway(t *testing.T) {
	f := gatewayFixture(t, IstioGatewayController, map[string]string{AnnotationLinkerdInject: "enabled"},
		httpRouteRules(gatewayParent("public"), mirrorRule(100, 0, int64(50))))
	f.run(4) // 80 requests, 40 copies
	if got := f.istioCount("destination", "podinfo"); got != 40 {
		t.Fatalf("canary sidecar reported %v copies, want 40", got)
	}
	if got := f.istioCount("source", "podinfo"); got != 0 {
		t.Fatalf("the gateway reported %v answers of the canary", got)
	}
	if got := f.istioCount("source", "podinfo-primary"); got != 80 {
		t.Fatalf("the gateway reported %v answers of the primary, want 80", got)
	}
	if got := f.sum(MetricLinkerdResponses, match("deployment=podinfo", "direction=inbound")); got != 40 {
		t.Fatalf("the canary's Linkerd proxy counted %v copies, want 40", got)
	}
}

func TestGatewayAPIMirrorWithoutReadyPodsIsNoViolation(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, false, nil), []runtime.Object{
			httpRouteRules(gatewayParent("public"), mirrorRule(100, 0, nil)),
		})...)
	f.addGateway("public", "")
	f.run(3)
	if p, c := f.appCount(primaryPods), f.appCount(canaryPods); p != 60 || c != 0 {
		t.Fatalf("primary %v, canary %v; want 60 and 0", p, c)
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Fatalf("mirrored copies logged as invariant entries: %v", got)
	}
}

// Linkerd has no RequestMirror: a GAMMA route's mirror filter copies nothing.
func TestLinkerdRouteIgnoresRequestMirror(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil), []runtime.Object{
			httpRouteRules(serviceParent, mirrorRule(100, 0, nil)),
		})...)
	f.run(3)
	if c := f.sum(MetricLinkerdResponses, match("deployment=podinfo")); c != 0 {
		t.Fatalf("the canary answered %v requests", c)
	}
}
