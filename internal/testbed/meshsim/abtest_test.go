package meshsim

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// 30% of the apex's requests carry x-canary: insider and ?beta=on.1.
var abApex = map[string]string{
	AnnotationABHeader: "X-Canary=insider",
	AnnotationABQuery:  "beta=on.1",
	AnnotationABShare:  "0.3",
}

// apisixABRoute is the generated canary route at 100/0 with an A/B rule (as the router writes
// it) whose exprs are header x-canary == value.
func apisixABRoute(value string) *unstructured.Unstructured {
	route := apisixRoute("podinfo-podinfo-canary", 10000, "podinfo-primary", 100, "podinfo-canary", 0)
	rules, _, _ := unstructured.NestedSlice(route.Object, "spec", "http")
	ab := runtime.DeepCopyJSONValue(rules[0]).(map[string]any)
	ab["name"], ab["priority"] = "method-ab-0", int64(10001)
	ab["backends"] = []any{map[string]any{"serviceName": "podinfo-canary", "servicePort": int64(80), "weight": int64(100)}}
	_ = unstructured.SetNestedSlice(ab, []any{
		map[string]any{"subject": map[string]any{"scope": "Header", "name": "x-canary"}, "op": "Equal", "value": value},
		map[string]any{"subject": map[string]any{"scope": "Query", "name": "beta"}, "op": "RegexMatch", "value": `^on\.`},
	}, "match", "exprs")
	_ = unstructured.SetNestedSlice(route.Object, append(rules, ab), "spec", "http")
	return route
}

func TestAPISIXABRuleTakesTaggedRequests(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(abApex),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{apisixRoute("podinfo", 0, "podinfo", -1), apisixABRoute("insider")})...)
	f.run(10) // 200 requests, 60 of them tagged
	route := func(rule string) float64 {
		return f.sum(MetricAPISIXStatus, match("route=test_podinfo-podinfo-canary_"+rule, "code=200"))
	}
	if ab, weighted := route("method-ab-0"), route("method"); ab != 60 || weighted != 140 {
		t.Fatalf("A/B rule answered %v, weighted rule %v; want 60 and 140", ab, weighted)
	}
	if c := f.sum(MetricAPISIXStatus, match("node=10.0.7.1")); c != 60 {
		t.Fatalf("canary node answered %v, want the 60 tagged requests", c)
	}
	if got := f.sim.Invariants(ns); len(got) != 0 {
		t.Fatalf("invariant entries: %v", got)
	}

	// Tagged requests the A/B rule does not match fall to the weighted rule; the A/B rule,
	// which no flow takes any more, exports nothing.
	f.updateRouter(ApisixRouteGVR, apisixABRoute("outsider"))
	f.run(5)
	if ab, weighted := route("method-ab-0"), route("method"); ab != 0 || weighted != 240 {
		t.Fatalf("after the A/B rule stopped matching: A/B rule %v, weighted rule %v; want 0 and 240", ab, weighted)
	}
}

func glooABTable() *unstructured.Unstructured {
	rt := routeTable("podinfo", destinations(primaryUpstream, 100, canaryUpstream, -1))
	routes, _, _ := unstructured.NestedSlice(rt.Object, "spec", "routes")
	ab := map[string]any{
		"inheritablePathMatchers": true,
		"matchers": []any{map[string]any{
			"headers":         []any{map[string]any{"name": "x-canary", "value": "insider"}},
			"queryParameters": []any{map[string]any{"name": "beta", "value": `on\..*`, "regex": true}},
		}},
		"routeAction": map[string]any{"single": map[string]any{"upstream": map[string]any{"name": canaryUpstream, "namespace": ns}}},
	}
	_ = unstructured.SetNestedSlice(rt.Object, append([]any{ab}, routes...), "spec", "routes")
	return rt
}

func TestGlooABRouteTakesTaggedRequests(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(abApex), glooUpstreams(),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{
			virtualService(map[string]any{
				"matchers":       []any{map[string]any{"prefix": "/"}},
				"delegateAction": map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}},
			}),
			glooABTable(),
		})...)
	f.run(10)
	count := func(up string) float64 { return f.sum(MetricEnvoyRequests, match(glooCluster(up))) }
	if p, c := count(primaryUpstream), count(canaryUpstream); p != 140 || c != 60 {
		t.Fatalf("primary %v, canary %v; want 140 and the 60 tagged requests", p, c)
	}
	if got := f.sim.Invariants(ns); len(got) != 0 {
		t.Fatalf("invariant entries: %v", got)
	}
}

// Matched requests sent to a canary without Ready pods break the invariant, whatever the split.
func TestABTrafficToAnUnreadyCanaryIsLogged(t *testing.T) {
	for name, router := range map[string][]runtime.Object{
		"apisix": {apisixRoute("podinfo", 0, "podinfo", -1), apisixABRoute("insider")},
		"gloo": {
			virtualService(map[string]any{"delegateAction": map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}}}),
			glooABTable(),
		},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, RouterGVRs, objects(podinfoServices(abApex), glooUpstreams(),
				deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, false, nil), router)...)
			f.run(2)
			got := f.sim.Invariants(ns)
			if len(got) == 0 || !strings.Contains(got[0].Message, "Service test/podinfo-canary, which has no Ready pods") {
				t.Fatalf("invariant entries %v, want traffic to the unready canary", got)
			}
			for _, e := range got {
				if strings.Contains(e.Message, "weights sum") {
					t.Fatalf("the A/B route sends 100 to the canary by design, but the log has %v", e)
				}
			}
		})
	}
}

func TestPlainApexHasNoTaggedFlow(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil), deployment("podinfo-primary", 1, true, nil),
		deployment("podinfo", 1, true, nil), []runtime.Object{apisixRoute("podinfo", 0, "podinfo", -1), apisixABRoute("insider")})...)
	f.run(2)
	if got := f.sum(MetricAPISIXStatus, match("route=test_podinfo-podinfo-canary_method-ab-0")); got != 0 {
		t.Fatalf("the A/B rule took %v plain requests", got)
	}
	if got := describe(resolveRoutes(f.sim.view())); strings.Contains(got, "+ab") {
		t.Fatalf("a tagged flow without the annotations:\n%s", got)
	}
}
