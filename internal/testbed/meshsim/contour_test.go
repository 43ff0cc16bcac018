package meshsim

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// rootProxy is the user's root HTTPProxy including the generated HTTPProxy podinfo.
func rootProxy() *unstructured.Unstructured {
	return obj("projectcontour.io/v1", "HTTPProxy", ns, "root", map[string]any{
		"virtualhost": map[string]any{"fqdn": "app.example.com"},
		"includes":    []any{map[string]any{"name": "podinfo", "namespace": ns}},
	})
}

func contourService(name string, w int64) map[string]any {
	return map[string]any{"name": name, "port": int64(9898), "weight": w}
}

// generatedProxy is the release's HTTPProxy: an A/B route on x-canary when ab, then the split.
func generatedProxy(primary, canary int64, ab bool) *unstructured.Unstructured {
	var routes []any
	if ab {
		routes = append(routes, map[string]any{
			"conditions": []any{map[string]any{"prefix": "/"}, map[string]any{"header": map[string]any{"name": "X-Canary", "exact": "insider"}}},
			"services":   []any{contourService("podinfo-primary", 0), contourService("podinfo-canary", 100)},
		})
	}
	routes = append(routes, map[string]any{
		"conditions": []any{map[string]any{"prefix": "/"}},
		"services":   []any{contourService("podinfo-primary", primary), contourService("podinfo-canary", canary)},
	})
	return obj("projectcontour.io/v1", "HTTPProxy", ns, "podinfo", map[string]any{"routes": routes})
}

func TestContourRoutes(t *testing.T) {
	tagged := map[string]string{AnnotationABHeader: "x-canary=insider"}
	cases := []struct {
		name string
		objs []runtime.Object
		want string
	}{{
		name: "the included HTTPProxy's split",
		objs: []runtime.Object{rootProxy(), generatedProxy(90, 10, false)},
		want: "contour test/podinfo -> test/HTTPProxy/podinfo [podinfo-primary=90 podinfo-canary=10]",
	}, {
		name: "an HTTPProxy no root includes carries no load",
		objs: []runtime.Object{generatedProxy(90, 10, false)},
		want: "",
	}, {
		name: "the tagged requests take the A/B route, the others the split",
		objs: append(podinfoServices(tagged), rootProxy(), generatedProxy(100, 0, true)),
		want: "contour test/podinfo -> test/HTTPProxy/podinfo [podinfo-primary=100 podinfo-canary=0]\n" +
			"contour+ab test/podinfo -> test/HTTPProxy/podinfo [podinfo-primary=0 podinfo-canary=100]",
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

// Envoy's cluster stats carry Contour's <namespace>_<service>_<port>, which the built-in
// queries select.
func TestContourMetrics(t *testing.T) {
	// 100 000 requests to the canary, for its p99 at a bucket bound (see TestLatencyFromPodAnnotations).
	f := newFixture(t, RouterGVRs, objects(podinfoServices(map[string]string{AnnotationRPS: "10000"}),
		deployment("podinfo-primary", 2, true, nil),
		deployment("podinfo", 1, true, map[string]string{AnnotationErrorRate: "0.5", AnnotationLatencyMs: "250"}),
		[]runtime.Object{rootProxy(), generatedProxy(80, 20, false)})...)
	f.run(50)
	p := f.sum(MetricEnvoyRequests, match("envoy_cluster_name=test_podinfo-primary_9898"))
	c := f.sum(MetricEnvoyRequests, match("envoy_cluster_name=test_podinfo-canary_9898"))
	if p/c < 3.5 || p/c > 4.5 {
		t.Fatalf("primary/canary requests %v/%v, want an 80/20 split", p, c)
	}
	if got := f.successRate(MetricEnvoyRequests, "envoy_response_code", "envoy_cluster_name=test_podinfo-canary_9898"); got < 40 || got > 60 {
		t.Fatalf("canary success rate %v, want about 50", got)
	}
	f.wantP99("canary", f.p99(MetricEnvoyRequestTime, "envoy_cluster_name=test_podinfo-canary_9898"), 250, EnvoyBuckets, 0.2)
	if strings.TrimSpace(f.invOut.String()) != "" {
		t.Fatalf("invariant entries: %s", f.invOut.String())
	}
}
