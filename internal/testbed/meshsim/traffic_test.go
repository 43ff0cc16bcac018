package meshsim

import (
	"slices"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Selectors of Flagger's built-in queries (flagger.md §4.1) for canary test/podinfo.
var (
	osmDest = func(deployment string) []string {
		return []string{"destination_namespace=test", "destination_kind=Deployment", "destination_name=" + deployment}
	}
	apisixCanaryRoute = "route=~test_podinfo-podinfo-canary_*"
	glooCluster       = func(upstream string) string { return "envoy_cluster_name=" + upstream + "_test" }
)

func TestOSMSplitFollowsTrafficSplitWeights(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 2, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{trafficSplit("podinfo", "podinfo", "podinfo-canary", 20, "podinfo-primary", 80)})...)
	count := func(deployment string) float64 { return f.sum(MetricOSMRequests, match(osmDest(deployment)...)) }

	f.run(1) // 20 requests
	if p, c := count("podinfo-primary"), count("podinfo"); p != 16 || c != 4 {
		t.Fatalf("after 1s: primary %v, canary %v; want exactly 16 and 4", p, c)
	}
	f.run(4)
	if p, c := count("podinfo-primary"), count("podinfo"); p != 80 || c != 20 {
		t.Fatalf("after 5s: primary %v, canary %v; want exactly 80 and 20", p, c)
	}
	// The two primary pods share their side evenly.
	for _, pod := range []string{"podinfo-primary-5d8f-0", "podinfo-primary-5d8f-1"} {
		if got := f.sum(MetricOSMRequests, match("destination_pod="+pod)); got != 40 {
			t.Errorf("pod %s answered %v requests, want 40", pod, got)
		}
	}
	if got := f.successRate(MetricOSMRequests, "response_code", osmDest("podinfo")...); got != 100 {
		t.Errorf("canary success rate = %v, want 100", got)
	}
	// Only the labels OSM emits, with the load generator as source.
	wantLabels := append(slices.Clone(osmLabels), "response_code")
	sort.Strings(wantLabels)
	for _, s := range f.series(MetricOSMRequests, nil) {
		if got := keys(s.labels); !slices.Equal(got, wantLabels) {
			t.Fatalf("labels %v, want %v", got, wantLabels)
		}
		if s.labels["source_namespace"] != SourceNamespace || s.labels["source_kind"] != "Deployment" ||
			s.labels["source_name"] != SourceName || s.labels["source_pod"] != SourcePod {
			t.Fatalf("source labels %v", s.labels)
		}
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Errorf("invariant entries for a healthy split: %v", got)
	}
}

func TestAPISIXCanaryRouteTakesTheLoad(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{
			apisixRoute("podinfo", 0, "podinfo", -1),
			apisixRoute("podinfo-podinfo-canary", 10000, "podinfo-primary", 80, "podinfo-canary", 20),
		})...)
	f.run(5)
	primaryIP, canaryIP := "10.0.15.1", "10.0.7.1" // see deployment(): 10.0.<len(name)>.<n>
	if p, c := f.sum(MetricAPISIXStatus, match("node="+primaryIP)), f.sum(MetricAPISIXStatus, match("node="+canaryIP)); p != 80 || c != 20 {
		t.Fatalf("primary node %v, canary node %v; want 80 and 20", p, c)
	}
	if got := f.sum(MetricAPISIXStatus, match("route=test_podinfo-podinfo-canary_method", "matched_uri=/*", "matched_host=app.example.com", "code=200")); got != 100 {
		t.Fatalf("canary route answered %v requests with 200, want 100", got)
	}
	if got := f.series(MetricAPISIXStatus, match("route=test_podinfo_method")); len(got) != 0 {
		t.Fatalf("the user's route, overridden by the canary route, has series: %v", got[0].labels)
	}
	if got := f.successRate(MetricAPISIXStatus, "code", apisixCanaryRoute); got != 100 {
		t.Errorf("success rate = %v, want 100", got)
	}
	for name, want := range map[string][]string{
		MetricAPISIXStatus:  apisixStatus,
		MetricAPISIXLatency: apisixLatency,
	} {
		want = slices.Sorted(slices.Values(want))
		for _, s := range f.series(name, nil) {
			if got := keys(s.labels); !slices.Equal(got, want) {
				t.Fatalf("%s labels %v, want %v", name, got, want)
			}
		}
	}
	if got := len(f.series(MetricAPISIXLatency, match("type=request", apisixCanaryRoute))); got != 2 {
		t.Errorf("request latency series = %d, want one per node (2)", got)
	}
}

func TestAPISIXUserRouteWithoutWeightTakesAllTraffic(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil), deployment("podinfo-primary", 1, true, nil),
		[]runtime.Object{apisixRoute("podinfo", 0, "podinfo", -1)})...)
	f.run(2)
	if got := f.sum(MetricAPISIXStatus, match("route=test_podinfo_method", "code=200")); got != 40 {
		t.Fatalf("user route answered %v, want 40", got)
	}
	if got := f.sim.Invariants(ns); len(got) != 0 {
		t.Fatalf("a lone backend without weight counts as 100, but the log has %v", got)
	}
}

func TestGlooDelegatedRouteTable(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil), glooUpstreams(),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{
			virtualService(map[string]any{"delegateAction": map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}}}),
			routeTable("podinfo", destinations(primaryUpstream, 100, canaryUpstream, -1)), // as Flagger writes 100/0
		})...)
	count := func(up string) float64 { return f.sum(MetricEnvoyRequests, match(glooCluster(up))) }

	f.run(2)
	if p, c := count(primaryUpstream), count(canaryUpstream); p != 40 || c != 0 {
		t.Fatalf("at 100/0: primary %v, canary %v; want 40 and 0", p, c)
	}
	// The canary cluster's series already exist, at zero.
	if got := len(f.series(MetricEnvoyRequests, match(glooCluster(canaryUpstream)))); got != len(declaredCodes) {
		t.Fatalf("canary cluster has %d counter series before any request, want %d", got, len(declaredCodes))
	}

	f.updateRouter(RouteTableGVR, routeTable("podinfo", destinations(primaryUpstream, 80, canaryUpstream, 20)))
	f.run(5)
	if p, c := count(primaryUpstream)-40, count(canaryUpstream); p != 80 || c != 20 {
		t.Fatalf("at 80/20: primary %v, canary %v; want 80 and 20", p, c)
	}
	canary := "envoy_cluster_name=~test-podinfo-canaryupstream-*"
	if got := f.successRate(MetricEnvoyRequests, "envoy_response_code", canary); got != 100 {
		t.Errorf("canary success rate = %v, want 100", got)
	}
	if got := f.sim.Invariants(""); len(got) != 0 {
		t.Errorf("invariant entries: %v", got)
	}
}

func TestGlooUpstreamGroup(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil), glooUpstreams(),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
		[]runtime.Object{
			virtualService(map[string]any{"routeAction": map[string]any{"upstreamGroup": map[string]any{"name": "podinfo", "namespace": ns}}}),
			obj("gloo.solo.io/v1", "UpstreamGroup", ns, "podinfo", map[string]any{"destinations": destinations(primaryUpstream, 80, canaryUpstream, 20)}),
		})...)
	f.run(5)
	if p, c := f.sum(MetricEnvoyRequests, match(glooCluster(primaryUpstream))), f.sum(MetricEnvoyRequests, match(glooCluster(canaryUpstream))); p != 80 || c != 20 {
		t.Fatalf("primary %v, canary %v; want 80 and 20", p, c)
	}
}

func TestNoReadyPodsAnswer503(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil), glooUpstreams(),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 2, false, nil), // canary pods not Ready
		[]runtime.Object{
			trafficSplit("podinfo", "podinfo", "podinfo-canary", 50, "podinfo-primary", 50),
			apisixRoute("podinfo-podinfo-canary", 10000, "podinfo-primary", 50, "podinfo-canary", 50),
			virtualService(map[string]any{"delegateAction": map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}}}),
			routeTable("podinfo", destinations(primaryUpstream, 50, canaryUpstream, 50)),
		})...)
	f.run(2) // 40 requests per mesh, 20 of them to the canary

	if got := f.sum(MetricOSMRequests, match(append(osmDest("podinfo"), "response_code=503")...)); got != 20 {
		t.Errorf("OSM: canary 503s = %v, want 20", got)
	}
	if got := f.successRate(MetricOSMRequests, "response_code", osmDest("podinfo")...); got != 0 {
		t.Errorf("OSM: canary success rate = %v, want 0", got)
	}
	if got := f.successRate(MetricOSMRequests, "response_code", osmDest("podinfo-primary")...); got != 100 {
		t.Errorf("OSM: primary success rate = %v, want 100", got)
	}
	if got := f.sum(MetricAPISIXStatus, match(apisixCanaryRoute, "code=503", "node=")); got != 20 {
		t.Errorf("APISIX: 503s with no node = %v, want 20", got)
	}
	if got := f.sum(MetricEnvoyRequests, match(glooCluster(canaryUpstream), "envoy_response_code=503")); got != 20 {
		t.Errorf("Gloo: canary cluster 503s = %v, want 20", got)
	}

	msg := "traffic sent to Service test/podinfo-canary, which has no Ready pods"
	for _, object := range []string{"TrafficSplit/podinfo", "ApisixRoute/podinfo-podinfo-canary", "RouteTable/podinfo"} {
		n := 0
		for _, e := range f.sim.Invariants(ns) {
			if e.Object == object && e.Message == msg {
				n++
			}
		}
		if n != 2 { // one a second, for 2 seconds
			t.Errorf("%s: %d entries %q, want 2; log: %v", object, n, msg, f.sim.Invariants(ns))
		}
	}
}

func TestErrorRateFromPodAnnotations(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(nil),
		deployment("podinfo-primary", 1, true, nil),
		deployment("podinfo", 2, true, map[string]string{AnnotationErrorRate: "0.5"}),
		[]runtime.Object{trafficSplit("podinfo", "podinfo", "podinfo-canary", 50, "podinfo-primary", 50)})...)
	f.run(4) // 40 requests to the canary
	if got := f.sum(MetricOSMRequests, match(append(osmDest("podinfo"), "response_code=500")...)); got != 20 {
		t.Errorf("canary 500s = %v, want exactly 20", got)
	}
	if got := f.successRate(MetricOSMRequests, "response_code", osmDest("podinfo")...); got != 50 {
		t.Errorf("canary success rate = %v, want exactly 50", got)
	}
	if got := f.successRate(MetricOSMRequests, "response_code", osmDest("podinfo-primary")...); got != 100 {
		t.Errorf("primary success rate = %v, want 100", got)
	}
}

func TestVersionsOfOneDeploymentBehaveApart(t *testing.T) {
	// A rolling update: one old pod that always fails and one new pod that never does.
	objs := objects(podinfoServices(nil), deployment("podinfo-primary", 2, true, nil),
		[]runtime.Object{trafficSplit("podinfo", "podinfo", "podinfo-primary", 100)})
	for _, o := range objs {
		if p, ok := o.(interface{ GetName() string }); ok && p.GetName() == "podinfo-primary-5d8f-0" {
			o.(metav1.Object).SetAnnotations(map[string]string{AnnotationErrorRate: "1"})
		}
	}
	f := newFixture(t, RouterGVRs, objs...)
	f.run(1)
	if got := f.successRate(MetricOSMRequests, "response_code", "destination_pod=podinfo-primary-5d8f-0"); got != 0 {
		t.Errorf("old pod success rate = %v, want 0", got)
	}
	if got := f.successRate(MetricOSMRequests, "response_code", osmDest("podinfo-primary")...); got != 50 {
		t.Errorf("deployment success rate = %v, want 50", got)
	}
}

func TestLatencyFromPodAnnotations(t *testing.T) {
	slow := map[string]string{AnnotationLatencyMs: "300"}
	f := newFixture(t, RouterGVRs, objects(podinfoServices(map[string]string{AnnotationRPS: "500"}), glooUpstreams(),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, slow),
		[]runtime.Object{
			trafficSplit("podinfo", "podinfo", "podinfo-canary", 50, "podinfo-primary", 50),
			apisixRoute("podinfo-podinfo-canary", 10000, "podinfo-primary", 0, "podinfo-canary", 100),
			virtualService(map[string]any{"delegateAction": map[string]any{"ref": map[string]any{"name": "podinfo", "namespace": ns}}}),
			routeTable("podinfo", destinations(primaryUpstream, 50, canaryUpstream, 50)),
		})...)
	// 15 000 requests to each canary: the p99 of a lognormal rests on the top 1 %, and a bucket
	// as wide as Envoy's (250,500] spreads their count's noise over 250 ms.
	f.run(60)
	f.wantP99("OSM canary", f.p99(MetricOSMDuration, osmDest("podinfo")...), 300, EnvoyBuckets, 0.2)
	f.wantP99("OSM primary (default latency)", f.p99(MetricOSMDuration, osmDest("podinfo-primary")...), DefaultLatencyMs, EnvoyBuckets, 0.2)
	f.wantP99("APISIX canary route", f.p99(MetricAPISIXLatency, "type=request", apisixCanaryRoute), 300, APISIXBuckets, 0.2)
	f.wantP99("Gloo canary", f.p99(MetricEnvoyRequestTime, "envoy_cluster_name=~test-podinfo-canaryupstream-"), 300, EnvoyBuckets, 0.2)
}

func TestRPSAnnotation(t *testing.T) {
	for _, tc := range []struct {
		rps  string
		want float64 // requests after 4 s
	}{{"0", 0}, {"5", 20}, {"2.5", 10}} {
		t.Run(tc.rps, func(t *testing.T) {
			f := newFixture(t, RouterGVRs, objects(podinfoServices(map[string]string{AnnotationRPS: tc.rps}),
				deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 1, true, nil),
				[]runtime.Object{trafficSplit("podinfo", "podinfo", "podinfo-canary", 50, "podinfo-primary", 50)})...)
			// 100 ms ticks, so that fractional requests carry over.
			f.sim.Tick(f.now)
			for range 40 {
				f.now = f.now.Add(100 * time.Millisecond)
				f.sim.Tick(f.now)
			}
			if got := f.sum(MetricOSMRequests, nil); got != tc.want {
				t.Fatalf("requests = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSeriesExistAtZeroAndGoAwayWithTheirPods(t *testing.T) {
	f := newFixture(t, RouterGVRs, objects(podinfoServices(map[string]string{AnnotationRPS: "0"}),
		deployment("podinfo-primary", 1, true, nil), deployment("podinfo", 2, true, nil),
		[]runtime.Object{trafficSplit("podinfo", "podinfo", "podinfo-canary", 0, "podinfo-primary", 100)})...)
	f.run(1)
	// 3 pods x 3 codes, each at zero, and one duration histogram per pod.
	counters := f.series(MetricOSMRequests, nil)
	if len(counters) != 9 {
		t.Fatalf("%d counter series, want 9", len(counters))
	}
	for _, s := range counters {
		if v := s.metric.GetCounter().GetValue(); v != 0 {
			t.Fatalf("series %v = %v, want 0", s.labels, v)
		}
	}
	if got := len(f.series(MetricOSMDuration, match(osmDest("podinfo")...))); got != 2 {
		t.Fatalf("canary duration series = %d, want 2", got)
	}

	if err := f.kube.CoreV1().Pods(ns).Delete(f.ctx, "podinfo-5d8f-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("pod deletion seen", func() bool {
		_, err := f.sim.view().pods.Pods(ns).Get("podinfo-5d8f-1")
		return err != nil
	})
	f.run(1)
	if got := f.series(MetricOSMRequests, match("destination_pod=podinfo-5d8f-1")); len(got) != 0 {
		t.Fatalf("deleted pod still has %d series", len(got))
	}
	if got := len(f.series(MetricOSMRequests, nil)); got != 6 {
		t.Fatalf("%d counter series after the deletion, want 6", got)
	}

	if err := f.dyn.Resource(TrafficSplitGVR).Namespace(ns).Delete(f.ctx, "podinfo", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("TrafficSplit deletion seen", func() bool { return f.sim.view().get(TrafficSplitGVR, ns, "podinfo") == nil })
	f.run(1)
	if got := len(f.series(MetricOSMRequests, nil)) + len(f.series(MetricOSMDuration, nil)); got != 0 {
		t.Fatalf("%d series left after the TrafficSplit went away", got)
	}
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
