package registry

import (
	"strings"
	"testing"

	"github.com/canary-release/terraform-provider-canary/internal/mesh/gatewayapi"
	"github.com/canary-release/terraform-provider-canary/internal/metrics"
)

var podinfo = metrics.Vars{Name: "podinfo-release", Namespace: "test", Target: "podinfo", Service: "podinfo", Ingress: "podinfo", Route: "podinfo", Interval: "1m"}

// builtin is Builtin, extended with "gatewayapi:<source>" for the gateway_api.metrics sources.
func builtin(provider, metric string) (string, bool) {
	if source, ok := strings.CutPrefix(provider, "gatewayapi:"); ok {
		q, ok := gatewayapi.QueriesFrom(source)[metric]
		return q, ok
	}
	return Builtin(provider, metric)
}

func TestRenderOSMExact(t *testing.T) {
	q, ok := builtin("osm", "request-success-rate")
	if !ok {
		t.Fatal("no osm request-success-rate")
	}
	got, err := metrics.Render(q, podinfo)
	if err != nil {
		t.Fatal(err)
	}
	want := `sum(rate(osm_request_total{destination_namespace="test",destination_kind="Deployment",destination_name="podinfo",response_code!~"5.*"}[1m]))` +
		` / sum(rate(osm_request_total{destination_namespace="test",destination_kind="Deployment",destination_name="podinfo"}[1m])) * 100`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}

	q, _ = builtin("osm", "request-duration")
	got, err = metrics.Render(q, podinfo)
	if err != nil {
		t.Fatal(err)
	}
	want = `histogram_quantile(0.99, sum(rate(osm_request_duration_ms_bucket{destination_namespace="test",destination_kind="Deployment",destination_name="podinfo"}[1m])) by (le))`
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
}

// Every built-in renders, leaves no template syntax behind and carries Flagger's selector.
func TestRenderBuiltins(t *testing.T) {
	selectors := map[string]string{
		"osm":    `destination_namespace="test",destination_kind="Deployment",destination_name="podinfo"`,
		"apisix": `route=~"test_podinfo-podinfo-canary_.+"`,
		"gloo":   `envoy_cluster_name=~"test-podinfo-canaryupstream-[0-9a-zA-Z-]+_[0-9a-zA-Z-]+"`,
		"istio":  `reporter="destination",destination_workload_namespace="test",destination_workload=~"podinfo"`,
	}
	for provider, selector := range selectors {
		for _, metric := range []string{"request-success-rate", "request-duration"} {
			q, ok := builtin(provider, metric)
			if !ok {
				t.Errorf("%s/%s missing", provider, metric)
				continue
			}
			got, err := metrics.Render(q, podinfo)
			if err != nil {
				t.Errorf("%s/%s: %v", provider, metric, err)
				continue
			}
			if strings.Contains(got, "{{") || !strings.Contains(got, selector) || !strings.Contains(got, "[1m]") {
				t.Errorf("%s/%s rendered %s", provider, metric, got)
			}
		}
	}
	if q, _ := builtin("apisix", "request-success-rate"); !strings.Contains(q, `code!~"5.."`) {
		t.Errorf("apisix success rate must exclude 5xx: %s", q)
	}
	if q, _ := builtin("apisix", "request-duration"); !strings.Contains(q, `type=~"request"`) {
		t.Errorf("apisix duration must select type request: %s", q)
	}
	if q, _ := builtin("gloo", "request-success-rate"); !strings.Contains(q, `envoy_response_code!~"5.*"`) {
		t.Errorf("gloo success rate must exclude 5xx: %s", q)
	}
	if q, _ := builtin("istio", "request-success-rate"); !strings.Contains(q, `response_code!~"5.*"`) {
		t.Errorf("istio success rate must exclude 5xx: %s", q)
	}
	if _, ok := builtin("kuma", "request-success-rate"); ok {
		t.Error("kuma is not a supported provider")
	}
	if _, ok := builtin("osm", "request-count"); ok {
		t.Error("request-count is not a built-in metric")
	}
}

func TestRenderHTTPRouteBuiltins(t *testing.T) {
	selectors := map[string][]string{
		"gatewayapi":         {`kubernetes_namespace="test",kubernetes_pod_name=~"podinfo-[0-9a-zA-Z]+(-[0-9a-zA-Z]+)"`, "http_request_duration_seconds_"},
		"gatewayapi:envoy":   {`envoy_cluster_name=~"httproute/test/podinfo/rule/[0-9]+"`, "envoy_cluster_upstream_rq"},
		"gatewayapi:istio":   {`reporter="destination",destination_workload_namespace="test",destination_workload=~"podinfo"`, "istio_request"},
		"gatewayapi:linkerd": {`namespace="test",deployment=~"podinfo"`, `direction="inbound"`},
		"linkerd":            {`namespace="test",deployment=~"podinfo"`, `direction="inbound"`},
	}
	for provider, want := range selectors {
		for _, metric := range []string{"request-success-rate", "request-duration"} {
			q, ok := builtin(provider, metric)
			if !ok {
				t.Errorf("%s/%s missing", provider, metric)
				continue
			}
			got, err := metrics.Render(q, podinfo)
			if err != nil {
				t.Fatalf("%s/%s: %v", provider, metric, err)
			}
			for _, w := range want {
				if !strings.Contains(got, w) || strings.Contains(got, "{{") || !strings.Contains(got, "[1m]") {
					t.Errorf("%s/%s rendered %s, want it to contain %s", provider, metric, got, w)
				}
			}
		}
	}
	// The generic duration is the application's histogram in seconds: it must come out in ms.
	if q, _ := builtin("gatewayapi", "request-duration"); !strings.HasSuffix(q, "by (le)) * 1000") {
		t.Errorf("generic duration not in ms: %s", q)
	}
	if q, _ := builtin("linkerd", "request-success-rate"); !strings.Contains(q, `classification!="failure"`) {
		t.Errorf("linkerd success rate must exclude failures: %s", q)
	}
}

func TestEveryGatewayMetricsSourceHasQueries(t *testing.T) {
	for _, source := range gatewayapi.MetricsSources {
		if _, ok := gatewayapi.QueriesFrom(source)["request-success-rate"]; !ok {
			t.Errorf("no built-in queries for gateway_api.metrics %q", source)
		}
	}
	if q, _ := gatewayapi.QueriesFrom(gatewayapi.MetricsGeneric)["request-duration"]; q != must("gatewayapi", "request-duration") {
		t.Error("the generic source is not gatewayapi's own built-in")
	}
}

// must is Builtin for a query the test knows exists.
func must(provider, metric string) string {
	q, _ := Builtin(provider, metric)
	return q
}
