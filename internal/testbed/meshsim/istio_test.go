package meshsim

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// istioVS is a VirtualService with one http route; dests are host, weight pairs (weight -1
// leaves it out, as Istio's types do for 0).
func istioVS(name string, hosts []any, dests ...any) *unstructured.Unstructured {
	return obj("networking.istio.io/v1beta1", "VirtualService", ns, name, map[string]any{
		"hosts": hosts, "gateways": []any{"mesh"},
		"http": []any{map[string]any{"route": istioDests(dests...)}},
	})
}

func istioDests(pairs ...any) []any {
	var list []any
	for i := 0; i < len(pairs); i += 2 {
		d := map[string]any{"destination": map[string]any{"host": pairs[i], "port": map[string]any{"number": int64(9898)}}}
		if w := pairs[i+1].(int); w >= 0 {
			d["weight"] = int64(w)
		}
		list = append(list, d)
	}
	return list
}

func destinationRule(name, host string, spec map[string]any) *unstructured.Unstructured {
	if spec == nil {
		spec = map[string]any{}
	}
	spec["host"] = host
	return obj("networking.istio.io/v1beta1", "DestinationRule", ns, name, spec)
}

// Flagger's objects: the VirtualService <apex> and a DestinationRule per side.
func flaggerIstio(primary, canary int) []runtime.Object {
	return []runtime.Object{
		istioVS("podinfo", []any{"podinfo"}, "podinfo-primary", primary, "podinfo-canary", canary),
		destinationRule("podinfo-primary", "podinfo-primary", nil),
		destinationRule("podinfo-canary", "podinfo-canary", nil),
	}
}

func TestIstioResolveRoutes(t *testing.T) {
	subsetRoute := func(subset string) *unstructured.Unstructured {
		vs := istioVS("podinfo", []any{"podinfo"}, "podinfo", 100)
		dest := vs.Object["spec"].(map[string]any)["http"].([]any)[0].(map[string]any)["route"].([]any)[0].(map[string]any)
		dest["destination"].(map[string]any)["subset"] = subset
		return vs
	}
	cases := []struct {
		name string
		objs []runtime.Object
		want string
	}{{
		name: "Flagger's VirtualService; a missing weight is 0",
		objs: []runtime.Object{istioVS("podinfo", []any{"podinfo"}, "podinfo-primary", 100, "podinfo-canary", -1)},
		want: "istio test/podinfo -> test/VirtualService/podinfo [podinfo-primary=100 podinfo-canary=0]",
	}, {
		name: "hosts and destinations as FQDNs",
		objs: []runtime.Object{istioVS("podinfo", []any{"podinfo.test.svc.cluster.local"},
			"podinfo-primary.test.svc.cluster.local", 70, "podinfo-canary.test.svc.cluster.local", 30)},
		want: "istio test/podinfo -> test/VirtualService/podinfo [podinfo-primary=70 podinfo-canary=30]",
	}, {
		name: "public hosts only: the apex comes from the destinations",
		objs: []runtime.Object{istioVS("podinfo", []any{"app.example.com"}, "podinfo-primary", 90, "podinfo-canary", 10)},
		want: "istio test/podinfo -> test/VirtualService/podinfo [podinfo-primary=90 podinfo-canary=10]",
	}, {
		name: "a lone destination takes everything, whatever its weight",
		objs: []runtime.Object{istioVS("podinfo", []any{"podinfo"}, "podinfo-primary", 0)},
		want: "istio test/podinfo -> test/VirtualService/podinfo [podinfo-primary=100]",
	}, {
		name: "an external destination host leads nowhere",
		objs: []runtime.Object{istioVS("podinfo", []any{"podinfo"}, "podinfo-primary", 50, "httpbin.org", 50)},
		want: `istio test/podinfo -> test/VirtualService/podinfo [podinfo-primary=50 (destination host "httpbin.org" is not a Service of the mesh)=50]`,
	}, {
		name: "a header-matched (A/B) route does not take plain requests; the next route does",
		objs: []runtime.Object{obj("networking.istio.io/v1beta1", "VirtualService", ns, "podinfo", map[string]any{
			"hosts": []any{"podinfo"},
			"http": []any{
				map[string]any{
					"match": []any{map[string]any{"headers": map[string]any{"x-canary": map[string]any{"exact": "insider"}}}},
					"route": istioDests("podinfo-canary", 100),
				},
				map[string]any{"match": []any{map[string]any{"uri": map[string]any{"prefix": "/"}}}, "route": istioDests("podinfo-primary", 100)},
			},
		})},
		want: "istio test/podinfo -> test/VirtualService/podinfo [podinfo-primary=100]",
	}, {
		name: "a subset needs its DestinationRule",
		objs: []runtime.Object{subsetRoute("v2")},
		want: `istio test/podinfo -> test/VirtualService/podinfo [(no DestinationRule for host podinfo.test.svc.cluster.local defines subset "v2")=100]`,
	}, {
		name: "a subset the DestinationRule lacks",
		objs: []runtime.Object{subsetRoute("v2"), destinationRule("podinfo", "podinfo", map[string]any{
			"subsets": []any{map[string]any{"name": "v1", "labels": map[string]any{"version": "v1"}}}})},
		want: `istio test/podinfo -> test/VirtualService/podinfo [(DestinationRule test/podinfo has no subset "v2")=100]`,
	}, {
		name: "next to the other meshes, as its own entry point",
		objs: append(flaggerIstio(80, 20), trafficSplit("podinfo", "podinfo", "podinfo-canary", 10, "podinfo-primary", 90)),
		want: "istio test/podinfo -> test/VirtualService/podinfo [podinfo-primary=80 podinfo-canary=20]\n" +
			"osm test/podinfo -> test/TrafficSplit/podinfo [podinfo-canary=10 podinfo-primary=90]",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, RouterGVRs, tc.objs...)
			if got := describe(resolveRoutes(f.sim.view())); got != tc.want {
				t.Fatalf("routes:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestIstioService(t *testing.T) {
	for host, want := range map[string]string{
		"podinfo":                          "test/podinfo",
		"podinfo.other.svc.cluster.local":  "other/podinfo",
		"podinfo.test":                     "",
		"app.example.com":                  "",
		"*":                                "",
		"*.test.svc.cluster.local":         "",
		"a.b.c.svc.cluster.local":          "",
		".test.svc.cluster.local":          "",
		"podinfo.test.svc.cluster.local.x": "",
	} {
		svc, ok := istioService(host, ns)
		got := ""
		if ok {
			got = svc.String()
		}
		if got != want {
			t.Errorf("istioService(%q) = %q, want %q", host, got, want)
		}
	}
}

// Selectors of Flagger's built-in Istio queries for canary test/podinfo.
func istioDestination(workload string) []string {
	return []string{"reporter=destination", "destination_workload_namespace=test", "destination_workload=" + workload}
}

func TestIstioSeriesFollowTheWeights(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 2, true, nil), deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "0.25", AnnotationLatencyMs: "300"}),
		flaggerIstio(80, 20))...)
	count := func(workload string) float64 { return f.sum(MetricIstioRequests, match(istioDestination(workload)...)) }

	f.run(5) // 100 requests
	if p, c := count("podinfo-primary"), count("podinfo"); p != 80 || c != 20 {
		t.Fatalf("primary %v, canary %v; want exactly 80 and 20", p, c)
	}
	// The client's sidecar reports the same requests again.
	if got := f.sum(MetricIstioRequests, match("reporter=source", "destination_workload=podinfo")); got != 20 {
		t.Fatalf("source reports of the canary = %v, want 20", got)
	}
	if got := f.successRate(MetricIstioRequests, "response_code", istioDestination("podinfo")...); got != 75 {
		t.Errorf("canary success rate = %v, want 75", got)
	}
	if got := f.successRate(MetricIstioRequests, "response_code", istioDestination("podinfo-primary")...); got != 100 {
		t.Errorf("primary success rate = %v, want 100", got)
	}
	f.run(3000) // 12 000 more requests to the canary, for its p99 (see TestLatencyFromPodAnnotations)
	f.wantP99("canary", f.p99(MetricIstioDuration, istioDestination("podinfo")...), 300, EnvoyBuckets, 0.2)
	wantLabels := slices.Sorted(slices.Values(istioLabels))
	for _, name := range []string{MetricIstioRequests, MetricIstioDuration} {
		for _, s := range f.series(name, nil) {
			if got := keys(s.labels); !slices.Equal(got, wantLabels) {
				t.Fatalf("%s labels %v, want %v", name, got, wantLabels)
			}
		}
	}
	s := f.series(MetricIstioRequests, match(append(istioDestination("podinfo"), "response_code=200")...))
	if len(s) != 1 {
		t.Fatalf("%d canary series with code 200, want 1", len(s))
	}
	for k, want := range map[string]string{
		"source_workload": SourceName, "source_workload_namespace": SourceNamespace,
		"destination_service": "podinfo-canary.test.svc.cluster.local", "destination_service_name": "podinfo-canary",
		"destination_service_namespace": "test", "request_protocol": "http", "response_flags": "-",
		"connection_security_policy": "mutual_tls",
	} {
		if s[0].labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, s[0].labels[k], want)
		}
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Errorf("invariant entries for a healthy split: %v", got)
	}

	// The router moves the split on: the series follow, and a split off 100 is logged.
	f.updateRouter(IstioVirtualServiceGVR, istioVS("podinfo", []any{"podinfo"}, "podinfo-primary", 50, "podinfo-canary", 50))
	before := count("podinfo")
	f.run(5)
	if got := count("podinfo") - before; got != 50 {
		t.Fatalf("canary got %v of 100 requests at 50/50, want 50", got)
	}
	f.updateRouter(IstioVirtualServiceGVR, istioVS("podinfo", []any{"podinfo"}, "podinfo-primary", 50, "podinfo-canary", 40))
	f.run(1)
	inv := f.sim.Invariants(ns)
	if len(inv) == 0 || inv[0].Object != "VirtualService/podinfo" || inv[0].Message != "weights sum to 90, not 100" {
		t.Fatalf("invariant log %v, want VirtualService/podinfo: weights sum to 90, not 100", inv)
	}
}

// A DestinationRule that turns mutual TLS off shows in connection_security_policy.
func TestIstioDestinationRuleTLS(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil), deployment("podinfo-primary", 1, true, nil), []runtime.Object{
		istioVS("podinfo", []any{"podinfo"}, "podinfo-primary", 100, "podinfo-canary", 0),
		destinationRule("podinfo-primary", "podinfo-primary", map[string]any{"trafficPolicy": map[string]any{"tls": map[string]any{"mode": "DISABLE"}}}),
	})...)
	f.run(1)
	if got := f.sum(MetricIstioRequests, match(append(istioDestination("podinfo-primary"), "connection_security_policy=none")...)); got != 20 {
		t.Fatalf("plain-text requests = %v, want 20", got)
	}
}

// Subsets narrow a Service's pods to the subset's labels.
func TestIstioSubsetSelectsPods(t *testing.T) {
	// Both versions behind one Service, told apart by their app label.
	version := func(name string) []runtime.Object {
		objs := deployment(name, 1, true, nil)
		for _, o := range objs {
			if pod, ok := o.(*corev1.Pod); ok {
				pod.Labels["service"] = "podinfo"
			}
		}
		return objs
	}
	v1, v2 := version("podinfo-v1"), version("podinfo-v2")
	vs := obj("networking.istio.io/v1beta1", "VirtualService", ns, "podinfo", map[string]any{
		"hosts": []any{"podinfo"},
		"http": []any{map[string]any{"route": []any{
			map[string]any{"destination": map[string]any{"host": "podinfo", "subset": "v1"}, "weight": int64(25)},
			map[string]any{"destination": map[string]any{"host": "podinfo", "subset": "v2"}, "weight": int64(75)},
		}}},
	})
	dr := destinationRule("podinfo", "podinfo", map[string]any{"subsets": []any{
		map[string]any{"name": "v1", "labels": map[string]any{"app": "podinfo-v1"}},
		map[string]any{"name": "v2", "labels": map[string]any{"app": "podinfo-v2"}},
	}})
	f := newFixture(t, RouterGVRs, objects(v1, v2, []runtime.Object{
		service("podinfo", map[string]string{"service": "podinfo"}, nil), vs, dr,
	})...)
	f.run(4)
	if a, b := f.sum(MetricIstioRequests, match(istioDestination("podinfo-v1")...)), f.sum(MetricIstioRequests, match(istioDestination("podinfo-v2")...)); a != 20 || b != 60 {
		t.Fatalf("v1 %v, v2 %v; want 20 and 60", a, b)
	}
}

// A side without Ready pods: the client's sidecar answers 503 (UH) itself; the destination
// reporter, which the built-in queries read, sees nothing; the invariant log says why.
func TestIstioNoReadyPods(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, false, nil), flaggerIstio(50, 50))...)
	f.run(2)
	if got := f.sum(MetricIstioRequests, match("reporter=source", "destination_service_name=podinfo-canary", "response_code=503", "response_flags=UH", "destination_workload=unknown")); got != 20 {
		t.Errorf("mesh 503s = %v, want 20", got)
	}
	if got := f.sum(MetricIstioRequests, match(istioDestination("podinfo")...)); got != 0 {
		t.Errorf("destination reports of the canary = %v, want 0", got)
	}
	n := 0
	for _, e := range f.sim.Invariants(ns) {
		if e.Object == "VirtualService/podinfo" && strings.Contains(e.Message, "test/podinfo-canary, which has no Ready pods") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d invariant entries, want 2: %v", n, f.sim.Invariants(ns))
	}
}

// The series go away with the route.
func TestIstioSeriesGoAwayWithTheRoute(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil), flaggerIstio(100, 0))...)
	f.run(1)
	if got := len(f.series(MetricIstioRequests, match(istioDestination("podinfo")...))); got == 0 {
		t.Fatal("no canary series declared at weight 0")
	}
	if err := f.dyn.Resource(IstioVirtualServiceGVR).Namespace(ns).Delete(f.ctx, "podinfo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("cache drops the VirtualService", func() bool { return f.sim.view().get(IstioVirtualServiceGVR, ns, "podinfo") == nil })
	f.run(1)
	if got := f.series(MetricIstioRequests, nil); len(got) != 0 {
		t.Fatalf("%d series left, first %v", len(got), got[0].labels)
	}
}

// flaggerIstioRoutes is the VirtualService podinfo with the given http routes, and Flagger's
// DestinationRules.
func flaggerIstioRoutes(routes ...any) []runtime.Object {
	return []runtime.Object{
		obj("networking.istio.io/v1beta1", "VirtualService", ns, "podinfo", map[string]any{
			"hosts": []any{"podinfo"}, "gateways": []any{"mesh"}, "http": routes,
		}),
		destinationRule("podinfo-primary", "podinfo-primary", nil),
		destinationRule("podinfo-canary", "podinfo-canary", nil),
	}
}

// istioHeaderMatch is a match list of one entry with one header condition.
func istioHeaderMatch(name, op, value string) []any {
	return []any{map[string]any{"headers": map[string]any{name: map[string]any{op: value}}}}
}

// istioCount counts the destination reports of a workload, from the load generator.
func (f *fixture) istioCount(reporter, workload string, sel ...string) float64 {
	return f.sum(MetricIstioRequests, match(append([]string{"reporter=" + reporter, "destination_workload=" + workload}, sel...)...))
}

func TestIstioMatch(t *testing.T) {
	tagged := request{headers: map[string]string{"x-canary": "insider", "cookie": "a=1; canary=abc; b=2"}, query: map[string]string{"beta": "on.1"}}
	plain := request{}
	m := func(entries ...map[string]any) map[string]any {
		list := make([]any, len(entries))
		for i, e := range entries {
			list[i] = e
		}
		return map[string]any{"match": list}
	}
	sm := func(op, v string) map[string]any { return map[string]any{op: v} }
	for _, tc := range []struct {
		name          string
		route         map[string]any
		tagged, plain bool
	}{
		{"no match takes everything", map[string]any{}, true, true},
		{"header exact, any case of the name", m(map[string]any{"headers": map[string]any{"X-Canary": sm("exact", "insider")}}), true, false},
		{"header exact, other value", m(map[string]any{"headers": map[string]any{"x-canary": sm("exact", "outsider")}}), false, false},
		{"header prefix", m(map[string]any{"headers": map[string]any{"x-canary": sm("prefix", "ins")}}), true, false},
		{"header regex matches the whole value", m(map[string]any{"headers": map[string]any{"x-canary": sm("regex", "ins")}}), false, false},
		{"session cookie regex", m(map[string]any{"headers": map[string]any{"cookie": sm("regex", ".*canary=abc.*")}}), true, false},
		{"header presence", m(map[string]any{"headers": map[string]any{"x-canary": map[string]any{}}}), true, false},
		{"query regex", m(map[string]any{"queryParams": map[string]any{"beta": sm("regex", `on\..*`)}}), true, false},
		{"query names keep their case", m(map[string]any{"queryParams": map[string]any{"Beta": sm("exact", "on.1")}}), false, false},
		{"header and query together", m(map[string]any{"headers": map[string]any{"x-canary": sm("exact", "insider")}, "queryParams": map[string]any{"beta": sm("exact", "off")}}), false, false},
		{"any entry", m(map[string]any{"headers": map[string]any{"x-other": sm("exact", "1")}}, map[string]any{"uri": sm("prefix", "/")}), true, true},
		{"uri prefix / and method GET", m(map[string]any{"uri": sm("prefix", "/"), "method": sm("exact", "GET")}), true, true},
		{"uri exact /", m(map[string]any{"uri": sm("exact", "/")}), true, true},
		{"another uri", m(map[string]any{"uri": sm("prefix", "/api")}), false, false},
		{"another method", m(map[string]any{"method": sm("exact", "POST")}), false, false},
		{"withoutHeaders", m(map[string]any{"withoutHeaders": map[string]any{"x-canary": sm("exact", "insider")}}), false, true},
		{"source labels: not the load generator", m(map[string]any{"sourceLabels": map[string]any{"app": "x"}}), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accepts := istioMatch(tc.route)
			if got := accepts.takes(tagged); got != tc.tagged {
				t.Errorf("tagged request: %v, want %v", got, tc.tagged)
			}
			if got := accepts.takes(plain); got != tc.plain {
				t.Errorf("plain request: %v, want %v", got, tc.plain)
			}
		})
	}
}

// Flagger's A/B VirtualService: the tagged requests take the first route (all canary), the
// plain ones the second (all primary).
func TestIstioABRouteTakesTaggedRequests(t *testing.T) {
	vs := flaggerIstioRoutes(
		map[string]any{"match": istioHeaderMatch("x-canary", "exact", "insider"), "route": istioDests("podinfo-primary", 0, "podinfo-canary", 100)},
		map[string]any{"route": istioDests("podinfo-primary", 100, "podinfo-canary", 0)},
	)
	f := newFixture(t, RouterGVRs, objects(podinfoServices(abApex),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil), vs)...)
	want := "istio test/podinfo -> test/VirtualService/podinfo [podinfo-primary=100 podinfo-canary=0]\n" +
		"istio+ab test/podinfo -> test/VirtualService/podinfo [podinfo-primary=0 podinfo-canary=100]"
	if got := describe(resolveRoutes(f.sim.view())); got != want {
		t.Fatalf("routes:\n%s\nwant:\n%s", got, want)
	}
	f.run(10) // 200 requests, 60 of them tagged
	if p, c := f.istioCount("destination", "podinfo-primary"), f.istioCount("destination", "podinfo"); p != 140 || c != 60 {
		t.Fatalf("primary %v, canary %v; want 140 and the 60 tagged requests", p, c)
	}
	if got := f.sim.Invariants(ns); len(got) != 0 {
		t.Fatalf("invariant entries: %v", got)
	}

	// Without ab annotations no request carries the header: the A/B route takes nothing.
	f2 := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil), vs)...)
	f2.run(5)
	if c := f2.istioCount("destination", "podinfo"); c != 0 {
		t.Fatalf("the canary answered %v plain requests", c)
	}
}

// Session affinity: the cookie route comes first; plain requests carry no cookie and take the
// weighted route, whose Set-Cookie header does not change the routing; requests with the
// cookie stay on the canary.
func TestIstioSessionAffinity(t *testing.T) {
	canary := istioDests("podinfo-primary", 90, "podinfo-canary", 10)
	canary[1].(map[string]any)["headers"] = map[string]any{"response": map[string]any{"add": map[string]any{
		"Set-Cookie": "flagger-cookie=abc; Max-Age=86400",
	}}}
	f := newFixture(t, RouterGVRs, objects(
		podinfoServices(map[string]string{AnnotationABHeader: "Cookie=session=1; flagger-cookie=abc", AnnotationABShare: "0.25"}),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		flaggerIstioRoutes(
			map[string]any{"match": istioHeaderMatch("cookie", "regex", ".*flagger-cookie=abc.*"), "route": istioDests("podinfo-primary", 0, "podinfo-canary", 100)},
			map[string]any{"route": canary},
		))...)
	f.run(10) // 200 requests: 50 with the cookie, 150 split 90/10
	if p, c := f.istioCount("destination", "podinfo-primary"), f.istioCount("destination", "podinfo"); p != 135 || c != 65 {
		t.Fatalf("primary %v, canary %v; want 135 and 50+15", p, c)
	}
	if got := f.sim.Invariants(ns); len(got) != 0 {
		t.Fatalf("invariant entries: %v", got)
	}
}

// Mirroring: the weighted route copies mirrorPercentage of its requests to the canary. The
// copies count in the canary's destination reports (with the load generator as source), never
// in the source reports, which are what clients saw; a copy no Ready pod takes leaves no trace.
func TestIstioMirroring(t *testing.T) {
	mirrored := func(percent any) []runtime.Object {
		route := map[string]any{
			"route":  istioDests("podinfo-primary", 100, "podinfo-canary", 0),
			"mirror": map[string]any{"host": "podinfo-canary", "port": map[string]any{"number": int64(9898)}},
		}
		if percent != nil {
			route["mirrorPercentage"] = map[string]any{"value": percent}
		}
		return flaggerIstioRoutes(route)
	}
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 2, true, nil), deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "0.5", AnnotationLatencyMs: "300"}),
		mirrored(float64(40)))...)
	f.run(5) // 100 requests, 40 copies
	if p := f.istioCount("destination", "podinfo-primary"); p != 100 {
		t.Fatalf("primary answered %v, want every request", p)
	}
	if c := f.istioCount("destination", "podinfo", "source_workload="+SourceName, "destination_service_name=podinfo-canary"); c != 40 {
		t.Fatalf("canary answered %v copies, want 40", c)
	}
	if c := f.istioCount("source", "podinfo"); c != 0 {
		t.Fatalf("clients saw %v answers of the canary", c)
	}
	if got := f.successRate(MetricIstioRequests, "response_code", "reporter=source"); got != 100 {
		t.Fatalf("clients' success rate %v, want 100: the canary's 500s answer copies", got)
	}
	// Flagger's built-in queries read the canary's destination reports: the copies.
	if got := f.successRate(MetricIstioRequests, "response_code", istioDestination("podinfo")...); got != 50 {
		t.Errorf("canary success rate %v, want 50", got)
	}
	f.run(1500) // 12 000 more copies, for the canary's p99 (see TestLatencyFromPodAnnotations)
	f.wantP99("canary", f.p99(MetricIstioDuration, istioDestination("podinfo")...), 300, EnvoyBuckets, 0.2)
	if got := f.sim.Invariants(ns); len(got) != 0 {
		t.Fatalf("invariant entries: %v", got)
	}

	// Without mirrorPercentage every request is copied.
	f.updateRouter(IstioVirtualServiceGVR, mirrored(nil)[0].(*unstructured.Unstructured))
	before := f.istioCount("destination", "podinfo")
	f.run(5)
	if c := f.istioCount("destination", "podinfo") - before; c != 100 {
		t.Fatalf("canary answered %v copies of 100 requests at 100%%", c)
	}
}

func TestIstioMirrorWithoutReadyPodsIsNoViolation(t *testing.T) {
	vs := flaggerIstioRoutes(map[string]any{
		"route":            istioDests("podinfo-primary", 100, "podinfo-canary", 0),
		"mirror":           map[string]any{"host": "podinfo-canary"},
		"mirrorPercentage": map[string]any{"value": int64(100)},
	})
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, false, nil), vs)...)
	f.run(3)
	if got := f.sum(MetricIstioRequests, match("destination_service_name=podinfo-canary")); got != 0 {
		t.Fatalf("%v requests counted for a canary without Ready pods", got)
	}
	if p := f.istioCount("destination", "podinfo-primary"); p != 60 {
		t.Fatalf("primary answered %v, want 60", p)
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Fatalf("mirrored copies logged as invariant entries: %v", got)
	}
}

// Delegation: the delegate (no hosts) routes nothing by itself; a root VirtualService in
// another namespace that delegates to it carries the apex's load through the delegate's routes,
// whose object holds the weights. A root whose delegate is missing leaves its requests nowhere,
// which is an invariant entry.
func TestIstioDelegation(t *testing.T) {
	delegate := obj("networking.istio.io/v1beta1", "VirtualService", ns, "podinfo", map[string]any{
		"http": []any{map[string]any{"route": istioDests("podinfo-primary", 60, "podinfo-canary", 40)}},
	})
	root := func(name string) *unstructured.Unstructured {
		return obj("networking.istio.io/v1beta1", "VirtualService", "platform", "root", map[string]any{
			"hosts": []any{"podinfo.test.svc.cluster.local"}, "gateways": []any{"mesh"},
			"http": []any{map[string]any{
				"match":    []any{map[string]any{"uri": map[string]any{"prefix": "/"}}},
				"delegate": map[string]any{"name": name, "namespace": ns},
			}},
		})
	}
	base := objects(podinfoServices(nil), deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{delegate, destinationRule("podinfo-primary", "podinfo-primary", nil), destinationRule("podinfo-canary", "podinfo-canary", nil)})

	alone := newFixture(t, RouterGVRs, base...)
	if got := describe(resolveRoutes(alone.sim.view())); got != "" {
		t.Fatalf("a delegate without a root carries load:\n%s", got)
	}

	f := newFixture(t, RouterGVRs, append(base, root("podinfo"))...)
	if got, want := describe(resolveRoutes(f.sim.view())), "istio test/podinfo -> test/VirtualService/podinfo [podinfo-primary=60 podinfo-canary=40]"; got != want {
		t.Fatalf("routes:\n%s\nwant:\n%s", got, want)
	}
	f.run(10)
	if p, c := f.istioCount("destination", "podinfo-primary"), f.istioCount("destination", "podinfo"); p != 120 || c != 80 {
		t.Fatalf("primary %v, canary %v; want 120 and 80", p, c)
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Fatalf("invariant entries: %v", got)
	}

	missing := newFixture(t, RouterGVRs, append(base, root("elsewhere"))...)
	missing.run(2)
	got := missing.sim.Invariants("platform")
	if len(got) == 0 || !strings.Contains(got[0].Message, "VirtualService platform/root delegates to VirtualService test/elsewhere, which does not exist") {
		t.Fatalf("invariant entries %v, want the missing delegate", got)
	}
}
