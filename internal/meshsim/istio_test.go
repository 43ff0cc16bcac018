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
	if got := f.p99(MetricIstioDuration, istioDestination("podinfo")...); got < 240 || got > 360 {
		t.Errorf("canary p99 = %v ms, want about 300", got)
	}
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
